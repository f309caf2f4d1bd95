"""Resource envelopes: a lab node's CPU, memory (page cache included) and read I/O caps,
held by cgroups (v1 as on the lab machine, v2 where it is mounted with controllers).

A lab node stands in for a machine: without an envelope the nodes share one machine's CPU
and page cache, so data never leaves memory and a restart frees CPU instead of removing a
machine (docs/envelopes.md). kairos_process starts a node inside its envelope (the child
joins the groups before it execs, so every page it touches is charged there);
kairos_envelope reads an envelope back and removes it.

Groups are nested under the cgroups the starter runs in, below one ``kairos`` folder:
``<mount>/<own path up to any kairos folder>/kairos/<name>``. A starter that itself runs in
an envelope (the load client, the control host) still puts the nodes beside it, never
inside its own caps.
"""

from __future__ import annotations

import contextlib
import os
import time

ROOT = "/sys/fs/cgroup"
#: The folder every Kairos envelope lives in, below the starter's own cgroups.
FOLDER = "kairos"
#: The CFS period the CPU quota is expressed in (the kernel's default).
CPU_PERIOD_US = 100000
V1_CONTROLLERS = ("cpu", "memory", "blkio")
V2_CONTROLLERS = ("cpu", "memory", "io")
LIMIT_KEYS = ("cpu", "cpu_weight", "memory", "read_iops", "read_bps")
#: cgroup v2's default cpu.weight; v1's cpu.shares is weight * 1024 / 100.
DEFAULT_CPU_WEIGHT = 100


class EnvelopeError(Exception):
    """An envelope that cannot be made, with a message a person can act on."""


def _read(path, default=None):
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return default


def _write(path, value):
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(str(value))
    except OSError as exc:
        raise EnvelopeError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from exc


def own_cgroups(proc_file="/proc/self/cgroup"):
    """{controller: path} of the calling process (v2's unified entry under key '')."""
    paths = {}
    for line in (_read(proc_file, "") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _base(path):
    """The starter's own path, cut before any Kairos folder it already runs in."""
    parts = [p for p in path.split("/") if p]
    if FOLDER in parts:
        parts = parts[: parts.index(FOLDER)]
    return "/".join(parts)


def layout(root=ROOT, proc_file="/proc/self/cgroup"):
    """How envelopes can be made here: ('v1', {controller: folder}) or ('v2', {'': folder}),
    where folder is the Kairos folder for this starter; or (None, reason)."""
    own = own_cgroups(proc_file)
    v1 = {c: os.path.join(root, c) for c in V1_CONTROLLERS}
    if all(os.path.isfile(os.path.join(v1[c], "cgroup.procs")) for c in V1_CONTROLLERS) and all(
        c in own for c in V1_CONTROLLERS
    ):
        folders = {c: os.path.join(v1[c], _base(own[c]), FOLDER) for c in V1_CONTROLLERS}
        if all(os.access(os.path.dirname(f), os.W_OK) for f in folders.values()):
            return "v1", folders
        return None, "cgroup v1 is mounted but not writable by this user (run as root)"
    unified = root if os.path.isfile(os.path.join(root, "cgroup.controllers")) else None
    if unified is None and os.path.isfile(os.path.join(root, "unified", "cgroup.controllers")):
        unified = os.path.join(root, "unified")
    if unified is not None and "" in own:
        available = (_read(os.path.join(unified, "cgroup.controllers"), "") or "").split()
        missing = [c for c in V2_CONTROLLERS if c not in available]
        if missing:
            return None, (f"cgroup v2 at {unified} has no {', '.join(missing)} controller "
                          "(and v1 has no cpu, memory and blkio hierarchies)")
        folder = os.path.join(unified, _base(own[""]), FOLDER)
        if os.access(os.path.dirname(folder), os.W_OK):
            return "v2", {"": folder}
        return None, f"cgroup v2 at {unified} is not writable by this user (run as root)"
    return None, "no cgroup v1 cpu/memory/blkio hierarchies and no cgroup v2 with controllers"


def block_device(path):
    """'major:minor' of the whole disk holding ``path``, or None (no block device: tmpfs,
    overlay); a partition is throttled through its disk."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    dev = os.stat(path or "/").st_dev
    node = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not os.path.exists(node):
        return None
    if os.path.exists(os.path.join(node, "partition")):
        return _read(os.path.join(node, "..", "dev"))
    return f"{os.major(dev)}:{os.minor(dev)}"


def check_limits(limits):
    """The envelope's limits, validated: {key: number or None}. Raises EnvelopeError."""
    unknown = sorted(set(limits) - set(LIMIT_KEYS))
    if unknown:
        raise EnvelopeError(f"unknown envelope field(s) {', '.join(unknown)}; "
                            f"expected {', '.join(LIMIT_KEYS)}")
    checked = {}
    for key in LIMIT_KEYS:
        value = limits.get(key)
        if value in (None, ""):
            checked[key] = None
            continue
        try:
            number = float(value) if key == "cpu" else parse_bytes(value) if key in (
                "memory", "read_bps") else int(value)
        except (TypeError, ValueError) as exc:
            raise EnvelopeError(f"envelope field {key}: {value!r} is not a number ({exc})") from exc
        if number <= 0:
            raise EnvelopeError(f"envelope field {key}: {value!r} must be above zero")
        if key == "cpu" and number * CPU_PERIOD_US < 1000:
            raise EnvelopeError(f"envelope field cpu: {value!r} cores is below the kernel's "
                                "1 ms quota minimum (0.01 cores)")
        if key == "cpu_weight" and number > 10000:
            raise EnvelopeError(f"envelope field cpu_weight: {value!r} is above 10000 "
                                "(the scale is 1 to 10000, 100 the default)")
        checked[key] = number
    return checked


def parse_bytes(value):
    """Bytes from an int or a size such as '1536M', '1.5G', '800MiB', '64k'."""
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(text)


def make(kind, folders, name, limits, device_path):
    """Validate ``limits`` and create the envelope ``name`` with them (idempotent); the
    read caps apply to the disk holding ``device_path``. Returns {controller: group dir}.
    Raises EnvelopeError, naming the field or the file."""
    checked = check_limits(limits)
    device = (block_device(device_path or "/")
              if checked["read_iops"] or checked["read_bps"] else None)
    return apply(kind, folders, name, checked, device)


def group_dirs(kind, folders, name):
    return {c: os.path.join(f, name) for c, f in folders.items()}


def apply(kind, folders, name, limits, device):
    """Create the envelope ``name`` (idempotent) and set its limits; a limit left out is
    lifted. Returns {controller: group dir}."""
    dirs = group_dirs(kind, folders, name)
    for folder in folders.values():
        _mkdir(folder)
    if kind == "v2":
        _enable_v2(folders[""])
    for directory in dirs.values():
        _mkdir(directory)
    if (limits.get("read_iops") or limits.get("read_bps")) and device is None:
        raise EnvelopeError("envelope read_iops/read_bps: the data directory is not on a "
                            "block device (tmpfs or overlay?), so its reads cannot be capped")
    if kind == "v1":
        _apply_v1(dirs, limits, device)
    else:
        _apply_v2(dirs[""], limits, device)
    return dirs


def _mkdir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise EnvelopeError(f"cannot create cgroup {path}: {exc.strerror or exc}") from exc


def _enable_v2(folder):
    """Delegate cpu, memory and io down to the envelopes: every level from the mount to the
    Kairos folder enables them for its children. v2 refuses this in a group that holds
    processes itself (its "no internal processes" rule): the error then says so."""
    chain, path = [folder], folder
    while not os.path.ismount(path) and path != "/":
        path = os.path.dirname(path)
        chain.append(path)
    for level in reversed(chain):
        control = os.path.join(level, "cgroup.subtree_control")
        enabled = (_read(control, "") or "").split()
        for controller in V2_CONTROLLERS:
            if controller not in enabled:
                _write(control, f"+{controller}")


def _apply_v1(dirs, limits, device):
    cpu = limits.get("cpu")
    weight = limits.get("cpu_weight") or DEFAULT_CPU_WEIGHT
    _write(os.path.join(dirs["cpu"], "cpu.shares"), max(2, int(weight * 1024 / 100)))
    _write(os.path.join(dirs["cpu"], "cpu.cfs_period_us"), CPU_PERIOD_US)
    _write(os.path.join(dirs["cpu"], "cpu.cfs_quota_us"),
           round(cpu * CPU_PERIOD_US) if cpu else -1)
    memory = limits.get("memory")
    _write(os.path.join(dirs["memory"], "memory.limit_in_bytes"), int(memory) if memory else -1)
    for key, file in (("read_iops", "blkio.throttle.read_iops_device"),
                      ("read_bps", "blkio.throttle.read_bps_device")):
        path = os.path.join(dirs["blkio"], file)
        if limits.get(key):
            _write(path, f"{device} {int(limits[key])}")
        else:
            # Writing 0 for a device removes its rule.
            for line in (_read(path, "") or "").splitlines():
                _write(path, f"{line.split()[0]} 0")


def _apply_v2(directory, limits, device):
    cpu = limits.get("cpu")
    _write(os.path.join(directory, "cpu.weight"), int(limits.get("cpu_weight") or
                                                      DEFAULT_CPU_WEIGHT))
    _write(os.path.join(directory, "cpu.max"),
           f"{round(cpu * CPU_PERIOD_US)} {CPU_PERIOD_US}" if cpu else f"max {CPU_PERIOD_US}")
    memory = limits.get("memory")
    _write(os.path.join(directory, "memory.max"), int(memory) if memory else "max")
    if device is not None:
        riops = int(limits["read_iops"]) if limits.get("read_iops") else "max"
        rbps = int(limits["read_bps"]) if limits.get("read_bps") else "max"
        if riops != "max" or rbps != "max" or os.path.exists(os.path.join(directory, "io.max")):
            _write(os.path.join(directory, "io.max"), f"{device} riops={riops} rbps={rbps}")


def join(dirs, pid=0):
    """Move ``pid`` (0: the calling process) into every group of the envelope. Called in
    the child before it execs the server, so all the server's memory is charged there."""
    for directory in dirs.values():
        _write(os.path.join(directory, "cgroup.procs"), pid)


def pids(dirs):
    directory = next(iter(dirs.values()))
    return [int(p) for p in (_read(os.path.join(directory, "cgroup.procs"), "") or "").split()]


def _kv(text):
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _cpu_seconds(pid_list):
    """CPU time the processes used (user + system), from /proc; their threads included."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pid_list:
        stat = _read(f"/proc/{pid}/stat")
        if stat:
            fields = stat.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def read(kind, folders, name):
    """The envelope as the kernel holds it: its limits and its counters, or None when the
    groups do not exist."""
    dirs = group_dirs(kind, folders, name)
    if not all(os.path.isdir(d) for d in dirs.values()):
        return None
    members = pids(dirs)
    if kind == "v1":
        quota = int(_read(os.path.join(dirs["cpu"], "cpu.cfs_quota_us"), "-1"))
        period = int(_read(os.path.join(dirs["cpu"], "cpu.cfs_period_us"), str(CPU_PERIOD_US)))
        mem_limit = int(_read(os.path.join(dirs["memory"], "memory.limit_in_bytes"), "0"))
        mstat = _kv(_read(os.path.join(dirs["memory"], "memory.stat")))
        cstat = _kv(_read(os.path.join(dirs["cpu"], "cpu.stat")))
        oom = _kv(_read(os.path.join(dirs["memory"], "memory.oom_control")))
        iops_rules = _read(os.path.join(dirs["blkio"], "blkio.throttle.read_iops_device"), "")
        bps_rules = _read(os.path.join(dirs["blkio"], "blkio.throttle.read_bps_device"), "")
        serviced = _read(os.path.join(dirs["blkio"], "blkio.throttle.io_serviced"), "")
        served_bytes = _read(os.path.join(dirs["blkio"], "blkio.throttle.io_service_bytes"), "")
        shares = int(_read(os.path.join(dirs["cpu"], "cpu.shares"), "1024"))
        limits = {
            "cpu": round(quota / period, 3) if quota > 0 else None,
            "cpu_weight": round(shares * 100 / 1024),
            # The kernel's "no limit" is a page-rounded LONG_MAX.
            "memory": mem_limit if 0 < mem_limit < 1 << 62 else None,
            "read_iops": _first_rule(iops_rules),
            "read_bps": _first_rule(bps_rules),
        }
        usage = {
            "memory_bytes": int(_read(os.path.join(dirs["memory"], "memory.usage_in_bytes"), "0")),
            "memory_peak_bytes": int(
                _read(os.path.join(dirs["memory"], "memory.max_usage_in_bytes"), "0")),
            "page_cache_bytes": mstat.get("total_cache", mstat.get("cache", 0)),
            "rss_bytes": mstat.get("total_rss", mstat.get("rss", 0)),
            "oom_kills": oom.get("oom_kill", 0),
            # How often the usage met the limit (the kernel then reclaims page cache first).
            "limit_hits": int(_read(os.path.join(dirs["memory"], "memory.failcnt"), "0")),
            "throttled_periods": cstat.get("nr_throttled", 0),
            "throttled_seconds": round(cstat.get("throttled_time", 0) / 1e9, 3),
            "read_ios": _sum_ops(serviced, "Read"),
            "read_bytes": _sum_ops(served_bytes, "Read"),
        }
    else:
        directory = dirs[""]
        cpu_max = (_read(os.path.join(directory, "cpu.max"), "max") or "max").split()
        mem_max = _read(os.path.join(directory, "memory.max"), "max")
        mstat = _kv(_read(os.path.join(directory, "memory.stat")))
        cstat = _kv(_read(os.path.join(directory, "cpu.stat")))
        events = _kv(_read(os.path.join(directory, "memory.events")))
        io_max = _read(os.path.join(directory, "io.max"), "") or ""
        io_stat = _read(os.path.join(directory, "io.stat"), "") or ""
        limits = {
            "cpu": round(int(cpu_max[0]) / int(cpu_max[1]), 3) if cpu_max[0] != "max" else None,
            "cpu_weight": int(_read(os.path.join(directory, "cpu.weight"), "100")),
            "memory": int(mem_max) if mem_max and mem_max != "max" else None,
            "read_iops": _io_field(io_max, "riops"),
            "read_bps": _io_field(io_max, "rbps"),
        }
        usage = {
            "memory_bytes": int(_read(os.path.join(directory, "memory.current"), "0")),
            "memory_peak_bytes": int(_read(os.path.join(directory, "memory.peak"), "0") or 0),
            "page_cache_bytes": mstat.get("file", 0),
            "rss_bytes": mstat.get("anon", 0),
            "oom_kills": events.get("oom_kill", 0),
            "limit_hits": events.get("max", 0),
            "throttled_periods": cstat.get("nr_throttled", 0),
            "throttled_seconds": round(cstat.get("throttled_usec", 0) / 1e6, 3),
            "read_ios": sum(_io_field(line, "rios") or 0 for line in io_stat.splitlines()),
            "read_bytes": sum(_io_field(line, "rbytes") or 0 for line in io_stat.splitlines()),
        }
    usage["cpu_seconds"] = round(_cpu_seconds(members), 2)
    return {"name": name, "cgroup": kind, "groups": sorted(set(dirs.values())), "pids": members,
            "limits": limits, "usage": usage}


def _first_rule(rules):
    for line in (rules or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            return int(parts[1])
    return None


def _sum_ops(text, op):
    return sum(int(p[2]) for p in (line.split() for line in (text or "").splitlines())
               if len(p) == 3 and p[1] == op)


def _io_field(text, field):
    for token in (text or "").split():
        if token.startswith(field + "="):
            value = token.split("=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def rates(kind, folders, name, seconds):
    """Read the envelope twice, ``seconds`` apart: its counters and, over that window, CPU in
    cores, read IOPS and throttled share. None when it does not exist."""
    first = read(kind, folders, name)
    if first is None or seconds <= 0:
        return first
    began = time.monotonic()
    time.sleep(seconds)
    second = read(kind, folders, name)
    if second is None:
        return first
    span = time.monotonic() - began
    a, b = first["usage"], second["usage"]
    second["rates"] = {
        "window_seconds": round(span, 2),
        "cpu_cores": round(max(0.0, b["cpu_seconds"] - a["cpu_seconds"]) / span, 3),
        "read_iops": round(max(0, b["read_ios"] - a["read_ios"]) / span, 1),
        "read_bytes_per_second": int(max(0, b["read_bytes"] - a["read_bytes"]) / span),
        "throttled_share": round(
            max(0.0, b["throttled_seconds"] - a["throttled_seconds"]) / span, 3),
    }
    return second


def remove(kind, folders, name, timeout=10.0, evict=False):
    """Remove the envelope's groups once no process is left in them. Returns whether they
    existed. Raises EnvelopeError while a process is still inside; with ``evict``, moves
    the processes still inside to the groups the envelope is nested under first (for an
    envelope that only weighs CPU, such as the load client's)."""
    dirs = group_dirs(kind, folders, name)
    existed = any(os.path.isdir(d) for d in dirs.values())
    if evict:
        for controller, directory in dirs.items():
            parent = os.path.dirname(folders[controller])
            for pid in pids({"": directory}) if os.path.isdir(directory) else []:
                # Exited meanwhile: the rmdir below tells if it is still there.
                with contextlib.suppress(EnvelopeError):
                    join({"": parent}, pid)
    deadline = time.monotonic() + timeout
    for directory in dirs.values():
        while os.path.isdir(directory):
            try:
                os.rmdir(directory)
            except OSError as exc:
                left = pids({"": directory})
                if time.monotonic() > deadline:
                    raise EnvelopeError(
                        f"cannot remove {directory}: {exc.strerror or exc}"
                        + (f" (processes still inside: {left})" if left else "")) from exc
                time.sleep(0.2)
    # The last envelope out removes the Kairos folder too; another one still in it keeps it.
    for folder in folders.values():
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    return existed


def describe(limits):
    """A one-line summary of limits: '0.5 CPU, 1.5 GiB, 1500 read IOPS'."""
    parts = []
    if limits.get("cpu"):
        parts.append(f"{limits['cpu']:g} CPU")
    if limits.get("cpu_weight") not in (None, DEFAULT_CPU_WEIGHT):
        parts.append(f"CPU weight {limits['cpu_weight']}")
    if limits.get("memory"):
        parts.append(f"{limits['memory'] / (1 << 30):.2f} GiB".replace(".00 GiB", " GiB"))
    if limits.get("read_iops"):
        parts.append(f"{int(limits['read_iops'])} read IOPS")
    if limits.get("read_bps"):
        parts.append(f"{limits['read_bps'] / (1 << 20):g} MiB/s read")
    return ", ".join(parts) or "no limits"


def held(names=None):
    """Provenance of a measurement: each envelope of ``names`` (default: every one in this
    starter's Kairos folder) as the kernel holds it (its limits, described), "none" for a
    name without one; ``{"envelopes": why}`` where envelopes cannot be made here."""
    kind, folders = layout()
    if kind is None:
        return {"envelopes": f"none: {folders}"}
    if names is None:
        folder = next(iter(folders.values()))
        names = sorted(n for n in (os.listdir(folder) if os.path.isdir(folder) else ())
                       if os.path.isdir(os.path.join(folder, n)))
    out = {}
    for name in names:
        state = read(kind, folders, name)
        out[name] = describe(state["limits"]) if state else "none"
    return {"envelopes": out, "cgroup": kind}


def report(state):
    """One line for a person: the limits, then what the envelope uses now."""
    usage, rate = state["usage"], state.get("rates", {})
    gib = 1 << 30
    memory = f"memory {usage['memory_bytes'] / gib:.2f} GiB"
    if state["limits"].get("memory"):
        memory += f" of {state['limits']['memory'] / gib:.2f}"
    memory += f" (page cache {usage['page_cache_bytes'] / gib:.2f} GiB)"
    parts = [f"{describe(state['limits'])} (cgroup {state['cgroup']}, pids "
             f"{' '.join(map(str, state['pids'])) or 'none'})"]
    if rate:
        parts.append(f"now {rate['cpu_cores']:.2f} CPU, throttled {rate['throttled_share']:.0%}"
                     f" of the time, {rate['read_iops']:.0f} read IOPS")
    parts.append(memory)
    parts.append(f"since start: {usage['cpu_seconds']:.1f} CPU s, throttled "
                 f"{usage['throttled_seconds']:.1f} s, {usage['read_ios']} reads, "
                 f"{usage['oom_kills']} OOM kills")
    return "; ".join(parts)
