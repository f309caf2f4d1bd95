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
DEMO=$PWD/.kairos/demo
HOSTS=cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3
# The enveloped lab's compaction calibration (inventories/local/calibration/PROVENANCE.md):
# leveled compaction serves scans better than size-tiered, and updates worse.
MODEL="$PWD/inventories/local/calibration/cassandra-compaction-model.json"
COMPACTION_SECONDS=30   # a compaction change's cost in seconds of full throughput (PROVENANCE.md)
ENGINE=cassandra
DEMO_NAME=demo
# say, the loads (start_load, stop_load), the rounds (collect, collect_for), learning,
# plan_in_force, wait_for_rollouts, the envelopes: shared with tests/demo_redis.sh.
# shellcheck source=tests/demo_lib.sh
. tests/demo_lib.sh

wait_for_rollouts
lab_up
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
enter_envelopes

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
start_load updates --keyspace kairos_demo_updates --concurrency 64 --processes 2 --mix update=0.9,scan=0.1 \
    --keys "$HOT_KEYS" --max-keys "$HOT_KEYS" --value-size "$VALUE"
sleep 5
collect "$FIRST_ROUNDS"

AUTOPILOT=(ansible-playbook playbooks/autopilot.yml
  -e kairos_autopilot_dir="$DEMO" -e kairos_autopilot_step_seconds="$STEP"
  # The forecast looks at the last 150 s (15 points): after the load turns, a longer history
  # would hold the turn itself, and a naive forecast's interval would then span both mixes;
  # a shorter one, where a round under load comes late, leaves fewer than the 10 points a
  # naive forecast needs (the collect playbook's rounds take 20-28 s under the scans).
  -e kairos_autopilot_history=150s -e kairos_autopilot_horizon=60
  -e kairos_autopilot_forecast_model=naive
  # Time runs fast here (10 s steps): re-plan at most once a minute, not every 10 minutes.
  -e kairos_autopilot_min_replan_seconds=60
  -e kairos_autopilot_learn_settle="$SETTLE" -e kairos_autopilot_learn_window="$WINDOW"
  -e kairos_autopilot_current="$DEMO/current.yml"
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
start_load scans --keyspace kairos_demo_scans --concurrency 64 --processes 2 --mix scan=0.9,update=0.1 --keys "$KEYS" \
    --max-keys "$KEYS" --value-size "$VALUE"
# The window judged, and 40 s past its end: the 150 s of history tick 2 forecasts from then
# begin after the turn (the first round after it counts the interval across the turn).
collect_for $(( SETTLE + WINDOW + 40 ))
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
python tests/demo_summary.py cassandra "$DEMO" "$PLAN" --loads updates,scans --show compaction

say "report: the plan in force, its steps, against what came"
kairos report --store "$DEMO/kairos.db" --cluster lab --engine cassandra --plan "$PLAN" \
    --forecast "${PLAN%.yml}.forecast.json" \
    --model-track "$DEMO/models/lab-cassandra-track.jsonl" \
    --title "Kairos demo: the lab's model against an update-heavy, then a scan-heavy load" \
    --out "$DEMO/report.html" | sed -u 's/^/  /'
kairos autopilot status --state-dir "$DEMO" | sed -u 's/^/  /'
say "done in $(( $(date +%s) - T0 )) s; report: $DEMO/report.html; the lab is still running (make lab-down stops it)"
