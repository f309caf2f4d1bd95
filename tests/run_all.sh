#!/usr/bin/env bash
# `make test`: lint, unit tests, both Molecule scenarios, integration tests on the lab.
# Runs every stage, reports each, and stops every process it started even on failure.
# Each stage's output is also kept in .kairos/test-logs/; a failed stage's decisive lines
# are printed again at the very end, where a truncated CI log still shows them.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0 NO_COLOR=1
LOGS="$PWD/.kairos/test-logs"
rm -rf "$LOGS" && mkdir -p "$LOGS"

stop_job() {  # stop_job PID: a background job still running, and its children
  if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
    pkill -TERM -P "$1" 2>/dev/null; kill "$1" 2>/dev/null; wait "$1" 2>/dev/null
  fi
}
# On every way out: the jobs beside stopped, the servers stopped, the cgroups removed.
cleanup() {
  stop_job "${beside:-}"
  # Molecule's job ended without its verdict (the run was cut short, its job perhaps killed
  # with it): its scenarios' servers may still run, started from its cgroup. Destroy both.
  if [ -n "${molecule:-}" ] && [ ! -f "$LOGS/molecule.failed" ]; then
    stop_job "$molecule"
    for scenario in redis cassandra; do molecule destroy -s "$scenario" >/dev/null 2>&1 || true; done
  fi
  ansible-playbook playbooks/lab_down.yml >/dev/null 2>&1 || true
  bash tests/lab_leftovers.sh || echo "run_all: WARNING: processes left behind" >&2
  for group in "${IDLE_CGROUP:-}" "${MOLECULE_CGROUP:-}"; do  # empty by now
    if [ -n "$group" ] && [ -d "$group" ]; then
      rmdir "$group" 2>/dev/null || echo "run_all: WARNING: $group not removed" >&2
    fi
  done
}
trap cleanup EXIT

log_of() {  # log_of STAGE: where that stage's output is kept
  echo "$LOGS/$(printf '%s' "$1" | tr -c 'a-zA-Z0-9' '_').log"
}

failed=()
stage() {
  local name=$1; shift
  local began=$SECONDS
  echo "=== $name"
  if "$@" 2>&1 | tee "$(log_of "$name")"; then
    echo "=== $name: ok ($((SECONDS - began)) s)"
  else
    echo "=== $name: FAILED ($((SECONDS - began)) s)"
    failed+=("$name")
  fi
}

# What decided a failed stage: pytest's failures, Ansible's fatal and failed tasks,
# Molecule's idempotence verdict with the tasks it names and what the auth setup changed.
digest() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E -A12 \
    'Idempotence test failed|^FAILED |^ERROR |^E  |fatal: |failed: \[|CRITICAL|authentication setup changed|error:' \
    | tail -n 120
}

# Lint and the unit tests need no server: they run beside Molecule and the lab, idle, so
# they take only the CPU the servers, the load and the control host leave, and the lab's
# timings stay those of a run alone. Idle is a cpu cgroup with cpu.idle set, under this
# script's own: the idle scheduling class alone (chrt --idle) is idle only among its own
# session's tasks where the kernel groups tasks by session (autogroup), and a session of
# idle tasks then still takes a session's share from the servers Molecule starts. Without
# such a cgroup (no cgroup v1 cpu controller writable here), chrt --idle, else nice 19.
# Their output is kept in their logs and shown once the lab stages end. A unit test that
# fails there, where it may wait minutes for a core, runs again at normal priority before
# it counts as failed.
cpu_cgroup() {  # cpu_cgroup NAME FILE VALUE: make it under this script's own, print its path
  local own dir
  own=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3; exit}' /proc/self/cgroup)
  [ -n "$own" ] || return 1
  for mount in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
    dir="$mount${own%/}/$1-$$"
    if [ -w "$mount${own%/}" ] && mkdir "$dir" 2>/dev/null; then
      if echo "$3" > "$dir/$2" 2>/dev/null; then echo "$dir"; return 0; fi
      rmdir "$dir"
    fi
  done
  return 1
}
IDLE_CGROUP=$(cpu_cgroup kairos-beside cpu.idle 1)
idle() {
  if chrt --idle 0 true 2>/dev/null; then chrt --idle 0 "$@"; else nice -n 19 "$@"; fi
}
beside_the_lab() {
  stage "lint: ruff" idle ruff check planner library module_utils tests bench
  stage "lint: mypy" idle mypy
  stage "lint: ansible-lint (production profile)" idle ansible-lint
  # pytest-xdist: both cores (no test shares state). Its own cache: the integration run
  # rewrites the default one when it ends, and the re-run below reads which tests failed.
  stage "unit tests (idle class)" idle pytest tests/unit -q -n 2 -o cache_dir="$UNIT_CACHE"
  printf '%s\n' "${failed[@]}" > "$LOGS/beside.failed"
}
UNIT_CACHE="$PWD/.kairos/unit-test-cache"
rm -rf "$UNIT_CACHE"
began_beside=$SECONDS
if [ -n "$IDLE_CGROUP" ]; then
  echo "=== lint and unit tests: beside the lab stages, in the idle cgroup $IDLE_CGROUP"
else
  echo "=== lint and unit tests: beside the lab stages, in the idle scheduling class (no idle cgroup)"
fi
( if [ -n "$IDLE_CGROUP" ]; then echo "$BASHPID" > "$IDLE_CGROUP/cgroup.procs"; fi
  beside_the_lab ) > "$LOGS/beside.log" 2>&1 &
beside=$!

# Molecule's scenarios run beside the integration stage: their nodes, ports, directories,
# locks and cluster names are their own (molecule/*/molecule.yml), and they need no lab.
# They run in a cpu cgroup of weight 102 beside the lab's group (1024, which holds every
# envelope: nodes, load, control): under contention they take about a tenth of the machine
# from the lab, and are not starved through a saturating load as the idle class would be
# (their waits have timeouts). Run before the lab stage, they took 5 minutes (91 + 232 s).
MOLECULE_CGROUP=$(cpu_cgroup kairos-molecule cpu.shares 102)
molecule_beside() {
  stage "molecule: redis" molecule test -s redis
  stage "molecule: cassandra" molecule test -s cassandra
  printf '%s\n' "${failed[@]}" > "$LOGS/molecule.failed"
}
( if [ -n "$MOLECULE_CGROUP" ]; then echo "$BASHPID" > "$MOLECULE_CGROUP/cgroup.procs"
  elif command -v renice >/dev/null; then renice -n 10 -p "$BASHPID" >/dev/null; fi
  molecule_beside ) > "$LOGS/molecule.log" 2>&1 &
molecule=$!

# This script stops the lab when the stages end: a test need not put back what only a lab
# that outlives the session would keep (tests/integration/conftest.py).
stage "integration tests (lab)" env KAIROS_LAB_STOPS_AFTER_SESSION=1 \
  pytest tests/integration -q --durations=40

wait "$molecule"
echo "=== molecule, beside the integration tests (its stages' times are their own):"
cat "$LOGS/molecule.log"
if [ -f "$LOGS/molecule.failed" ]; then
  while IFS= read -r name; do
    [ -n "$name" ] && failed+=("$name")
  done < "$LOGS/molecule.failed"
else
  failed+=("molecule (it ended before it reported)")
fi

wait "$beside"
echo "=== lint and unit tests, beside the lab stages (done $((SECONDS - began_beside)) s after they began):"
cat "$LOGS/beside.log"
while IFS= read -r name; do
  [ -n "$name" ] || continue
  if [ "$name" = "unit tests (idle class)" ]; then
    echo "=== failed in the idle class (run again now):"
    grep -E '^(FAILED|ERROR) ' "$(log_of "$name")" || true
    stage "unit tests: the failed ones again, at normal priority" \
      pytest tests/unit -q -n 2 -o cache_dir="$UNIT_CACHE" --lf
  else
    failed+=("$name")
  fi
done < "$LOGS/beside.failed"

if [ ${#failed[@]} -gt 0 ]; then
  for name in "${failed[@]}"; do
    echo "=== what failed in: $name (whole log: .kairos/test-logs/)"
    digest "$(log_of "$name")"
  done
  echo "make test: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "make test: every stage passed"
