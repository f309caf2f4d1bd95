# Shared by tests/demo.sh and tests/demo_redis.sh (sourced): the demo's loads, collection
# rounds, ticks and envelopes. The script sets ENGINE, DEMO (absolute), HOSTS, STEP and
# DEMO_NAME first, then sources this file.
T0=$(date +%s)
LOADS=()

say() { printf '\n[%s %4ds] %s\n' "$DEMO_NAME" "$(( $(date +%s) - T0 ))" "$*"; }

cleanup() {
  # Only the processes this script started, by their pid (never the lab).
  for pid in "${LOADS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  if declare -F leave_lab >/dev/null; then leave_lab || true; fi
}
trap cleanup EXIT

# A rollout in progress (someone else's) holds the cluster's lock: wait for it, do not break it.
# lab_up: `make lab-up` (idempotent, ~40 s on a running lab), unless KAIROS_DEMO_LAB_UP=0 says
# the caller has just started it (the integration test's lab fixture).
lab_up() {
  if [ "${KAIROS_DEMO_LAB_UP:-1}" = 0 ]; then
    say "lab up (started by the caller: KAIROS_DEMO_LAB_UP=0)"
  else
    say "lab up (idempotent: a running lab is left as it is)"
    make -s lab-up
  fi
}

wait_for_rollouts() {
  for _ in $(seq 1 90); do
    ls .kairos/*-"$ENGINE".lock >/dev/null 2>&1 || return 0
    say "a rollout holds $(ls .kairos/*-"$ENGINE".lock | head -1); waiting for it to finish"
    sleep 10
  done
}

# start_load NAME ARGS...: `kairos load --engine $ENGINE` in the background (its result in
# $DEMO/load-NAME.json). A background job of a non-interactive shell starts with SIGINT
# ignored: give kairos load its Ctrl-C handling back, so that `kill -INT` stops it cleanly
# (drain, then verify).
start_load() {
  local name=$1; shift
  python -c 'import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)
from planner.cli import main; sys.exit(main(sys.argv[1:]))' \
      load --engine "$ENGINE" --seconds 1800 --seed 7 --progress-interval 30 --json \
      --out "$DEMO/load-$name.json" "$@" \
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
# held at its CPU quota is saturated even when the engine's own signals look calm
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
  ansible-playbook playbooks/collect.yml -e "kairos_store=$DEMO/kairos.db" \
      -e "{\"kairos_collect_engines\": [\"$ENGINE\"]}" > "$DEMO/collect-resources.log" 2>&1 \
    && echo "  collect: a round with each node's envelope (playbooks/collect.yml)" \
    || { echo "  collect: playbooks/collect.yml failed:"; tail -20 "$DEMO/collect-resources.log"; }
}

# collect N: N rounds, STEP s apart.
collect() {
  kairos collect --engine "$ENGINE" --hosts "$HOSTS" --cluster lab --store "$DEMO/kairos.db" \
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

plan_in_force() {
  python -c "import json,sys; print(json.load(open(sys.argv[1]))['plan'])" \
      "$DEMO/lab-$ENGINE-autopilot.json"
}

# The demo is the control host and its loads the application's machines: each in its own
# envelope, so neither takes the nodes' CPU (docs/envelopes.md). Without envelopes, nothing.
enter_envelopes() {
  local envelopes=.lab/envelopes.json
  KAIROS_LOAD_CGROUPS="$(python -c 'import os, sys; from planner.loadgen import envelope as e
e.enter_lab(sys.argv[1], int(sys.argv[2])); print(os.environ.get(e.ENV, ""))' "$envelopes" "$$")"
  export KAIROS_LOAD_CGROUPS
  leave_lab() {  # out of the control envelope, so that `make lab-down` can remove it
    python -c 'import sys; from planner.loadgen import envelope as e
e.leave_lab(e.lab_envelopes(sys.argv[1]), int(sys.argv[2]))' .lab/envelopes.json "$$"
  }
}
