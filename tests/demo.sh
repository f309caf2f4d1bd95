#!/usr/bin/env bash
# `make demo`: the main job on the local lab. Until the autopilot lands it brings the
# lab up, shows its status and what the planner offers.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
make -s lab-up
make -s lab-status
kairos --help
echo "demo: the lab is running; stop it with: make lab-down"
