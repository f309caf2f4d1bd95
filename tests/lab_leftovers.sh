#!/usr/bin/env bash
# Exit 1, naming them, if processes started from the lab's pid files are still alive, or an
# ansible-playbook started in this checkout still runs (a test that timed out leaves one,
# and it may go on restarting nodes). Redis rewrites its process title, so pid files are
# the only reliable trace of the servers.
set -u
cd "$(dirname "$0")/.." || exit 2
left=()
while IFS= read -r -d '' pidfile; do
  pid=$(tr -dc '0-9' < "$pidfile")
  if [ -n "$pid" ] && [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then
    left+=("$pid ($pidfile)")
  fi
done < <(find .lab -name '*.pid' -print0 2>/dev/null)
here=$(pwd -P)
for proc in /proc/[0-9]*; do
  [ "$(readlink "$proc/cwd" 2>/dev/null)" = "$here" ] || continue
  if tr '\0' ' ' < "$proc/cmdline" 2>/dev/null | grep -q 'ansible-playbook'; then
    left+=("${proc#/proc/} (ansible-playbook in $here)")
  fi
done
if [ ${#left[@]} -gt 0 ]; then
  printf 'still running: %s\n' "${left[@]}" >&2
  exit 1
fi
