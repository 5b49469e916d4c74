#!/usr/bin/env bash
# A one-node Slurm on this machine (slurmctld and slurmd on localhost, munge for authentication),
# for the Slurm backend's tests and for trying it out.
#
#   bash scripts/slurm-local.sh install  # Debian's slurm-wlm and munge, when missing (root; waits for dpkg's lock)
#   bash scripts/slurm-local.sh start    # installs them if missing, then starts munged, slurmctld, slurmd
#   bash scripts/slurm-local.sh status   # exit 0 when sbatch/squeue answer
#   bash scripts/slurm-local.sh stop     # stops what start started, cancels its jobs
#   bash scripts/slurm-local.sh start-private DIR  # a private one-node Slurm: DIR/slurm.conf, free ports,
#                                                  # state in DIR; use it with SLURM_CONF=DIR/slurm.conf
#   bash scripts/slurm-local.sh stop-private DIR
#
# The private cluster (the tests' own) never touches /etc/slurm and runs beside any other Slurm on
# the machine: its own ClusterName, SlurmctldPort/SlurmdPort picked free, its own state, spool, pid
# and log files, daemons started with -f DIR/slurm.conf. munge is shared: started when not running,
# stopped by stop or stop-private when this script started it and no slurmctld is left.
#
# State (config, spool, logs) lives in $TRAINGUARD_SLURM_DIR (default /tmp/trainguard-slurm).
# The config goes to /etc/slurm/slurm.conf only when there is none or it is one of ours: a real
# cluster's configuration is never touched (start refuses instead).
set -euo pipefail
DIR=${TRAINGUARD_SLURM_DIR:-/tmp/trainguard-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# trainguard one-node Slurm (scripts/slurm-local.sh)"
# the node offers more CPUs than this machine has (config_overrides): pilots are mostly idle
# supervisors, and a test needs a replacement pilot to start while another one still runs
CPUS=${TRAINGUARD_SLURM_CPUS:-8}
MEM_MB=${TRAINGUARD_SLURM_MEM_MB:-16000}

die() { echo "slurm-local.sh: $*" >&2; exit 1; }

answers() { timeout 10 squeue -h >/dev/null 2>&1 && timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; }

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "slurmctld/slurmd/munged are not installed and this is not root: apt-get install slurm-wlm munge"
  command -v apt-get >/dev/null || die "no apt-get here: install Slurm (slurmctld, slurmd) and munge yourself"
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq slurm-wlm munge >/dev/null 2>&1 ||
    { apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq slurm-wlm munge >/dev/null; }
}

write_config() {
  if [ -f "$CONF" ] && ! head -1 "$CONF" | grep -qF "$MARK"; then
    die "$CONF exists and is not ours: this machine has a Slurm configuration already; use that Slurm"
  fi
  mkdir -p /etc/slurm
  write_config_to "$CONF" "$DIR" trainguard ""
}

# write_config_to CONF DIR CLUSTER PORTS_LINES
write_config_to() {
  local conf=$1 dir=$2 cluster=$3 ports=$4 host
  host=$(hostname -s)
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  local DIR=$dir
  cat >"$conf" <<CONFEOF
$MARK
ClusterName=$cluster
SlurmctldHost=$host(127.0.0.1)
$ports
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
EnforcePartLimits=ALL
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdParameters=config_overrides
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=04:00:00 DefMemPerCPU=1000 State=UP
CONFEOF
}

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c "munged" 2>/dev/null || munged --force
  else
    munged --force
  fi
  echo started >"$DIR/munge.ours"
}

start() {
  mkdir -p "$DIR"
  if answers; then echo "slurm-local.sh: Slurm already answers (sinfo: $(sinfo -h -o '%P %T %c' | head -1))"; return 0; fi
  install_packages
  write_config
  start_munge
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 1 60); do
    if answers; then
      scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
      echo "slurm-local.sh: one-node Slurm up ($(sinfo -h -o '%P %T cpus=%c mem=%m' | head -1))"
      return 0
    fi
    # a node left down or drained by an earlier run comes back
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  tail -5 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
  die "Slurm did not come up in 60 s (logs above, in $DIR/log)"
}

stop_pid() {
  local file=$1
  [ -f "$file" ] || return 0
  local pid
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$file"
}

stop() {
  if [ -f "$CONF" ] && head -1 "$CONF" | grep -qF "$MARK"; then
    timeout 10 scancel --user="$(id -un)" >/dev/null 2>&1 || true
    sleep 1
    stop_pid "$DIR/slurmd.pid"
    stop_pid "$DIR/slurmctld.pid"
    stop_munge_if_last
    echo "slurm-local.sh: stopped"
  else
    echo "slurm-local.sh: no one-node Slurm of ours here"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_private() {
  local dir=${1:?usage: start-private DIR}
  mkdir -p "$dir"
  chmod 700 "$dir"
  dir=$(cd "$dir" && pwd)
  local conf="$dir/slurm.conf" ctld slurmd_port
  install_packages
  ctld=$(free_port)
  slurmd_port=$(free_port)
  while [ "$slurmd_port" = "$ctld" ]; do slurmd_port=$(free_port); done
  write_config_to "$conf" "$dir" "tg$(basename "$dir" | tr -cd 'a-z0-9' | tail -c 8)" \
    "SlurmctldPort=$ctld
SlurmdPort=$slurmd_port"
  mkdir -p "$DIR"
  # munged is shared by every cluster on the machine: a private cluster's stop (stop_munge_if_last)
  # must not take it away between this start of it and this slurmctld coming up
  exec 9>"$DIR/munge.lock"
  flock 9
  start_munge
  export SLURM_CONF=$conf
  slurmctld -f "$conf"
  flock -u 9
  exec 9>&-
  slurmd -f "$conf"
  for _ in $(seq 1 60); do
    if answers; then
      scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
      echo "SLURM_CONF=$conf"
      return 0
    fi
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
  die "the private Slurm did not come up in 60 s (logs above, in $dir/log)"
}

stop_private() {
  local dir=${1:?usage: stop-private DIR}
  [ -f "$dir/slurm.conf" ] || return 0
  SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --user="$(id -un)" >/dev/null 2>&1 || true
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_munge_if_last
}

# munged goes when this script started it and no slurmctld is left to use it (another private
# cluster, `start`'s, or a Slurm of the machine's own keeps it running)
stop_munge_if_last() {
  [ -f "$DIR/munge.ours" ] || return 0
  exec 9>"$DIR/munge.lock"
  flock 9
  if ! pgrep -x slurmctld >/dev/null; then
    stop_pid /run/munge/munged.pid
    rm -f "$DIR/munge.ours"
  fi
  flock -u 9
  exec 9>&-
}

case "${1:-}" in
  install) install_packages ;;
  start) start ;;
  stop) stop ;;
  status) answers ;;
  start-private) start_private "${2:-}" ;;
  stop-private) stop_private "${2:-}" ;;
  *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
