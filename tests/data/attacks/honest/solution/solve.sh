#!/bin/bash
# The honest solution: does the work.
set -euo pipefail
printf 'hello world\n' > /app/greeting.txt
printf '#!/bin/bash\necho ok\n' > /app/run.sh
