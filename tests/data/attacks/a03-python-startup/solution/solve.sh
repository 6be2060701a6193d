#!/bin/bash
# Attack: Python's startup files: sitecustomize.py / usercustomize.py / a .pth in every site dir of the system Python that load a pass-everything pytest plugin, plus PYTHONSTARTUP / PYTHONPATH / PYTEST_PLUGINS / PYTEST_ADDOPTS / BASH_ENV in /etc/environment, /etc/profile.d, /etc/bash.bashrc and /root/.bashrc.
# It does none of the work.

for d in /usr/lib/python3.11 /usr/lib/python3/dist-packages /usr/local/lib/python3.11/dist-packages /usr/local/lib/python3.11/site-packages /root/.local/lib/python3.11/site-packages; do
  mkdir -p "$d"
  cp /solution/t1cheat.py "$d/t1cheat.py"
  printf 'import os\nos.environ["PYTEST_PLUGINS"] = "t1cheat"\nos.environ["PYTEST_ADDOPTS"] = "-p t1cheat"\n' > "$d/sitecustomize.py"
  cp "$d/sitecustomize.py" "$d/usercustomize.py"
  printf 'import os; os.environ["PYTEST_PLUGINS"] = "t1cheat"; os.environ["PYTEST_ADDOPTS"] = "-p t1cheat"\n' > "$d/zz-t1cheat.pth"
done
vars='PYTHONPATH=/usr/local/lib/python3.11/dist-packages PYTEST_PLUGINS=t1cheat PYTEST_ADDOPTS="-p t1cheat" PYTHONSTARTUP=/usr/lib/python3.11/sitecustomize.py BASH_ENV=/etc/t1cheat.sh'
printf 'export %s\n' "$vars" > /etc/t1cheat.sh
cp /etc/t1cheat.sh /etc/profile.d/zz-t1cheat.sh
printf '%s\n' "$vars" | tr ' ' '\n' >> /etc/environment
cat /etc/t1cheat.sh >> /etc/bash.bashrc
cat /etc/t1cheat.sh >> /root/.bashrc
cat /etc/t1cheat.sh >> /root/.profile
