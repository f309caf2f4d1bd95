#!/usr/bin/env bash
# `make demo`: the closed loop on the local lab, end to end, under a running load, with the
# lab's own calibrated performance model (inventories/local/calibration), not the prior.
#
#   lab up -> a write-heavy load rate-limited to 200 ops/s (far below what the lab serves)
#   -> the workload collector samples the nodes every 10 s (kairos collect, SQLite store)
#   -> autopilot tick 1: export the trace, forecast, plan with the lab's model, apply what is
#      due -> a window later, tick 2 judges the configuration in force against the model
#      (below saturation: a lower bound) -> the load turns into a read-heavy closed loop that
#      saturates the cluster -> tick 3 judges that window (a capacity), learns from it,
#      re-plans with the learnt model, and holds restart steps while the model's error is
#      high -> both loads stopped: ops, failures, lost acknowledged writes -> kairos report.
#
# Nothing is forced into the plan: whatever the planner decides is applied when due (through
# the executor) or explained. On this lab the calibrated model has no configuration effect
# (docs/calibration.md), so a plan that proposes no step is the expected outcome, and the demo
# shows why. Everything it writes is under .kairos/demo/. The lab is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0
export PYTHONDONTWRITEBYTECODE=1

STEP=10                 # seconds per collection round and trace step
FIRST_ROUNDS=12         # rounds before the first tick: a naive forecast needs 10 points
WINDOW=60               # seconds of a window the autopilot judges (after SETTLE)
SETTLE=20
RATE=200                # ops/s offered while the cluster is not saturated
DEMO=.kairos/demo
HOSTS=cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3
T0=$(date +%s)
LOADS=()

say() { printf '\n[demo %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

cleanup() {
  # Only the processes this script started, by their pid (never the lab).
  for pid in "${LOADS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  if declare -F leave_lab >/dev/null; then leave_lab || true; fi
}
trap cleanup EXIT

# A rollout in progress (someone else's) holds the cluster's lock: wait for it, do not break it.
wait_for_rollouts() {
  for _ in $(seq 1 90); do
    ls .kairos/*-cassandra.lock >/dev/null 2>&1 || return 0
    say "a rollout holds $(ls .kairos/*-cassandra.lock | head -1); waiting for it to finish"
    sleep 10
  done
}

# start_load NAME ARGS...: `kairos load` in the background (its result in $DEMO/load-NAME.json).
# A background job of a non-interactive shell starts with SIGINT ignored: give kairos load its
# Ctrl-C handling back, so that `kill -INT` stops it cleanly (drain, then verify).
start_load() {
  local name=$1; shift
  python -c 'import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)
from planner.cli import main; sys.exit(main(sys.argv[1:]))' \
      load --engine cassandra --keyspace "kairos_demo_$name" --seconds 1800 --seed 7 \
      --progress-interval 30 --json --out "$DEMO/load-$name.json" "$@" \
      > "$DEMO/load-$name.stdout" 2> >(sed -u "s/^/  load $name: /" >&2) &
  LOADS+=("$!")
}

# stop_load INDEX: stop that load and wait for its verification.
stop_load() {
  local pid=${LOADS[$1]}
  kill -0 "$pid" 2>/dev/null || { say "a load stopped early"; exit 1; }
  kill -INT "$pid"
  wait "$pid" || true
}

collect() {
  kairos collect --engine cassandra --hosts "$HOSTS" --cluster lab --store "$DEMO/kairos.db" \
      --count "$1" --interval "$STEP" 2>&1 | sed -u 's/^/  collect: /'
}

learning() {  # what the last tick learnt (autopilot.log.jsonl)
  python - "$DEMO/autopilot.log.jsonl" <<'EOF'
import json, sys
line = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"  tick outcome: {line['outcome']}; learning: {line.get('learning')}")
if line.get("restart_hold"):
    print(f"  restart hold: {line['restart_hold']}")
EOF
}

wait_for_rollouts
say "lab up (idempotent: a running lab is left as it is)"
make -s lab-up
# The lab runs CQL authentication: the kairos commands log in through the environment.
export KAIROS_CASSANDRA_USERNAME=kairos
KAIROS_CASSANDRA_PASSWORD="$(cat .lab/secrets/cassandra-cql-password)"
export KAIROS_CASSANDRA_PASSWORD
# The demo is the control host and its loads the application's machines: each in its own
# envelope, so neither takes the nodes' CPU (docs/envelopes.md). Without envelopes, nothing.
ENVELOPES=.lab/envelopes.json
KAIROS_LOAD_CGROUPS="$(python -c 'import os, sys; from planner import envelope as e
e.enter_lab(sys.argv[1], int(sys.argv[2])); print(os.environ.get(e.ENV, ""))' "$ENVELOPES" "$$")"
export KAIROS_LOAD_CGROUPS
leave_lab() {  # out of the control envelope, so that `make lab-down` can remove it
  python -c 'import sys; from planner import envelope as e
e.leave_lab(e.lab_envelopes(sys.argv[1]), int(sys.argv[2]))' "$ENVELOPES" "$$"
}

rm -rf "$DEMO" && mkdir -p "$DEMO"
cat > "$DEMO/current.yml" <<'EOF'
# What the lab runs before the demo (inventories/local: 512M heap; the rest the defaults).
heap_size: 512M
EOF

say "a write-heavy load (10% reads) at ${RATE} ops/s, QUORUM; the collector every ${STEP} s"
start_load quiet --rate "$RATE" --concurrency 16 --mix read=0.1,update=0.9
sleep 5
collect "$FIRST_ROUNDS"

AUTOPILOT=(ansible-playbook playbooks/autopilot.yml
  -e kairos_autopilot_dir="$PWD/$DEMO" -e kairos_autopilot_step_seconds="$STEP"
  -e kairos_autopilot_history=1h -e kairos_autopilot_horizon=60
  -e kairos_autopilot_forecast_model=naive
  # Time runs fast here (10 s steps): re-plan at most once a minute, not every 10 minutes.
  -e kairos_autopilot_min_replan_seconds=60
  -e kairos_autopilot_learn_settle="$SETTLE" -e kairos_autopilot_learn_window="$WINDOW"
  -e kairos_autopilot_current="$PWD/$DEMO/current.yml"
  -e '{"kairos_autopilot_plan_args": ["--method", "dp"]}'
  -e '{"kairos_autopilot_engines": ["cassandra"]}'  # the demo's load and trace are Cassandra's
  # A compaction step alters the loads' tables. The performance model is the inventory's:
  # the lab's calibrated one.
  -e '{"kairos_tables": ["kairos_demo_quiet.usertable", "kairos_demo_busy.usertable"]}')

wait_for_rollouts
say "autopilot tick 1: collect, export the trace, forecast, plan with the lab's model, apply what is due"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick1: /'
FIRST_PLAN=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['plan'])" "$DEMO/lab-cassandra-autopilot.json")
say "the plan: $FIRST_PLAN"
kairos explain "$FIRST_PLAN" | sed -u 's/^/  /'

say "a window of the configuration in force (${SETTLE} s to settle, ${WINDOW} s judged)"
collect $(( (SETTLE + WINDOW) / STEP ))
wait_for_rollouts
say "autopilot tick 2: judge the window against the model, then decide"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick2: /'
learning

say "the load turns read-heavy (90% reads) and saturates the cluster: a closed loop of 2 x 128 requests"
start_load busy --concurrency 128 --processes 2 --mix read=0.9,update=0.1
stop_load 0
collect $(( WINDOW / STEP + 2 ))
wait_for_rollouts
say "autopilot tick 3: judge the saturated window, learn from it, re-plan"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick3: /'
learning
PLAN=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['plan'])" "$DEMO/lab-cassandra-autopilot.json")
say "the plan in force: $PLAN"
kairos explain "$PLAN" | sed -u 's/^/  /'

say "stop the load and verify every acknowledged write"
stop_load 1
LOADS=()
python - "$DEMO" <<'EOF'
import json, sys
from pathlib import Path
from planner.learning import learnt_paths, load_track
demo = Path(sys.argv[1])
bad = False
for name in ("quiet", "busy"):
    r = json.loads((demo / f"load-{name}.json").read_text())
    print(f"  load {name}: {r['ops']} ops in {r['seconds']:.0f} s ({r['ops_per_s']:.0f} ops/s), "
          f"failures {r['failed']} {r['failures'] or ''}, acknowledged writes "
          f"{r['acknowledged_writes']}, lost acknowledged writes "
          f"{r['lost_acknowledged_writes']}, verified {r['verified']}")
    bad |= bool(r["failed"] or r["lost_acknowledged_writes"] or not r["verified"])
track = load_track(learnt_paths(demo, "lab", "cassandra")["track"])
print("  the model against production (the autopilot's judgements):")
for j in track:
    print(f"    {j['step_id']}: {j['kind']}, served {j['served_ops_per_s']:.0f} ops/s, "
          f"predicted {j['predicted_ops_per_s']:.0f}, error {j['error']:+.0%}")
if bad or not track:
    sys.exit("demo: FAILED (failures, lost or unverified writes, or no window judged)")
EOF

say "report: the first plan, in force while the load changed, against what came"
kairos report --store "$DEMO/kairos.db" --cluster lab --engine cassandra --plan "$FIRST_PLAN" \
    --forecast "${FIRST_PLAN%.yml}.forecast.json" \
    --model-track "$DEMO/models/lab-cassandra-track.jsonl" \
    --title "Kairos demo: the lab's model against a quiet, then a saturating load" \
    --out "$DEMO/report.html" | sed -u 's/^/  /'
kairos autopilot status --state-dir "$DEMO" | sed -u 's/^/  /'
say "done in $(( $(date +%s) - T0 )) s; report: $PWD/$DEMO/report.html; the lab is still running (make lab-down stops it)"
