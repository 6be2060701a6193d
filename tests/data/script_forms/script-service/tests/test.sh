#!/bin/bash
# the script serves the agent's site, then the tests fetch it
mkdir -p /app/site
python3 -m http.server 8765 --bind 127.0.0.1 --directory /app/site >/dev/null 2>&1 &
for i in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8765), 0.2)' 2>/dev/null && break; sleep 0.1; done
uvx -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
