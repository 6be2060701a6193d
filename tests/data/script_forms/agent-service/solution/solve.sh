#!/bin/bash
cd /app
nohup python3 -m http.server 8766 --bind 127.0.0.1 >/dev/null 2>&1 &
echo $! > /app/server.pid
for i in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8766), 0.2)' 2>/dev/null && break; sleep 0.1; done
