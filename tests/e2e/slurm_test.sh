#!/usr/bin/env bash
# End to end on Slurm: a one-node cluster on this machine (munged,
# slurmctld and slurmd from Debian's slurm-wlm, two stand-in GPUs as GRES)
# runs deploy/slurm/evotune-workers.sbatch against a daemon with per-role
# tokens. Stand-in workers (--evaluator=synthetic) tune a search to its end;
# one worker's job step is scancel'ed mid-search: its trial is requeued and
# the search finishes with every trial measured. Needs root (slurmd runs
# jobs as their users); skips (77) where the Slurm daemons are not installed.
#
#   slurm_test.sh EVOTUNED EVOTUNE EVOTUNE_WORKER SBATCH_SCRIPT
set -euo pipefail
evotuned=$1
evotune=$2
worker=$3
script=$4
for tool in munged slurmctld slurmd sbatch scancel squeue; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: slurmd needs root"; exit 77; }

work=$(mktemp -d /tmp/evslurm.XXXXXX)  # Short: the munge socket's path.
chmod 755 "$work"
pids=()
cleanup() {
  [ -z "${slurm_job:-}" ] || scancel "$slurm_job" 2>/dev/null || true
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  pkill -9 -f "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log "$work"/*.out; do [ -f "$f" ] && { echo "--- $f" >&2; tail -30 "$f" >&2; }; done
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 10))); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for $what"
}

# --- A one-node cluster.
dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge.key"
munged --force --foreground --key-file="$work/munge.key" --socket="$work/munge.sock" \
  --pid-file="$work/munged.pid" --seed-file="$work/munge.seed" \
  --log-file="$work/munged.log" 2>>"$work/munged.log" &
pids+=($!)
wait_for 10 munged test -S "$work/munge.sock"
node=$(hostname -s)
mkdir -p "$work/state" "$work/spool" "$work/gpus"
# Stand-in GPUs: character devices (gres/gpu insists), copies of /dev/null.
mknod "$work/gpus/gpu0" c 1 3
mknod "$work/gpus/gpu1" c 1 3
cat >"$work/slurm.conf" <<CONF
ClusterName=evotunetest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
echo "NodeName=$node Name=gpu File=$work/gpus/gpu[0-1]" >"$work/gres.conf"
export SLURM_CONF=$work/slurm.conf
slurmctld -D -i 2>>"$work/slurmctld.log" &
pids+=($!)
slurmd -D 2>>"$work/slurmd.log" &
pids+=($!)
node_idle() { sinfo -h -n "$node" -o %T 2>/dev/null | grep -q idle; }
wait_for 30 "the Slurm node" node_idle

# --- The daemon on the "head node", with a token per role.
printf 'client-secret\n' >"$work/client-token"
printf 'worker-secret\n' >"$work/worker-token"
chmod 600 "$work"/*-token
"$evotuned" --db="$work/evotune.db" --listen=127.0.0.1:0 --port_file="$work/port" \
  --evaluator=synthetic --workers=0 --lease_timeout_s=2 \
  --token_file="$work/client-token" --worker_token_file="$work/worker-token" \
  2>>"$work/daemon.log" &
pids+=($!)
daemon_pid=$!
wait_for 20 "the daemon" test -s "$work/port"
address=127.0.0.1:$(cat "$work/port")
cli() { "$evotune" --address="$address" --token_file="$work/client-token" "$@"; }

# --- Workers through the sbatch script: one job, a step per GPU.
slurm_job=$(cd "$work" && EVOTUNE_DAEMON=$address EVOTUNE_TOKEN_FILE=$work/worker-token \
  EVOTUNE_WORKER=$worker EVOTUNE_WORKER_FLAGS="--evaluator=synthetic --synthetic_delay_ms=250" \
  sbatch --parsable --gres=gpu:2 --ntasks=2 --output="$work/workers-%j.out" "$script") ||
  fail "sbatch refused the script"
registered() { [ "$(grep -c "registered" "$work/daemon.log")" -ge 2 ]; }
wait_for 60 "two workers to register" registered
grep -q "worker $node:slurm$slurm_job.0 registered" "$work/daemon.log" || fail "worker 0's name"
# The token stays off every command line.
for p in $(pgrep -f "$worker"); do
  ! tr '\0' ' ' </proc/"$p"/cmdline | grep -q secret || fail "a token on a command line"
done

# --- A search; one worker's step cancelled mid-search.
job=$(cli submit --template_name=naive --strategy=exhaustive --max_trials=24) || fail "submit"
trials_done() { [ "$(sqlite3 "$work/evotune.db" "SELECT trials_done FROM jobs WHERE id='$job'")" -ge "$1" ]; }
wait_for 60 "the search to start" trials_done 4
step=$(squeue -h -s -j "$slurm_job" -o "%i %j" | awk '$2 == "evotune-worker-1" {print $1}')
[ -n "$step" ] || fail "no step evotune-worker-1 in $(squeue -h -s -j "$slurm_job" -o "%i %j")"
scancel "$step"
cli watch "$job" >"$work/watch.out" 2>&1 || fail "watch: $(tail -2 "$work/watch.out")"
grep -q "succeeded: 24 trials" "$work/watch.out" || fail "search: $(tail -1 "$work/watch.out")"
grep -q "worker $node:slurm$slurm_job.1 dropped" "$work/daemon.log" || fail "the cancelled worker was not dropped"
grep -q "requeued after a worker went down" "$work/daemon.log" || fail "the cancelled worker's trial was not requeued"
# Nothing lost: 24 configs evaluated once each, none recorded as crashed or
# timed out (statuses 6 and 5); the stand-in fails two on purpose.
q="SELECT COUNT(DISTINCT config_key), SUM(status IN (5, 6)) FROM trials"
[ "$(sqlite3 "$work/evotune.db" "$q")" = "24|0" ] ||
  fail "trials: $(sqlite3 "$work/evotune.db" "SELECT status, COUNT(*) FROM trials GROUP BY status")"
# The other worker is still there; cancelling the job ends it.
[ "$(squeue -h -s -j "$slurm_job" -o %j | grep -c evotune-worker-)" = 1 ] || fail "steps left: $(squeue -h -s -j "$slurm_job")"
scancel "$slurm_job"
gone() { [ -z "$(squeue -h -j "$slurm_job" 2>/dev/null)" ]; }
wait_for 30 "the workers' job to end" gone
kill -0 "$daemon_pid" || fail "daemon died"
echo "slurm e2e: 1 passed, 0 failed"
