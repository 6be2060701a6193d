#!/bin/bash
# Reference solution: write the two files, start the server detached, wait until it answers.
set -euo pipefail
cd /app/site
echo '<html><body><h1>Hello from T1</h1></body></html>' > index.html
echo '{"status": "ok"}' > health.json
nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory /app/site > /tmp/http.log 2>&1 &
for _ in $(seq 50); do
  curl -fsS http://127.0.0.1:8000/health.json > /dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "server did not come up" >&2
exit 1
