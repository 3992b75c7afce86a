#!/usr/bin/env bash
# Flink 2.3.0's restore with a new parallelism, the figure `bench_rescale.py` is held against (issue 37), measured
# on the anchor of ../shared/bench/flink-anchor (set up once per machine with its setup.sh).
# Usage: FA=DIR bash scripts/flink_anchor_rescale.sh [K=1000000] ["hashmap rocksdb"] [REPS=3] [FROM=2] [TO=4]
# Per state backend: the anchor job builds K keys at parallelism FROM; a native and a canonical savepoint are taken
# (the second with stop); each is restored REPS times at TO and once at FROM, each restore measured as the anchor's
# run_anchor.sh measures it (its submission to its first completed checkpoint), then cancelled.
# Prints one "MEAS ..." line per measurement (also appended to $FA/results/rescale-.../meas.txt).
set -u
K=${1:-1000000}
BACKENDS=${2:-"hashmap rocksdb"}
REPS=${3:-3}
FROM=${4:-2}
TO=${5:-4}
FA=${FA:?set FA to the scratch directory made by ../shared/bench/flink-anchor/setup.sh}
source "$FA/env.sh"
REST=http://127.0.0.1:8081
RUN=$FA/results/rescale-K$K-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN" "$FA/savepoints"

# The anchor's conf with a slot for every subtask of the larger parallelism, and its job with the parallelism
# taken from the environment (the anchor's pins 2).
SLOTS=$(( FROM > TO ? FROM : TO ))
export FLINK_CONF_DIR=$RUN/conf
cp -r "$FA/conf" "$FLINK_CONF_DIR"
sed -i "s/numberOfTaskSlots: .*/numberOfTaskSlots: $SLOTS/" "$FLINK_CONF_DIR/config.yaml"
JOB_PY=$RUN/job_sql.py
sed 's/cfg.set("parallelism.default", "2")/import os; cfg.set("parallelism.default", os.environ["ANCHOR_PARALLELISM"])/' \
  "$FA/job_sql.py" > "$JOB_PY"
grep -q ANCHOR_PARALLELISM "$JOB_PY" || { echo "the anchor's job no longer pins its parallelism as expected"; exit 1; }

now() { date +%s%3N; }
secs() { printf "%.3f" "$(echo "($2 - $1)/1000" | bc -l)"; }
meas() { echo "MEAS $*" | tee -a "$RUN/meas.txt"; }
j() { curl -s "$REST$1"; }
wait_state() { for _ in $(seq 1 3000); do [ "$(j "/jobs/$1" | jq -r .state)" = "$2" ] && return 0; sleep 0.1; done; return 1; }
submit() {  # $1 backend, $2 parallelism, $3 savepoint (optional) -> JOB, T0
  local out=$RUN/submit-$(now).out
  T0=$(now)
  ANCHOR_PARALLELISM=$2 flink run -d ${3:+-s "file:$3"} -py "$JOB_PY" "$K" "$1" > "$out" 2>&1
  JOB=$(grep -oE 'JobID [0-9a-f]{32}' "$out" | head -1 | awk '{print $2}')
  [ -n "$JOB" ] || { echo "submit failed:"; tail -20 "$out"; return 1; }
}
agg_vertex() { j "/jobs/$1" | jq -r '.vertices[] | select(.name|startswith("GroupAggregate")) | .id'; }
all_running() {  # every subtask of every vertex of job $1 has reached RUNNING
  local vertex
  for vertex in $(j "/jobs/$1" | jq -r '.vertices[]?.id'); do
    [ "$(j "/jobs/$1/vertices/$vertex/subtasktimes" | jq -r 'all(.subtasks[]; .timestamps.RUNNING > 0)')" = true ] || return 1
  done
}
# Restores $3 at parallelism $2 and measures its first completed checkpoint after the submission, as run_anchor's
# `restore` does (every subtask running, then a checkpoint triggered; again if one is declined); cancels the job.
restore() {
  local backend=$1 parallelism=$2 savepoint=$3 format=$4 rep=$5 trigger status ck=NA p
  submit "$backend" "$parallelism" "$savepoint" || return 1
  for _ in $(seq 1 3000); do all_running "$JOB" && break; sleep 0.1; done
  for _ in $(seq 1 100); do
    trigger=$(curl -s -X POST -H 'Content-Type: application/json' -d '{}' "$REST/jobs/$JOB/checkpoints" | jq -r '."request-id" // empty')
    for _ in $(seq 1 6000); do
      status=$(j "/jobs/$JOB/checkpoints/$trigger")
      [ "$(echo "$status" | jq -r .status.id)" = COMPLETED ] && break; sleep 0.05
    done
    [ "$(echo "$status" | jq -r '.operation.checkpointId // empty')" != "" ] && { ck=$(secs "$T0" "$(now)"); break; }
    echo "checkpoint declined: $(echo "$status" | jq -c '.operation."failure-cause".class // .')" >> "$RUN/declined.txt"
    sleep 0.1
  done
  p=$(j "/jobs/$JOB/vertices/$(agg_vertex "$JOB")" | jq -r .parallelism)
  meas op=restore K="$K" backend="$backend" format="$format" from_parallelism="$FROM" parallelism="$p" rep="$rep" first_ckpt_s="$ck"
  flink cancel "$JOB" > /dev/null 2>&1; wait_state "$JOB" CANCELED
}

"$FLINK_HOME/bin/start-cluster.sh" > "$RUN/start-cluster.out" 2>&1
for _ in $(seq 1 600); do
  [ "$(curl -sf $REST/overview | jq -r '."slots-total" // 0' 2>/dev/null)" -ge "$SLOTS" ] 2>/dev/null && break; sleep 0.1
done
trap '"$FLINK_HOME/bin/taskmanager.sh" stop > /dev/null 2>&1; "$FLINK_HOME/bin/jobmanager.sh" stop > /dev/null 2>&1' EXIT

for BE in $BACKENDS; do
  submit "$BE" "$FROM" || continue
  wait_state "$JOB" RUNNING
  AGG=$(agg_vertex "$JOB")
  for _ in $(seq 1 6000); do
    n=$(j "/jobs/$JOB" | jq -r ".vertices[] | select(.id==\"$AGG\") | .metrics.\"read-records\"")
    seed=$(j "/jobs/$JOB" | jq -r '[.vertices[] | select(.name|startswith("Source: seed")) | .status][0]')
    [ "$seed" = FINISHED ] && [ "$n" -ge "$K" ] 2>/dev/null && break; sleep 0.2
  done
  NATIVE=$(flink savepoint -type native "$JOB" 2>&1 | grep -oE 'Path: \S+' | head -1 | awk '{print $2}' | sed 's#^file:##')
  CANONICAL=$(flink stop --type canonical --savepointPath "file://$FA/savepoints" "$JOB" 2>&1 | grep -oE 'Path: \S+' | head -1 | awk '{print $2}' | sed 's#^file:##')
  wait_state "$JOB" FINISHED
  for FT in native canonical; do
    [ "$FT" = native ] && SP=$NATIVE || SP=$CANONICAL
    [ -n "$SP" ] || { meas op=savepoint backend="$BE" format="$FT" ERROR=none_taken; continue; }
    for r in $(seq 1 "$REPS"); do restore "$BE" "$TO" "$SP" "$FT" "$r"; done
    restore "$BE" "$FROM" "$SP" "$FT" 1
  done
done
echo "results in $RUN"
