# A private one-node Slurm for the end-to-end tests: munged, slurmctld and slurmd from Debian's
# packages (slurm-wlm, munge) with their state, sockets and logs under one folder and free ports,
# so a test runs beside any Slurm the machine has. Source it, then `slurm_up DIR` (exports
# SLURM_CONF; fails where the daemons are missing or this is not root) and `slurm_down`. The node
# claims 64 CPUs (config_overrides), so batch scripts written for cluster nodes fit on it.

slurm_up() {  # slurm_up DIR
  local dir=$1
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null &&
    [ "$(id -u)" = 0 ] || return 1
  mkdir -p "$dir"/state "$dir"/spool "$dir"/log "$dir"/munge
  chmod 700 "$dir/munge"
  port() { python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
  dd if=/dev/urandom of="$dir/munge/key" bs=1024 count=1 2>/dev/null
  chmod 400 "$dir/munge/key"
  munged --key-file="$dir/munge/key" --socket="$dir/munge/socket" --pid-file="$dir/munge/pid" \
    --log-file="$dir/munge/log" --seed-file="$dir/munge/seed" --force || return 1
  cat >"$dir/slurm.conf" <<CONF
ClusterName=fathom-test
SlurmctldHost=$(hostname -s)
SlurmctldPort=$(port)
SlurmdPort=$(port)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$(hostname -s) CPUs=64 RealMemory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurm_dir=$dir
  slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || return 1
  for _ in $(seq 1 100); do
    sinfo -h -o %T 2>/dev/null | grep -q idle && return 0
    sleep 0.1
  done
  return 1
}

slurm_down() {  # stops the daemons, waiting (up to 10 s) until they have left their folder
  [ -n "${slurm_dir:-}" ] || return 0
  local pids=()
  for pid_file in slurmd.pid slurmctld.pid munge/pid; do
    [ -f "$slurm_dir/$pid_file" ] && pids+=("$(cat "$slurm_dir/$pid_file")")
  done
  kill "${pids[@]}" 2>/dev/null
  for _ in $(seq 1 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  slurm_dir=""
}
