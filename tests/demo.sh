#!/usr/bin/env bash
# `make demo`: the closed loop on the local lab, end to end, under a running load, with the
# lab's own calibrated performance model (inventories/local/calibration), not the prior.
#
#   lab up -> a table of 100,000 rows of 4,000 bytes (about 0.4 GB a node) in size-tiered
#   compaction (the default) -> the rush hour: an update-heavy closed loop (90 % updates of
#   20,000 of its rows, 10 % scans) that saturates the nodes -> the workload collector
#   samples them every 10 s (kairos collect, SQLite store) -> autopilot tick 1: export the
#   trace, forecast, plan with the lab's compaction model: size-tiered serves updates best,
#   no step -> the night: the load turns scan-heavy (90 % scans of 10 rows) -> tick 2
#   judges that window, learns from it, re-plans: leveled compaction serves scans better, by
#   more than the rewrite costs -> the executor applies the step under load -> tick 3 judges
#   the step's window -> the load stopped: ops, failures, lost acknowledged writes, and the
#   step's capacity gain, expected against observed -> kairos report.
#
# Nothing is forced into the plan: whatever the planner decides is applied when due (through
# the executor) or explained. Everything it writes is under .kairos/demo/. The lab is left
# running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0
export PYTHONDONTWRITEBYTECODE=1

STEP=10                 # seconds per collection round and trace step
FIRST_ROUNDS=10         # rounds before the first tick: a naive forecast needs 10 points
WINDOW=60               # seconds of a window the autopilot judges (after SETTLE)
SETTLE=50               # seconds after a change before its window: the load's turn, a rewrite
KEYS=100000             # rows of the table: 4,000 bytes each, about 0.4 GB a node
HOT_KEYS=20000          # the rows the update-heavy load rewrites
VALUE=4000
DEMO=.kairos/demo
HOSTS=cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3
# The enveloped lab's compaction calibration (inventories/local/calibration/PROVENANCE.md):
# leveled compaction serves scans better than size-tiered, and updates worse.
MODEL="$PWD/inventories/local/calibration/cassandra-compaction-model.json"
COMPACTION_SECONDS=30   # a compaction change's cost in seconds of full throughput (PROVENANCE.md)
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

# collect_for SECONDS: rounds every STEP s until SECONDS have passed (a round takes a few
# seconds of its own on the starved control host, so a count of rounds would not say how long).
# Every third round is the collect playbook's, which also reads each node's envelope: a node
# held at its CPU quota is saturated even when Cassandra's own queues look empty
# (docs/planning.md, "The learning loop"), so every judged window holds such a round.
collect_for() {
  local end=$(( $(date +%s) + $1 )) round=0 next
  while [ "$(date +%s)" -lt "$end" ]; do
    round=$(( round + 1 ))
    next=$(( $(date +%s) + STEP ))  # rounds start STEP s apart, as kairos collect's do
    if [ $(( round % 3 )) -eq 2 ]; then collect_resources; else collect 1; fi
    next=$(( next < end ? next : end ))  # the last round's sleep ends with the window
    sleep $(( next > $(date +%s) ? next - $(date +%s) : 0 ))
  done
}

collect_resources() {
  ansible-playbook playbooks/collect.yml -e "kairos_store=$PWD/$DEMO/kairos.db" \
      -e '{"kairos_collect_engines": ["cassandra"]}' > "$DEMO/collect-resources.log" 2>&1 \
    && echo "  collect: a round with each node's envelope (playbooks/collect.yml)" \
    || { echo "  collect: playbooks/collect.yml failed:"; tail -20 "$DEMO/collect-resources.log"; }
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
# Kairos' role has no grant on the application's data: the loads log in as the lab's app.
export KAIROS_LOAD_CASSANDRA_USERNAME=app
KAIROS_LOAD_CASSANDRA_PASSWORD="$(cat .lab/secrets/cassandra-app-password)"
export KAIROS_LOAD_CASSANDRA_PASSWORD
# Every connection is TLS, verified against the lab's CA (docs/security.md, "TLS").
for engine in CASSANDRA REDIS; do
  export "KAIROS_${engine}_TLS_CA=$PWD/.lab/tls/ca.pem"
  export "KAIROS_${engine}_TLS_CERT=$PWD/.lab/tls/kairos.pem"
  export "KAIROS_${engine}_TLS_KEY=$PWD/.lab/tls/kairos.key"
done
# The demo is the control host and its loads the application's machines: each in its own
# envelope, so neither takes the nodes' CPU (docs/envelopes.md). Without envelopes, nothing.
ENVELOPES=.lab/envelopes.json
KAIROS_LOAD_CGROUPS="$(python -c 'import os, sys; from planner.loadgen import envelope as e
e.enter_lab(sys.argv[1], int(sys.argv[2])); print(os.environ.get(e.ENV, ""))' "$ENVELOPES" "$$")"
export KAIROS_LOAD_CGROUPS
leave_lab() {  # out of the control envelope, so that `make lab-down` can remove it
  python -c 'import sys; from planner.loadgen import envelope as e
e.leave_lab(e.lab_envelopes(sys.argv[1]), int(sys.argv[2]))' "$ENVELOPES" "$$"
}

rm -rf "$DEMO" && mkdir -p "$DEMO"
cat > "$DEMO/current.yml" <<'EOF'
# What the lab runs before the demo (inventories/local: 512M heap; the rest the defaults).
heap_size: 512M
EOF

# Each run starts from new tables in size-tiered compaction (Cassandra's default): a step
# the last run applied is not carried over, and the scanned table's SSTables are the ones
# its own writes made (a switch back to size-tiered keeps the leveled layout). The dropped
# keyspaces' automatic snapshots are removed: they are this lab's scratch data.
say "new demo tables (the last run's dropped)"
python - <<'EOF'
import os
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from planner.workload.collect import cassandra_ssl_context
cluster = Cluster(["127.0.0.1"], auth_provider=PlainTextAuthProvider(
    os.environ["KAIROS_LOAD_CASSANDRA_USERNAME"], os.environ["KAIROS_LOAD_CASSANDRA_PASSWORD"]),
    ssl_context=cassandra_ssl_context())
session = cluster.connect()
# Only those that exist: the app may drop what it created, and Cassandra checks the DROP
# permission even for a keyspace that is not there.
existing = {r.keyspace_name for r in session.execute("SELECT keyspace_name FROM system_schema.keyspaces")}
for ks in ("kairos_demo", "kairos_demo_quiet", "kairos_demo_busy"):
    if ks in existing:
        session.execute(f"DROP KEYSPACE {ks}", timeout=120)
cluster.shutdown()
EOF
for ks in kairos_demo kairos_demo_quiet kairos_demo_busy; do
  rm -rf .lab/cassandra/cass*/data/"$ks"
done

say "write the table: ${KEYS} rows of ${VALUE} bytes (RF 3: about $(( KEYS * VALUE / 1000000 )) MB on each node)"
kairos load --engine cassandra --keyspace kairos_demo --keys "$KEYS" --max-keys "$KEYS" \
    --value-size "$VALUE" --preload --seconds 1 --cl ONE --concurrency 64 --processes 2 \
    --no-verify > "$DEMO/preload.stdout" 2>&1 || { cat "$DEMO/preload.stdout"; exit 1; }

# The rush hour: updates rewrite ${HOT_KEYS} rows over and over, and under size-tiered
# compaction each rewrite lands in another SSTable that spans the whole ring.
say "an update-heavy closed loop (90% updates of ${HOT_KEYS} rows, 10% scans) of 2 x 64 requests, QUORUM; the collector every ${STEP} s"
start_load updates --concurrency 64 --processes 2 --mix update=0.9,scan=0.1 \
    --keys "$HOT_KEYS" --max-keys "$HOT_KEYS" --value-size "$VALUE"
sleep 5
collect "$FIRST_ROUNDS"

AUTOPILOT=(ansible-playbook playbooks/autopilot.yml
  -e kairos_autopilot_dir="$PWD/$DEMO" -e kairos_autopilot_step_seconds="$STEP"
  # The forecast looks at the last 2 minutes (12 points): after the load turns, a longer
  # history holds the turn itself, and a naive forecast's interval then spans both mixes.
  -e kairos_autopilot_history=120s -e kairos_autopilot_horizon=60
  -e kairos_autopilot_forecast_model=naive
  # Time runs fast here (10 s steps): re-plan at most once a minute, not every 10 minutes.
  -e kairos_autopilot_min_replan_seconds=60
  -e kairos_autopilot_learn_settle="$SETTLE" -e kairos_autopilot_learn_window="$WINDOW"
  -e kairos_autopilot_current="$PWD/$DEMO/current.yml"
  -e kairos_cassandra_model_file="$MODEL"
  # A compaction change rewrites every SSTable of the table: priced at what the calibration
  # measured for the rewrite (PROVENANCE.md: 20-30 s for 1 GB a node with no load; the
  # demo's tables are smaller), not the 120 s assumed otherwise.
  # The loads are closed loops that take whatever the cluster serves (SOPHIA's clients): the
  # load the collector sees is the capacity, not the demand, so the plan credits capacity.
  # (The default, served work, credits capacity only up to the forecast load: on a saturated
  # cluster that is what it serves now, and a faster configuration would seem to gain little.)
  -e "{\"kairos_autopilot_plan_options\": {\"method\": \"dp\", \"served\": \"capacity\",
       \"compaction_seconds\": $COMPACTION_SECONDS}}"
  -e '{"kairos_autopilot_engines": ["cassandra"]}'  # the demo's load and trace are Cassandra's
  # A compaction step alters the loads' tables.
  -e '{"kairos_tables": ["kairos_demo.usertable"]}')

plan_in_force() {
  python -c "import json,sys; print(json.load(open(sys.argv[1]))['plan'])" "$DEMO/lab-cassandra-autopilot.json"
}

wait_for_rollouts
say "autopilot tick 1: collect, export the trace, forecast, plan with the lab's model, apply what is due"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick1: /'
FIRST_PLAN=$(plan_in_force)
say "the plan: $FIRST_PLAN"
kairos explain "$FIRST_PLAN" | sed -u 's/^/  /'

# The night: the load turns to scans of the whole table. The updates' load is stopped first:
# its verification reads back every row it acknowledged, before the scans' own updates could
# rewrite one. SETTLE covers that turn: the judged window starts SETTLE s after tick 1.
say "the load turns scan-heavy (scans of 10 rows from a random token, 10% updates): a closed loop of 2 x 64"
stop_load 0
start_load scans --concurrency 64 --processes 2 --mix scan=0.9,update=0.1 --keys "$KEYS" \
    --max-keys "$KEYS" --value-size "$VALUE"
collect_for $(( SETTLE + WINDOW + 10 ))  # the window judged, and a round past its end
wait_for_rollouts
say "autopilot tick 2: judge the scan-heavy window, learn from it, re-plan, apply what is due"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick2: /'
learning
PLAN=$(plan_in_force)
say "the plan in force: $PLAN"
kairos explain "$PLAN" | sed -u 's/^/  /'

say "a window of what the plan put in force (${SETTLE} s to settle, ${WINDOW} s judged)"
collect_for $(( SETTLE + WINDOW ))
wait_for_rollouts
say "autopilot tick 3: judge that window against the model"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick3: /'
learning

say "stop the load and verify every acknowledged write"
stop_load 1
LOADS=()
python - "$DEMO" "$PLAN" <<'EOF'
import json, sys
from pathlib import Path
from planner.autopilot.learning import learnt_paths, load_track
from planner.plan import load_plan
from planner.report.page import step_gain


def pct(v):
    return "n/a" if v is None else f"{v:+.0%}"


demo, plan = Path(sys.argv[1]), load_plan(sys.argv[2])
bad = False
for name in ("updates", "scans"):
    r = json.loads((demo / f"load-{name}.json").read_text())
    print(f"  load {name}: {r['ops']} ops in {r['seconds']:.0f} s ({r['ops_per_s']:.0f} ops/s), "
          f"failures {r['failed']} {r['failures'] or ''}, acknowledged writes "
          f"{r['acknowledged_writes']}, lost acknowledged writes "
          f"{r['lost_acknowledged_writes']}, verified {r['verified']}")
    bad |= bool(r["failed"] or r["lost_acknowledged_writes"] or not r["verified"])
track = load_track(learnt_paths(demo, "lab", "cassandra")["track"])
print("  the model against production (the autopilot's judgements):")
for j in track:
    mix = ", ".join(f"{c} {v:.0%}" for c, v in j["mix"].items() if v >= 0.005)
    print(f"    {j['step_id']}: {j['kind']}, {j['config'].get('compaction', '?')} ({mix}): "
          f"served {j['served_ops_per_s']:.0f} ops/s, predicted {j['predicted_ops_per_s']:.0f}, "
          f"error {j['error']:+.0%}")
for step in plan.steps:
    judged = [j for j in track if j["step_id"] == step.id and j["kind"] == "capacity"]
    served = ({"served": sum(j["served_ops_per_s"] for j in judged) / len(judged)}
              if judged else None)
    gain = step_gain(track, step.expected, served,
                     max(step.due.timestamp(), plan.created_at.timestamp()))
    before = gain["served_before"]
    changed = ', '.join(f'{k} -> {step.target[k]}' for k in (*step.live, *step.restart))
    print(f"  step {step.id} ({changed}): "
          f"capacity gain expected {pct(gain['expected'])}, observed {pct(gain['observed'])}"
          + (f" (served {before:.0f} ops/s in the saturated window before it, "
             f"{served['served']:.0f} after)" if before and served else ""))
if bad or not track:
    sys.exit("demo: FAILED (failures, lost or unverified writes, or no window judged)")
EOF

say "report: the plan in force, its steps, against what came"
kairos report --store "$DEMO/kairos.db" --cluster lab --engine cassandra --plan "$PLAN" \
    --forecast "${PLAN%.yml}.forecast.json" \
    --model-track "$DEMO/models/lab-cassandra-track.jsonl" \
    --title "Kairos demo: the lab's model against an update-heavy, then a scan-heavy load" \
    --out "$DEMO/report.html" | sed -u 's/^/  /'
kairos autopilot status --state-dir "$DEMO" | sed -u 's/^/  /'
say "done in $(( $(date +%s) - T0 )) s; report: $PWD/$DEMO/report.html; the lab is still running (make lab-down stops it)"
