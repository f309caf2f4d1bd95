#!/usr/bin/env bash
# Exit 1, naming them, if processes started from the lab's pid files are still alive.
# Redis rewrites its process title, so pid files are the only reliable trace.
set -u
cd "$(dirname "$0")/.." || exit 2
left=()
while IFS= read -r -d '' pidfile; do
  pid=$(tr -dc '0-9' < "$pidfile")
  if [ -n "$pid" ] && [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then
    left+=("$pid ($pidfile)")
  fi
done < <(find .lab -name '*.pid' -print0 2>/dev/null)
if [ ${#left[@]} -gt 0 ]; then
  printf 'still running: %s\n' "${left[@]}" >&2
  exit 1
fi
