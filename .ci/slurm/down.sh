#!/usr/bin/env bash
# Stop the single-node Slurm that .ci/slurm/up.sh started: slurmd, slurmctld, slurmdbd,
# MariaDB, munged, in that order, each only if up.sh recorded its pid (daemons that were
# already running before up.sh are left alone).
#
#     sudo bash .ci/slurm/down.sh            # stop; keep state, logs and config
#     sudo bash .ci/slurm/down.sh --purge    # also remove $T1_SLURM_STATE and the config files
set -uo pipefail

STATE=${T1_SLURM_STATE:-/var/tmp/t1-slurm}
MARK="# written by t1 .ci/slurm/up.sh"
T0=$(date +%s%N)

# stop NAME: TERM the recorded pid, wait up to 20 s, then KILL
stop() {
	local name=$1 pidfile="$STATE/run/$1.pid" pid i
	[ -s "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "slurm-down: $name ($pid) ignored TERM for 20 s; killing it"
			kill -KILL "$pid" 2>/dev/null
		fi
		echo "slurm-down: stopped $name ($pid)"
	fi
	rm -f "$pidfile"
}

for name in slurmd slurmctld slurmdbd; do
	stop "$name"
done
if [ "${1:-}" = "--purge" ] && [ -s "$STATE/run/mariadb.pid" ]; then
	# job ids restart at 1 with a fresh StateSaveLocation: forget the old accounting too
	mariadb --socket=/run/mysqld/mysqld.sock -uroot -e 'DROP DATABASE IF EXISTS slurm_acct_db' &&
		echo "slurm-down: dropped the accounting database"
fi
for name in mariadb munged; do
	stop "$name"
done

if [ "${1:-}" = "--purge" ]; then
	for f in /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf /etc/slurm/gres.conf; do
		[ -e "$f" ] && head -n1 "$f" | grep -qF "$MARK" && rm -f "$f"
	done
	rm -rf "$STATE"
	echo "slurm-down: removed $STATE and the config files up.sh wrote"
fi
ms=$((($(date +%s%N) - T0) / 1000000))
echo "slurm-down: done in $((ms / 1000)).$((ms % 1000 / 100)) s"
