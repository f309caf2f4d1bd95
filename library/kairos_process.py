#!/usr/bin/python
"""Run a long-lived server as a detached background process tracked by a pid file."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_process
short_description: Start, stop or restart a background server process tracked by a pid file
description:
  - The lab's service manager. C(started) launches I(command) detached from Ansible (own
    session, output appended to I(log)) unless the process named in I(pidfile) is alive and
    its command line contains I(match). C(stopped) sends SIGTERM, waits up to
    I(stop_timeout) seconds, then SIGKILL, and fails if the process is still there.
  - C(restarted) stops the process (if running), writes I(files) while it is down (the other
    states ignore them), starts it and waits for I(ready_port) - one module run for a
    rollout's restart, where every task costs a module start. In check mode it only reports
    the files' differences.
  - A stale pid file (dead process, or a recycled pid that does not match) counts as stopped.
extends_documentation_fragment: [kairos, kairos.check_only, kairos.files]
options:
  pidfile:
    description: Path of the pid file.
    type: path
    required: true
  command:
    description: Argument list of the server (no shell). Required for C(started).
    type: list
    elements: str
  match:
    description: Text the process command line must contain for the pid to be ours.
    type: str
    required: true
  state:
    description: Desired state.
    type: str
    choices: [started, stopped, restarted]
    default: started
  log:
    description: File that receives the process's stdout and stderr (appended).
    type: path
  chdir:
    description: Working directory of the process.
    type: path
  environment:
    description: Extra environment variables for the process.
    type: dict
    default: {}
  stop_timeout:
    description: Seconds to wait after SIGTERM before SIGKILL.
    type: int
    default: 60
  ready_port:
    description:
      - After starting (or finding it running), wait until this TCP port accepts
        connections, failing at once with the end of I(log) if the process dies meanwhile.
    type: int
  ready_host:
    description: Address of I(ready_port).
    type: str
    default: 127.0.0.1
  ready_timeout:
    description: Seconds to wait for I(ready_port).
    type: int
    default: 120
  envelope:
    description:
      - The process's resource envelope (docs/envelopes.md), held by cgroups nested under
        the starter's own. The process joins it before it execs, at every start and restart,
        so all its memory, page cache included, is charged there. The limits are set again
        at every run, live on a running process.
      - Where cgroups cannot be used, the process runs without one and I(envelope.applied)
        says why; a limit the kernel refuses fails the task.
    type: dict
    suboptions:
      name:
        description: The envelope's name, unique on the machine (the lab uses cluster-host).
        type: str
        required: true
      cpu:
        description: CPU quota in cores (0.5 is half a core).
        type: float
      cpu_weight:
        description: CPU weight under contention, 1 to 10000 (100, the default, is 1024 v1 shares).
        type: int
      memory:
        description: Memory cap, page cache included, as bytes or a size such as C(1536M).
        type: str
      read_iops:
        description: Read operations per second on the disk holding I(device_path).
        type: int
      read_bps:
        description: Read bytes per second on that disk, as bytes or a size such as C(64M).
        type: str
      device_path:
        description: A path on the disk whose reads are capped (default I(chdir)).
        type: path
"""

EXAMPLES = r"""
- name: Start a lab node
  kairos_process:
    pidfile: /tmp/lab/node1.pid
    command: [/tmp/lab/node1/bin/run]
    match: /tmp/lab/node1/conf
    log: /tmp/lab/node1/logs/stdout.log

- name: Stop it
  kairos_process:
    pidfile: /tmp/lab/node1.pid
    match: /tmp/lab/node1/conf
    state: stopped
"""

RETURN = r"""
pid:
  description: Pid of the running process (started), or of the process that was stopped.
  returned: always
  type: int
was_running:
  description: Whether the process was running before the module acted.
  returned: always
  type: bool
stop_seconds:
  description: Seconds the process took to exit after SIGTERM.
  returned: when a process was stopped
  type: float
ready_seconds:
  description: Seconds from the process's launch (or, when it was already running, from
    the check) until I(ready_port) accepted connections.
  returned: when ready_port is set and the state is started or restarted
  type: float
files_written:
  description: Whether I(files) were written (a rescue then knows the node has the new files).
  returned: state restarted, also on failure
  type: bool
files_changed:
  description: Paths of I(files) whose content or mode changed.
  returned: state restarted
  type: list
  elements: str
envelope:
  description:
    - The envelope read back from the kernel after the start - C(applied), C(limits),
      C(usage) (see kairos_envelope), C(pids) and C(inside) (the process is in it) - or
      C(applied=false) with the C(reason) it could not be used.
  returned: when envelope is set, not in check mode, and the state is started or restarted
  type: dict
"""

import os
import signal
import subprocess
import time

from ansible.module_utils import kairos_cgroup as cgroup
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_files import FILES_ARG, bad_modes, changes, write
from ansible.module_utils.kairos_net import accepts_connections

#: Between two connection attempts while the server starts: a refused connection costs
#: microseconds, and every tenth of a second the server serves unseen delays the rollout.
READY_POLL_SECONDS = 0.1


def read_pid(pidfile):
    try:
        with open(pidfile, encoding="ascii") as handle:
            return int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def is_ours(pid, match):
    """True when pid is alive, not a zombie, and its command line contains match."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and match in cmdline


def start(module, pidfile, match, progress=None, envelope=None):
    """Launch the process: (its pid, the monotonic moment of its launch). ``envelope``: the
    cgroup dirs the child joins before it execs the command."""
    progress = progress or {}
    params = module.params
    if not params["command"]:
        module.fail_json(msg="kairos_process: 'command' is required when state=started")
    if module.check_mode:
        return None, None
    os.makedirs(os.path.dirname(pidfile) or ".", exist_ok=True)
    env = dict(os.environ)
    env.update({key: str(value) for key, value in params["environment"].items()})
    log_path = params["log"] or os.devnull
    launched = time.monotonic()
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        # A new session so the server outlives this module and Ansible's process group.
        proc = subprocess.Popen(
            params["command"],
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=params["chdir"],
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=(lambda: cgroup.join(envelope)) if envelope else None,
        )
    with open(pidfile, "w", encoding="ascii") as handle:
        handle.write(f"{proc.pid}\n")
    time.sleep(0.5)
    if proc.poll() is not None:
        module.fail_json(
            msg=f"process exited at once with status {proc.returncode}; end of {log_path}:\n"
            f"{log_tail(params['log'])}",
            pid=proc.pid,
            **{"was_running": False, **progress},
        )
    return proc.pid, launched


def log_tail(path, lines=15):
    """The last lines of the process's log, for an error message."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - 8192))
        return "\n".join(handle.read().decode("utf-8", "replace").splitlines()[-lines:])


def child_alive(pid):
    """True while pid, a child this module started, has not exited (it cannot be recycled
    before it is reaped)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False


def wait_ready(module, pid, match, progress=None, child=False, launched=None):
    """Wait until ready_port accepts connections; fail fast if the process dies. Returns
    the seconds since ``launched`` (the process's launch; default now): the server's own
    start, the launch check's half second included.

    ``child``: pid is the process start() just began, alive as long as it has not exited,
    whatever its command line says yet (a launcher may prepare before it execs the server).
    """
    progress = progress or {}
    params = module.params
    began = time.monotonic() if launched is None else launched
    while time.monotonic() - began < params["ready_timeout"]:
        if not (child_alive(pid) if child else is_ours(pid, match)):
            module.fail_json(
                msg=f"process {pid} died before {params['ready_host']}:{params['ready_port']} "
                f"accepted connections; end of {params['log']}:\n{log_tail(params['log'])}",
                pid=pid,
                **progress,
            )
        if accepts_connections(params["ready_host"], params["ready_port"]):
            return round(time.monotonic() - began, 2)
        time.sleep(READY_POLL_SECONDS)
    module.fail_json(
        msg=f"{params['ready_host']}:{params['ready_port']} not accepting connections after "
        f"{params['ready_timeout']}s (process {pid} alive); end of {params['log']}:\n"
        f"{log_tail(params['log'])}",
        pid=pid,
        **progress,
    )
    return None


def stop(module, pid, match):
    timeout = module.params["stop_timeout"]
    began = time.monotonic()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0.0
    while time.monotonic() - began < timeout:
        if not is_ours(pid, match):
            return round(time.monotonic() - began, 2)
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return round(time.monotonic() - began, 2)
    for _ in range(50):
        if not is_ours(pid, match):
            module.warn(f"pid {pid} ignored SIGTERM for {timeout}s and was killed")
            return round(time.monotonic() - began, 2)
        time.sleep(0.1)
    module.fail_json(msg=f"pid {pid} is still running after SIGTERM and SIGKILL", pid=pid)
    return None


def prepare_envelope(module):
    """Make the envelope (limits set) before a start: (its cgroup dirs or None, the result
    to report when it cannot be used). Fails the task on a limit the kernel refuses."""
    spec = module.params["envelope"]
    if not spec or module.check_mode:
        return None, None
    kind, folders = cgroup.layout()
    if kind is None:
        return None, {"applied": False, "reason": folders}
    try:
        return cgroup.make(kind, folders, spec["name"],
                           {k: spec.get(k) for k in cgroup.LIMIT_KEYS},
                           spec.get("device_path") or module.params["chdir"]), None
    except cgroup.EnvelopeError as exc:
        module.fail_json(msg=f"envelope {spec['name']}: {exc}")
    return None, None


def envelope_result(module, dirs, unusable, pid):
    """The envelope as read back after the start, and whether the process is inside it."""
    if unusable is not None or dirs is None:
        return unusable
    kind, folders = cgroup.layout()
    state = cgroup.read(kind, folders, module.params["envelope"]["name"]) or {}
    inside = bool(pid) and pid in state.get("pids", [])
    if not inside:
        module.fail_json(msg=f"process {pid} is not inside its envelope "
                         f"{module.params['envelope']['name']}: it was started without it; "
                         "stop it and start it again (make lab-down lab-up)", pid=pid)
    return {"applied": True, "inside": inside, **state}


def restart(module, pidfile, match, running, pid):
    """Stop, write the files, start and wait: the result of state=restarted."""
    bad = bad_modes(module.params["files"])
    if bad:
        module.fail_json(msg=f"kairos_process: {bad}")
    differ, diff = changes(module.params["files"])
    result = {"changed": True, "was_running": running, "diff": diff, "files_written": False,
              "files_changed": [item["path"] for item in differ]}
    if module.check_mode:
        module.exit_json(pid=pid, **result)
    if not module.params["command"]:
        module.fail_json(msg="kairos_process: 'command' is required when state=restarted")
    if running:
        result["stop_seconds"] = stop(module, pid, match)
    if os.path.exists(pidfile):
        os.unlink(pidfile)
    for item in differ:
        try:
            write(item)
        except OSError as exc:
            module.fail_json(msg=f"cannot write {item['path']}: {exc}", **result)
    result["files_written"] = True
    dirs, unusable = prepare_envelope(module)
    pid, launched = start(module, pidfile, match, result, envelope=dirs)
    if module.params["ready_port"]:
        result["ready_seconds"] = wait_ready(module, pid, match, result, child=True,
                                             launched=launched)
    if module.params["envelope"]:
        result["envelope"] = envelope_result(module, dirs, unusable, pid)
    module.exit_json(pid=pid, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pidfile=dict(type="path", required=True),
            command=dict(type="list", elements="str"),
            match=dict(type="str", required=True),
            state=dict(type="str", choices=["started", "stopped", "restarted"], default="started"),
            log=dict(type="path"),
            chdir=dict(type="path"),
            environment=dict(type="dict", default={}),
            stop_timeout=dict(type="int", default=60),
            ready_port=dict(type="int"),
            ready_host=dict(type="str", default="127.0.0.1"),
            ready_timeout=dict(type="int", default=120),
            envelope=dict(type="dict", options=dict(
                name=dict(type="str", required=True),
                cpu=dict(type="float"),
                cpu_weight=dict(type="int"),
                memory=dict(type="str"),
                read_iops=dict(type="int"),
                read_bps=dict(type="str"),
                device_path=dict(type="path"),
            )),
            **FILES_ARG,
        ),
        supports_check_mode=True,
    )
    pidfile = module.params["pidfile"]
    match = module.params["match"]
    pid = read_pid(pidfile)
    running = is_ours(pid, match)

    if module.params["state"] == "restarted":
        restart(module, pidfile, match, running, pid)

    if module.params["state"] == "started":
        result = {"changed": not running, "was_running": running}
        launched = None
        # A running process's envelope gets its limits set again, live.
        dirs, unusable = prepare_envelope(module)
        if not running:
            pid, launched = start(module, pidfile, match, envelope=dirs)
            pid = pid or 0  # check mode: nothing was launched
        if module.params["ready_port"] and not module.check_mode:
            result["ready_seconds"] = wait_ready(module, pid, match, child=not running,
                                                 launched=launched)
        if module.params["envelope"] and not module.check_mode:
            result["envelope"] = envelope_result(module, dirs, unusable, pid)
        module.exit_json(pid=pid, **result)

    if not running:
        if os.path.exists(pidfile) and not module.check_mode:
            os.unlink(pidfile)
        module.exit_json(changed=False, pid=0, was_running=False)
    if module.check_mode:
        module.exit_json(changed=True, pid=pid, was_running=True)
    seconds = stop(module, pid, match)
    os.unlink(pidfile)
    module.exit_json(changed=True, pid=pid, was_running=True, stop_seconds=seconds)


if __name__ == "__main__":
    main()
