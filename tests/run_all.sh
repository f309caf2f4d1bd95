#!/usr/bin/env bash
# `make test`: lint, unit tests, both Molecule scenarios, integration tests on the lab.
# Runs every stage, reports each, and stops every process it started even on failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0 NO_COLOR=1

cleanup() {
  ansible-playbook playbooks/lab_down.yml >/dev/null 2>&1 || true
  bash tests/lab_leftovers.sh || echo "run_all: WARNING: processes left behind" >&2
}
trap cleanup EXIT

failed=()
stage() {
  local name=$1; shift
  local began=$SECONDS
  echo "=== $name"
  if "$@"; then
    echo "=== $name: ok ($((SECONDS - began)) s)"
  else
    echo "=== $name: FAILED ($((SECONDS - began)) s)"
    failed+=("$name")
  fi
}

stage "lint: ruff" ruff check planner library module_utils tests bench
stage "lint: mypy" mypy
stage "lint: ansible-lint (production profile)" ansible-lint
stage "unit tests" pytest tests/unit -q -n 2  # pytest-xdist: both cores (no test shares state)
stage "molecule: redis" molecule test -s redis
stage "molecule: cassandra" molecule test -s cassandra
stage "integration tests (lab)" pytest tests/integration -q --durations=25

if [ ${#failed[@]} -gt 0 ]; then
  echo "make test: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "make test: every stage passed"
