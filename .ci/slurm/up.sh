#!/usr/bin/env bash
# Bring up a single-node Slurm cluster on this machine: munged, MariaDB + slurmdbd (so `sacct`
# works), slurmctld and slurmd, all on localhost. Idempotent: daemons already running are kept.
#
#     sudo bash .ci/slurm/up.sh          # then: sbatch --wait --wrap hostname; sacct -j <id>
#     sudo bash .ci/slurm/down.sh        # stops what up.sh started
#
# Needs root and Debian's packages: slurm-wlm slurmdbd munge mariadb-server (CI apt-installs
# them; this script installs nothing). Service managers are not used (policy-rc.d denies
# service starts in containers): every daemon is started directly and its pid recorded under
# $T1_SLURM_STATE/run, so down.sh stops exactly what was started here.
#
# Environment (all optional):
#   T1_SLURM_STATE   state, logs, pid files   (default /var/tmp/t1-slurm)
#   T1_SLURM_CPUS    CPUs the node offers     (default: nproc)
#   T1_SLURM_GPUS    fake GPUs, gres gpu:N with dummy device files (default 0)
#   T1_SLURM_TIMEOUT seconds to wait for the node and sacct (default 120)
#
# Config written: /etc/slurm/slurm.conf, slurmdbd.conf, gres.conf (each starts with a marker
# line; a foreign file is never overwritten). Facts it relies on: DESIGN.md §5.
set -euo pipefail

STATE=${T1_SLURM_STATE:-/var/tmp/t1-slurm}
CPUS=${T1_SLURM_CPUS:-$(nproc)}
GPUS=${T1_SLURM_GPUS:-0}
TIMEOUT=${T1_SLURM_TIMEOUT:-120}
CLUSTER=t1
ETC=/etc/slurm
MARK="# written by t1 .ci/slurm/up.sh"
MYSQL_SOCK=/run/mysqld/mysqld.sock
T0=$(date +%s%N)
# elapsed: seconds since start, one decimal
elapsed() {
	local ms=$((($(date +%s%N) - T0) / 1000000))
	printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

say() { printf '[slurm-up %5ss] %s\n' "$(elapsed)" "$*"; }
die() {
	echo "slurm-up: $*" >&2
	for f in "$STATE"/log/*.log; do [ -f "$f" ] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }; done
	exit 1
}
[ "$(id -u)" = 0 ] || die "must run as root (it starts munged, mariadbd and the Slurm daemons)"
for b in munged mariadbd slurmdbd slurmctld slurmd sacctmgr sinfo sacct; do
	command -v "$b" >/dev/null || die "$b not found: apt-get install slurm-wlm slurmdbd munge mariadb-server"
done

mkdir -p "$STATE"/{run,log,ctld,spool}
# alive NAME: the daemon recorded in run/NAME.pid is running
alive() { [ -s "$STATE/run/$1.pid" ] && kill -0 "$(cat "$STATE/run/$1.pid")" 2>/dev/null; }
# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds
wait_for() {
	local limit=$1 what=$2 end
	shift 2
	end=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
		sleep 0.2
	done
}
# write_conf PATH MODE: stdin -> PATH unless PATH is someone else's file
write_conf() {
	local path=$1 mode=$2 tmp
	if [ -e "$path" ] && ! head -n1 "$path" | grep -qF "$MARK"; then
		die "$path exists and was not written by this script; move it away first"
	fi
	tmp=$(mktemp "$path.XXXX")
	{
		echo "$MARK"
		cat
	} >"$tmp"
	chmod "$mode" "$tmp"
	mv -f "$tmp" "$path"
}

# ---------------------------------------------------------------- config
conf_sum() { cat "$ETC/slurm.conf" "$ETC/gres.conf" 2>/dev/null | md5sum || true; }
sum_before=$(conf_sum)
mem_mb=$(awk '/MemTotal/ {print int($2/1024) - 1024}' /proc/meminfo)
mkdir -p "$ETC"
gres_node=""
if [ "$GPUS" -gt 0 ]; then
	mkdir -p "$STATE/dev"
	for ((i = 0; i < GPUS; i++)); do
		[ -e "$STATE/dev/fakegpu$i" ] || mknod "$STATE/dev/fakegpu$i" c 1 3 2>/dev/null || touch "$STATE/dev/fakegpu$i"
	done
	gres_node="Gres=gpu:$GPUS"
	write_conf "$ETC/gres.conf" 644 <<-EOF
		NodeName=localhost Name=gpu File=$STATE/dev/fakegpu[0-$((GPUS - 1))]
	EOF
elif [ -e "$ETC/gres.conf" ] && head -n1 "$ETC/gres.conf" | grep -qF "$MARK"; then
	rm -f "$ETC/gres.conf"
fi

write_conf "$ETC/slurm.conf" 644 <<-EOF
	ClusterName=$CLUSTER
	SlurmctldHost=localhost
	SlurmUser=root
	SlurmdUser=root
	AuthType=auth/munge
	StateSaveLocation=$STATE/ctld
	SlurmdSpoolDir=$STATE/spool
	SlurmctldPidFile=$STATE/run/slurmctld.pid
	SlurmdPidFile=$STATE/run/slurmd.pid
	SlurmctldLogFile=$STATE/log/slurmctld.log
	SlurmdLogFile=$STATE/log/slurmd.log
	SlurmctldDebug=info
	SlurmdDebug=info
	ProctrackType=proctrack/linuxproc
	TaskPlugin=task/none
	MpiDefault=none
	SwitchType=switch/none
	SchedulerType=sched/backfill
	SelectType=select/cons_tres
	SelectTypeParameters=CR_Core_Memory
	DefMemPerCPU=1024
	SlurmdParameters=config_overrides
	ReturnToService=2
	JobRequeue=1
	MinJobAge=300
	KillWait=10
	InactiveLimit=0
	SlurmctldTimeout=30
	SlurmdTimeout=60
	GresTypes=gpu
	JobAcctGatherType=jobacct_gather/linux
	JobAcctGatherFrequency=30
	AccountingStorageType=accounting_storage/slurmdbd
	AccountingStorageHost=localhost
	AccountingStorageTRES=gres/gpu
	NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem_mb $gres_node State=UNKNOWN
	PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

write_conf "$ETC/slurmdbd.conf" 600 <<-EOF
	AuthType=auth/munge
	DbdHost=localhost
	SlurmUser=root
	PidFile=$STATE/run/slurmdbd.pid
	LogFile=$STATE/log/slurmdbd.log
	DebugLevel=info
	StorageType=accounting_storage/mysql
	StorageHost=localhost
	StorageUser=slurm
	StoragePass=slurm
	StorageLoc=slurm_acct_db
EOF

conf_changed=0
[ "$(conf_sum)" = "$sum_before" ] || conf_changed=1

# ---------------------------------------------------------------- munged
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
	say "munged already answering"
else
	[ -s /etc/munge/munge.key ] || {
		dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
		chown munge:munge /etc/munge/munge.key
		chmod 400 /etc/munge/munge.key
	}
	mkdir -p /run/munge /var/lib/munge /var/log/munge
	chown munge:munge /run/munge /var/lib/munge /var/log/munge
	chmod 755 /run/munge
	runuser -u munge -- munged --pid-file=/run/munge/munged.pid
	wait_for 20 munged bash -c 'munge -n | unmunge'
	cp /run/munge/munged.pid "$STATE/run/munged.pid"
	say "munged started"
fi

# ---------------------------------------------------------------- MariaDB
if mariadb-admin --socket=$MYSQL_SOCK ping >/dev/null 2>&1; then
	say "MariaDB already answering"
else
	if [ ! -d /var/lib/mysql/mysql ]; then
		mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$STATE/log/mariadb-install.log" 2>&1 ||
			die "mariadb-install-db failed (see $STATE/log/mariadb-install.log)"
	fi
	mkdir -p /run/mysqld
	chown mysql:mysql /run/mysqld
	setsid nohup mariadbd --user=mysql --datadir=/var/lib/mysql --socket=$MYSQL_SOCK \
		--pid-file=/run/mysqld/mysqld.pid --skip-networking=0 --bind-address=127.0.0.1 \
		--innodb-buffer-pool-size=64M --log-error="$STATE/log/mariadb.log" \
		</dev/null >/dev/null 2>&1 &
	echo $! >"$STATE/run/mariadb.pid"
	wait_for 60 MariaDB mariadb-admin --socket=$MYSQL_SOCK ping
	say "MariaDB started"
fi
mariadb --socket=$MYSQL_SOCK -uroot <<-EOF || die "could not create the slurm database user"
	CREATE DATABASE IF NOT EXISTS slurm_acct_db;
	CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
	GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
	FLUSH PRIVILEGES;
EOF

# ---------------------------------------------------------------- slurmdbd
if alive slurmdbd; then
	say "slurmdbd already running"
else
	slurmdbd || die "slurmdbd did not start"
	wait_for 60 slurmdbd sacctmgr -n show cluster
	say "slurmdbd started"
fi
if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
	sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
fi
if ! sacctmgr -n -P show account format=account | grep -qx "$CLUSTER"; then
	sacctmgr -i add account "$CLUSTER" Cluster="$CLUSTER" Description=ci Organization=ci >/dev/null
fi
for user in root ${SUDO_USER:-}; do
	sacctmgr -n -P show assoc user="$user" account="$CLUSTER" format=user | grep -qx "$user" ||
		sacctmgr -i add user "$user" Account="$CLUSTER" DefaultAccount="$CLUSTER" >/dev/null
done
say "cluster '$CLUSTER' registered"

# ---------------------------------------------------------------- slurmctld, slurmd
if [ "$conf_changed" = 1 ] && { alive slurmctld || alive slurmd; }; then
	say "slurm.conf changed: restarting slurmctld and slurmd"
	for name in slurmd slurmctld; do
		if alive $name; then
			pid=$(cat "$STATE/run/$name.pid")
			kill -TERM "$pid"
			wait_for 30 "$name to stop" bash -c "! kill -0 $pid"
		fi
	done
fi
if alive slurmctld; then
	say "slurmctld already running"
else
	slurmctld || die "slurmctld did not start"
	wait_for 60 slurmctld scontrol ping
	say "slurmctld started"
fi
if alive slurmd; then
	say "slurmd already running"
else
	slurmd -N localhost || die "slurmd did not start"
	say "slurmd started"
fi

node_ready() {
	local state
	state=$(sinfo -h -n localhost -o %T 2>/dev/null | head -n1)
	case "$state" in
	idle | mixed | allocated) return 0 ;;
	down* | drain* | fail*) scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
	esac
	return 1
}
wait_for "$TIMEOUT" "node localhost to be idle (sinfo)" node_ready
wait_for "$TIMEOUT" "sacct to answer" bash -c 'sacct -n -X -S now-1minutes >/dev/null'
say "ready: $(sinfo -h -o '%P %T %c CPUs %m MB %G' | head -n1); sacct answers"
echo "slurm-up: cluster $CLUSTER up in $(elapsed) s (state: $STATE)"
