#!/usr/bin/env bash
# Does a saturation signal tell a saturated Cassandra lab from a busy one? (a script, not a
# test; `make lab-up` first). A closed loop of 2 x 128 requests, then a load rate-limited to
# 200 ops/s, 50 s each (QUORUM, 90 % reads); `kairos collect` every 5 s during each; then,
# per round, the busiest node's requests in flight, the queued request-stage tasks and
# whether planner.autopilot.learning.round_saturated calls the round saturated. docs/planning.md
# ("The learning loop") quotes its output.
set -euo pipefail
cd "$(dirname "$0")/.."
export KAIROS_CASSANDRA_USERNAME=kairos
KAIROS_CASSANDRA_PASSWORD=$(head -1 .lab/secrets/cassandra-cql-password)
export KAIROS_CASSANDRA_PASSWORD
export KAIROS_LOAD_CASSANDRA_USERNAME=app
KAIROS_LOAD_CASSANDRA_PASSWORD=$(head -1 .lab/secrets/cassandra-app-password)
export KAIROS_LOAD_CASSANDRA_PASSWORD
export KAIROS_CASSANDRA_TLS_CA=$PWD/.lab/tls/ca.pem KAIROS_CASSANDRA_TLS_CERT=$PWD/.lab/tls/kairos.pem \
       KAIROS_CASSANDRA_TLS_KEY=$PWD/.lab/tls/kairos.key
HOSTS=cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3
STORE=$(mktemp -d)/saturation.db
for case in closed-loop:"--concurrency 128 --processes 2" rate-200:"--rate 200 --concurrency 8"; do
  name=${case%%:*}
  # shellcheck disable=SC2086  # the load's options are words
  .venv/bin/kairos load --engine cassandra --hosts 127.0.0.1,127.0.0.2,127.0.0.3 --seconds 50 \
      ${case#*:} --mix read=0.9,update=0.1 --keys 20000 --cl QUORUM --keyspace kairos_sat \
      --no-verify --json --out "$STORE.$name.json" > /dev/null 2>&1 &
  load=$!
  sleep 8
  .venv/bin/kairos collect --engine cassandra --hosts "$HOSTS" --cluster "$name" \
      --store "$STORE" --count 7 --interval 5 > /dev/null
  wait "$load"
done
.venv/bin/python - "$STORE" <<'PY'
import json, sys
from planner.autopilot.learning import round_saturated
from planner.workload.store import Store
path = sys.argv[1]
with Store(path) as store:
    for name in ("closed-loop", "rate-200"):
        load = json.load(open(f"{path}.{name}.json"))
        rounds = store.gauge_rounds("cassandra", name)
        print(f"{name}: client {load['ops_per_s']:.0f} ops/s, p99 {load['latency_ms']['p99']:.0f} ms; "
              "in flight / queued / saturated per round:",
              [(int(g.values.get("active_requests", -1)), int(g.values.get("pending_tasks", -1)),
                round_saturated("cassandra", g.values)) for g in rounds],
              "coordinator p99 read ms:", sorted({g.values.get("p99_ms_read") for g in rounds}))
PY
