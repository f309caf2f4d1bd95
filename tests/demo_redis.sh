#!/usr/bin/env bash
# `make demo-redis`: the closed loop on the lab's Redis Cluster, under a running load that
# shifts, with the lab's calibrated Redis model (inventories/local/calibration/redis-model.json).
#
#   lab up -> the Redis nodes set to the configuration the calibration started from
#   (allkeys-lfu, hash-max-listpack-entries 512) -> the day: 7,000 hashes of 256-768 fields
#   (about 73 MB a primary as hashtables, 42 MB as listpacks, against maxmemory 64mb)
#   written much more than read (hash-write), by a closed loop that takes what the cluster
#   serves -> the load turns read-heavy (hash-read) -> the collector samples every 10 s
#   (kairos collect, SQLite store; every third round with each node's envelope) -> autopilot
#   tick 1 judges the last window against the declared configuration, forecasts, plans with
#   the lab's model and applies what is due: at 512 entries half the hashes are hashtables
#   and the data does not fit, so the model expects more from listpacks up to 1024 entries
#   (a reload: each node restarts on its new conf file, replicas first, a failover before
#   each primary, and is read back; only a reload re-encodes the hashes it holds) -> the
#   window after the step (SETTLE s as the cache refills, WINDOW s judged) -> tick 2 judges it
#   -> the load stopped: ops, failures, lost WAIT-acknowledged writes, and the step's gain,
#   expected against observed.
#
# Nothing is forced into the plan: whatever the planner decides is applied when due (through
# the Redis executor) or explained. Everything it writes is under .kairos/demo-redis/. The lab
# is left running, in whatever configuration the plan left it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0
export PYTHONDONTWRITEBYTECODE=1

STEP=${KAIROS_DEMO_STEP:-10}    # seconds per collection round and trace step
DAY=${KAIROS_DEMO_DAY:-40}      # seconds of the write-heavy day before the load turns
FIRST_ROUNDS=10                 # rounds of the read-heavy load before tick 1 (naive: 10 points)
WINDOW=${KAIROS_DEMO_WINDOW:-60}  # seconds of a window the autopilot judges (after SETTLE)
SETTLE=${KAIROS_DEMO_SETTLE:-60}  # seconds after a change: the cache refills
KEYS=7000                       # hashes, as in the calibration (PROVENANCE.md, redis-*)
DEMO=$(realpath -m "${KAIROS_DEMO_DIR:-.kairos/demo-redis}")
PREFIX=kairos_demo_redis
HOSTS=redis1=127.0.0.1:7001,redis2=127.0.0.1:7002,redis3=127.0.0.1:7003,redis4=127.0.0.1:7004,redis5=127.0.0.1:7005,redis6=127.0.0.1:7006
ENGINE=redis
DEMO_NAME=demo-redis
# say, the loads (start_load, stop_load), the rounds (collect, collect_for), learning,
# plan_in_force, wait_for_rollouts, the envelopes: shared with tests/demo.sh.
# shellcheck source=tests/demo_lib.sh
. tests/demo_lib.sh

unlink_keys() {  # unlink_keys PREFIX...: UNLINK every key of those load prefixes
  python - "$@" <<'EOF'
import sys
from planner import loadgen
for prefix in sys.argv[1:]:
    n = loadgen.unlink_load_keys(loadgen.LoadConfig(engine="redis", prefix=prefix))
    print(f"  unlinked {n} keys of {prefix}:*")
EOF
}

wait_for_rollouts
lab_up
# Kairos' own ACL login reads the nodes and drives the executor; the loads log in as the
# lab's application user; every connection is TLS (bench/lab_env.sh, docs/security.md).
# shellcheck source=bench/lab_env.sh
. bench/lab_env.sh
enter_envelopes

rm -rf "$DEMO" && mkdir -p "$DEMO"
# Where the calibration started (PROVENANCE.md, redis-*), inside the model's range: set
# through the Redis change-settings playbook (live: CONFIG SET, the conf file, read back).
wait_for_rollouts
say "the nodes to allkeys-lfu and hash-max-listpack-entries 512 (playbooks/change_settings_redis.yml)"
ansible-playbook playbooks/change_settings_redis.yml \
    -e '{"settings": {"maxmemory-policy": "allkeys-lfu", "hash-max-listpack-entries": 512}}' \
    > "$DEMO/settings.log" 2>&1 || { tail -40 "$DEMO/settings.log"; exit 1; }
# What the nodes run now, every parameter of the space, read back with CONFIG GET: the
# configuration tick 1 judges and plans from (the executor refuses a plan whose current values
# differ from what the nodes run).
python - "$HOSTS" "$DEMO/current.yml" <<'EOF'
import sys
import yaml
from planner.calibrate.redis_bench import read_running_redis
from planner.model.spaces import get_space
running, version = read_running_redis(list(get_space("redis").parameters),
                                      hosts=sys.argv[1].split(","))
with open(sys.argv[2], "w") as f:
    f.write(f"# What the Redis nodes ran (Redis {version}, CONFIG GET on every node), written by "
            "tests/demo_redis.sh\n")
    yaml.safe_dump(running, f, sort_keys=True)
print(f"  {sys.argv[2]}: maxmemory-policy {running['maxmemory-policy']}, "
      f"hash-max-listpack-entries {running['hash-max-listpack-entries']}, "
      f"maxmemory {running['maxmemory']}")
EOF
# Each run starts from an empty data set: the last run's hashes (and any other load's keys)
# would be in the encoding of the configuration they were written under.
unlink_keys "$PREFIX" kairos_load

say "the day: write-heavy hashes (hash-write: 80% HSET, 20% reads filling a miss with the whole hash), 8 client threads"
start_load write --prefix "$PREFIX" --keys "$KEYS" --distribution uniform --shape hash-write
collect_for "$DAY"
say "the load turns read-heavy (hash-read: 90% reads, 10% writes); the collector every ${STEP} s"
stop_load 0
start_load read --prefix "$PREFIX" --keys "$KEYS" --distribution uniform --shape hash-read \
    --mix read=0.9,write=0.1
collect_for $(( FIRST_ROUNDS * STEP ))

AUTOPILOT=(ansible-playbook playbooks/autopilot.yml
  -e kairos_autopilot_dir="$DEMO" -e kairos_autopilot_step_seconds="$STEP"
  # The forecast looks at the last 3 minutes: the day's end and the read-heavy load (a round
  # late under load still leaves the 10 points a naive forecast needs).
  -e kairos_autopilot_history=180s -e kairos_autopilot_horizon=60
  -e kairos_autopilot_forecast_model=naive
  -e kairos_autopilot_min_replan_seconds=60
  -e kairos_autopilot_learn_settle="$SETTLE" -e kairos_autopilot_learn_window="$WINDOW"
  # Before any plan, tick 1 judges the last window against this declared configuration.
  -e kairos_autopilot_redis_current="$DEMO/current.yml"
  # The load is a closed loop that takes whatever the cluster serves: the load the collector
  # sees is the capacity, not the demand, so the plan credits capacity.
  -e '{"kairos_autopilot_redis_plan_options": {"method": "dp", "served": "capacity"}}'
  -e '{"kairos_autopilot_engines": ["redis"]}')

wait_for_rollouts
say "autopilot tick 1: judge the declared configuration's window, forecast, plan with the lab's model, apply what is due"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick1: /'
learning
PLAN=$(plan_in_force)
say "the plan in force: $PLAN"
kairos explain "$PLAN" | sed -u 's/^/  /'

say "a window of what the plan put in force (${SETTLE} s to settle, ${WINDOW} s judged)"
collect_for $(( SETTLE + WINDOW + STEP ))
wait_for_rollouts
say "autopilot tick 2: judge that window against the model"
"${AUTOPILOT[@]}" 2>&1 | sed -u 's/^/  tick2: /'
learning

say "stop the load and verify every WAIT-acknowledged write"
stop_load 1
LOADS=()
python tests/demo_summary.py redis "$DEMO" "$PLAN" --loads write,read \
    --show maxmemory-policy,hash-max-listpack-entries
kairos autopilot status --state-dir "$DEMO" --engine redis | sed -u 's/^/  /'
# The demo's hashes fill every node to maxmemory: removed, so that another load's keys are not
# evicted to make room for them (the configuration the plan left is kept).
unlink_keys "$PREFIX"
say "done in $(( $(date +%s) - T0 )) s; the lab is still running (make lab-down stops it)"
