#!/usr/bin/env bash
# A throwaway one-node Slurm cluster (2 CPUs) for tests/test_slurm.py: Debian's slurm-wlm and munge.
#
#   eval "$(.ci/slurm.sh)"       # starts it (or finds it running); prints `export SLURM_CONF=...` on stdout
#   sinfo; sbatch ...; squeue    # the client commands read that SLURM_CONF
#   .ci/slurm.sh stop            # stops every daemon this script started (and only those)
#
# Everything Slurm writes lives in GENLAB_SLURM_DIR (default /tmp/genlab-slurm): its own slurm.conf, state,
# spool, logs and pid files, so /etc/slurm is never touched and a system cluster, if any, is left alone.
# munge is the system's (/etc/munge/munge.key, made by the package); munged is started only if none runs.
# Idempotent: a second call finds the daemons running and only waits for the node to be idle again.
# Needs root (or sudo) to install the packages and to run slurmd, which starts jobs as their owner.
# Logs go to stderr; stdout carries only the export line.
set -euo pipefail

DIR="${GENLAB_SLURM_DIR:-/tmp/genlab-slurm}"
CPUS="${GENLAB_SLURM_CPUS:-2}"
CONF="$DIR/slurm.conf"
log() { echo "slurm.sh: $*" >&2; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# A daemon this script started has its pid file in $DIR; `stop` stops exactly those.
# /proc, not `kill -0`: without root, kill -0 on a root daemon fails with EPERM though it runs.
running() { [ -s "$1" ] && [ -d "/proc/$(cat "$1")" ]; }
stop_one() {
    local name="$1" pidfile="$2"
    if running "$pidfile"; then
        log "stopping $name (pid $(cat "$pidfile"))"
        $SUDO kill "$(cat "$pidfile")"
        for _ in $(seq 50); do running "$pidfile" || break; sleep 0.2; done
        if running "$pidfile"; then $SUDO kill -9 "$(cat "$pidfile")" || true; fi
    fi
    $SUDO rm -f "$pidfile"
}

if [ "${1:-}" = "stop" ]; then
    stop_one slurmd "$DIR/slurmd.pid"
    stop_one slurmctld "$DIR/slurmctld.pid"
    stop_one munged "$DIR/munged.pid"     # only if this script started it
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurm-wlm and munge (apt-get)"
    # Another apt-get may hold the lock (a CI step, a parallel install): wait for it instead of failing.
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        slurm-wlm munge >&2 \
      || { $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
           $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
               slurm-wlm munge >&2; }
fi

$SUDO mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
$SUDO chmod 755 "$DIR"

# -- munge: Slurm's authentication. The package's postinst makes the key; make one if it did not.
if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    $SUDO mungekey --create --keyfile=/etc/munge/munge.key >&2 2>/dev/null \
      || $SUDO sh -c 'dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null'
    $SUDO chown munge:munge /etc/munge/munge.key
    $SUDO chmod 0400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    $SUDO mkdir -p /run/munge && $SUDO chown munge:munge /run/munge
    # munged refuses to run as root: run it as the package's `munge` user. --pid-file records it as ours.
    $SUDO touch "$DIR/munged.pid" && $SUDO chown munge "$DIR/munged.pid"
    $SUDO runuser -u munge -- /usr/sbin/munged --pid-file="$DIR/munged.pid" --force >&2
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
    munge -n | unmunge >/dev/null || { log "munged does not answer"; exit 1; }
fi

# -- slurm.conf: one node, this host, $CPUS CPUs, no cgroups (containers and CI VMs may not delegate them).
HOST="$(hostname -s)"
MEM_MB=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
NEW="$(mktemp)"
cat > "$NEW" <<EOF
# Written by .ci/slurm.sh: a one-node test cluster. Do not edit; rerun the script.
ClusterName=genlab
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${GENLAB_SLURMCTLD_PORT:-56817}
SlurmdPort=${GENLAB_SLURMD_PORT:-56818}
# Processes are tracked by their parent pid, not cgroups; no task affinity plugin.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# No slurmdbd here (sacct needs one, and a MariaDB behind it): finished jobs stay visible to
# \`scontrol show job\` for an hour, and every finished job is also written to the jobcomp file.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
MinJobAge=3600
# CPUs are the scheduled resource; memory requests are checked against RealMemory but not reserved.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=2
ReturnToService=2
# The node's hardware may differ from what is written here (a 4-CPU CI VM): use this file's numbers.
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
if ! cmp -s "$NEW" "$CONF"; then
    $SUDO cp "$NEW" "$CONF"
    $SUDO chmod 644 "$CONF"
    # A changed configuration needs the daemons restarted to take it.
    if running "$DIR/slurmctld.pid" || running "$DIR/slurmd.pid"; then
        log "slurm.conf changed: restarting the daemons"
        stop_one slurmd "$DIR/slurmd.pid"
        stop_one slurmctld "$DIR/slurmctld.pid"
    fi
fi
rm -f "$NEW"
export SLURM_CONF="$CONF"

if ! running "$DIR/slurmctld.pid"; then
    log "starting slurmctld"
    $SUDO env SLURM_CONF="$CONF" slurmctld -f "$CONF" >&2
fi
if ! running "$DIR/slurmd.pid"; then
    log "starting slurmd"
    $SUDO env SLURM_CONF="$CONF" slurmd -f "$CONF" >&2
fi

# Wait until the node is idle (a node left `down` or `drained` by an earlier run is resumed).
state=""
for i in $(seq 120); do
    state="$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n 1 || true)"
    case "$state" in
        idle) break ;;
        down*|drain*|fail*)
            [ $((i % 10)) -eq 1 ] && $SUDO env SLURM_CONF="$CONF" scontrol update nodename="$HOST" state=resume \
                >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
if [ "$state" != idle ]; then
    log "node $HOST is '${state:-unknown}', not idle, after 60 s; logs in $DIR/log"
    tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    exit 1
fi
log "node $HOST idle with $CPUS CPUs"
echo "export SLURM_CONF=$CONF"
