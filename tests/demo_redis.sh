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
#   (a live CONFIG SET, written into each node's conf file and read back) -> the window after
#   the step (SETTLE s to re-encode as the cache refills, WINDOW s judged) -> tick 2 judges it
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

STEP=10                         # seconds per collection round and trace step
DAY=${KAIROS_DEMO_DAY:-40}      # seconds of the write-heavy day before the load turns
FIRST_ROUNDS=10                 # rounds of the read-heavy load before tick 1 (naive: 10 points)
WINDOW=${KAIROS_DEMO_WINDOW:-60}  # seconds of a window the autopilot judges (after SETTLE)
SETTLE=${KAIROS_DEMO_SETTLE:-60}  # seconds after a change: the cache refills, re-encoded
KEYS=7000                       # hashes, as in the calibration (PROVENANCE.md, redis-*)
DEMO=$(realpath -m "${KAIROS_DEMO_DIR:-.kairos/demo-redis}")
PREFIX=kairos_demo_redis
T0=$(date +%s)
LOADS=()

say() { printf '\n[demo-redis %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

cleanup() {
  # Only the processes this script started, by their pid (never the lab).
  for pid in "${LOADS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  if declare -F leave_lab >/dev/null; then leave_lab || true; fi
}
trap cleanup EXIT

# A rollout in progress (someone else's) holds the cluster's lock: wait for it, do not break it.
wait_for_rollouts() {
  for _ in $(seq 1 90); do
    ls .kairos/*-redis.lock >/dev/null 2>&1 || return 0
    say "a rollout holds $(ls .kairos/*-redis.lock | head -1); waiting for it to finish"
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
      load --engine redis --prefix "$PREFIX" --keys "$KEYS" --distribution uniform \
      --seconds 1800 --seed 7 --progress-interval 30 --json --out "$DEMO/load-$name.json" "$@" \
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

# collect_for SECONDS: rounds every STEP s until SECONDS have passed. Every third round is the
# collect playbook's, which also reads each node's envelope: a Redis node held at its CPU
# quota is saturated although its main thread is busy only a quarter of the time.
collect_for() {
  local end=$(( $(date +%s) + $1 )) round=0 next
  while [ "$(date +%s)" -lt "$end" ]; do
    round=$(( round + 1 ))
    next=$(( $(date +%s) + STEP ))
    if [ $(( round % 3 )) -eq 2 ]; then collect_resources; else collect; fi
    next=$(( next < end ? next : end ))
    sleep $(( next > $(date +%s) ? next - $(date +%s) : 0 ))
  done
}

collect_resources() {
  ansible-playbook playbooks/collect.yml -e "kairos_store=$DEMO/kairos.db" \
      -e '{"kairos_collect_engines": ["redis"]}' > "$DEMO/collect-resources.log" 2>&1 \
    && echo "  collect: a round with each node's envelope (playbooks/collect.yml)" \
    || { echo "  collect: playbooks/collect.yml failed:"; tail -20 "$DEMO/collect-resources.log"; }
}

collect() {
  kairos collect --engine redis --hosts "$HOSTS" --cluster lab --store "$DEMO/kairos.db" \
      --count 1 2>&1 | sed -u 's/^/  collect: /'
}

unlink_keys() {  # unlink_keys PREFIX...: UNLINK every key of those load prefixes
  python - "$@" <<'EOF'
import sys
from planner import loadgen
for prefix in sys.argv[1:]:
    n = loadgen.unlink_load_keys(loadgen.LoadConfig(engine="redis", prefix=prefix))
    print(f"  unlinked {n} keys of {prefix}:*")
EOF
}

learning() {  # what the last tick learnt (autopilot.log.jsonl)
  python - "$DEMO/autopilot.log.jsonl" <<'EOF'
import json, sys
line = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"  tick outcome: {line['outcome']}; learning: {line.get('learning')}")
EOF
}

wait_for_rollouts
say "lab up (idempotent: a running lab is left as it is)"
make -s lab-up
# Kairos' own ACL login reads the nodes and drives the executor; the loads log in as the
# lab's application user; every connection is TLS (bench/lab_env.sh, docs/security.md).
# shellcheck source=bench/lab_env.sh
. bench/lab_env.sh
HOSTS=redis1=127.0.0.1:7001,redis2=127.0.0.1:7002,redis3=127.0.0.1:7003,redis4=127.0.0.1:7004,redis5=127.0.0.1:7005,redis6=127.0.0.1:7006
# The demo is the control host and its load the application's machine: each in its own
# envelope, so neither takes the nodes' CPU (docs/envelopes.md).
ENVELOPES=.lab/envelopes.json
KAIROS_LOAD_CGROUPS="$(python -c 'import os, sys; from planner.loadgen import envelope as e
e.enter_lab(sys.argv[1], int(sys.argv[2])); print(os.environ.get(e.ENV, ""))' "$ENVELOPES" "$$")"
export KAIROS_LOAD_CGROUPS
leave_lab() {  # out of the control envelope, so that `make lab-down` can remove it
  python -c 'import sys; from planner.loadgen import envelope as e
e.leave_lab(e.lab_envelopes(sys.argv[1]), int(sys.argv[2]))' "$ENVELOPES" "$$"
}

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
start_load write --shape hash-write
collect_for "$DAY"
say "the load turns read-heavy (hash-read: 90% reads, 10% writes); the collector every ${STEP} s"
stop_load 0
start_load read --shape hash-read --mix read=0.9,write=0.1
collect_for $(( FIRST_ROUNDS * STEP ))

AUTOPILOT=(ansible-playbook playbooks/autopilot.yml
  -e kairos_autopilot_dir="$DEMO" -e kairos_autopilot_step_seconds="$STEP"
  -e kairos_autopilot_history=120s -e kairos_autopilot_horizon=60
  -e kairos_autopilot_forecast_model=naive
  -e kairos_autopilot_min_replan_seconds=60
  -e kairos_autopilot_learn_settle="$SETTLE" -e kairos_autopilot_learn_window="$WINDOW"
  # Before any plan, tick 1 judges the last window against this declared configuration.
  -e kairos_autopilot_redis_current="$DEMO/current.yml"
  # The load is a closed loop that takes whatever the cluster serves: the load the collector
  # sees is the capacity, not the demand, so the plan credits capacity.
  -e '{"kairos_autopilot_redis_plan_options": {"method": "dp", "served": "capacity"}}'
  -e '{"kairos_autopilot_engines": ["redis"]}')

plan_in_force() {
  python -c "import json,sys; print(json.load(open(sys.argv[1]))['plan'])" "$DEMO/lab-redis-autopilot.json"
}

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
for name in ("write", "read"):
    r = json.loads((demo / f"load-{name}.json").read_text())
    print(f"  load {name}: {r['ops']} ops in {r['seconds']:.0f} s ({r['ops_per_s']:.0f} ops/s), "
          f"failures {r['failed']} {r['failures'] or ''}, acknowledged writes "
          f"{r['acknowledged_writes']}, lost acknowledged writes "
          f"{r['lost_acknowledged_writes']} (missing and put down to eviction "
          f"{r.get('missing_evicted')}), verified {r['verified']}")
    bad |= bool(r["failed"] or r["lost_acknowledged_writes"] or not r["verified"])
track = load_track(learnt_paths(demo, "lab", "redis")["track"])
print("  the model against production (the autopilot's judgements):")
for j in track:
    mix = ", ".join(f"{c} {v:.0%}" for c, v in j["mix"].items() if v >= 0.005)
    conf = ", ".join(f"{k} {j['config'].get(k)}"
                     for k in ("maxmemory-policy", "hash-max-listpack-entries"))
    print(f"    {j['step_id']}: {j['kind']}, {conf} ({mix}): served "
          f"{j['served_ops_per_s']:.0f} ops/s, predicted {j['predicted_ops_per_s']:.0f}, "
          f"error {j['error']:+.0%}")
summary = {"steps": [], "loads": {n: json.loads((demo / f"load-{n}.json").read_text())
                                  for n in ("write", "read")}, "track": track}
for step in plan.steps:
    since = max(step.due.timestamp(), plan.created_at.timestamp())
    judged = [j for j in track if j["step_id"] == step.id and j["kind"] == "capacity"]
    served = ({"served": sum(j["served_ops_per_s"] for j in judged) / len(judged)}
              if judged else None)
    gain = step_gain(track, step.expected, served, since)
    changed = ', '.join(f'{k} -> {step.target[k]}' for k in (*step.live, *step.restart))
    # The closed loop's served work, whatever the windows' kind: when the nodes' CPU is not
    # what bounds the loop (a miss costs a round trip and a whole hash written back), served
    # is a lower bound of capacity, yet the same loop before and after: the gain the
    # calibration measured, which is what the model predicts.
    before = [j for j in track if float(j["end"]) <= since]
    after = [j for j in track if j["step_id"] == step.id]
    served_gain = (after[-1]["served_ops_per_s"] / before[-1]["served_ops_per_s"] - 1.0
                   if before and after else None)
    print(f"  step {step.id} ({changed}): capacity gain expected {pct(gain['expected'])}; "
          f"observed {pct(gain['observed'])} in saturated windows"
          + (f"; served by the same closed loop {before[-1]['served_ops_per_s']:.0f} -> "
             f"{after[-1]['served_ops_per_s']:.0f} ops/s, {pct(served_gain)} (windows: "
             f"{before[-1]['kind']}, {after[-1]['kind']})" if served_gain is not None else ""))
    summary["steps"].append({"id": step.id, "target": dict(step.target), **gain,
                             "served_gain": served_gain})
(demo / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
if bad or not track:
    sys.exit("demo-redis: FAILED (failures, lost or unverified writes, or no window judged)")
EOF
kairos autopilot status --state-dir "$DEMO" --engine redis | sed -u 's/^/  /'
# The demo's hashes fill every node to maxmemory: removed, so that another load's keys are not
# evicted to make room for them (the configuration the plan left is kept).
unlink_keys "$PREFIX"
say "done in $(( $(date +%s) - T0 )) s; the lab is still running (make lab-down stops it)"
