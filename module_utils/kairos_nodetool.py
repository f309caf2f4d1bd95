"""What the Cassandra modules that run nodetool share: the option, parsers and a runner.

:func:`nodetool_module` builds each such module's AnsibleModule from its own options and
the nodetool option (documented once, in doc_fragments/kairos_nodetool.py).

Parsers are pure functions over text so unit tests can feed them real captured output
(tests/unit/fixtures/nodetool/).
"""

from __future__ import annotations

import re
import time

from ansible.module_utils.basic import AnsibleModule

_STATUS_LINE = re.compile(
    r"^(?P<status>[UD])(?P<state>[NLJM])\s+(?P<address>\S+)\s+"
    r"(?P<load>\?|[\d.]+\s*\S*B|NaN\s*\S*)\s+(?P<tokens>\d+)\s+(?P<owns>\S+)\s+"
    r"(?P<host_id>[0-9a-f-]{36})\s+(?P<rack>\S+)\s*$"
)
_SCHEMA_LINE = re.compile(r"^\s*(?P<version>[0-9a-f-]{36}|UNREACHABLE):\s*\[(?P<hosts>[^\]]*)\]")

# The option of every module that runs nodetool (doc fragment kairos_nodetool).
NODETOOL_ARGS = dict(nodetool=dict(type="path", required=True))


def nodetool_module(**options):
    """The AnsibleModule of a module that runs nodetool: its ``options``, then ``nodetool``.

    Every such module supports check mode (it only reads, or says what it would do).
    """
    return AnsibleModule(argument_spec=dict(options, **NODETOOL_ARGS), supports_check_mode=True)


def parse_status(text):
    """Parse ``nodetool status`` into a list of node dicts (address, status, state, dc, ...).

    ``status`` is U or D (up/down), ``state`` N, L, J or M (normal, leaving, joining,
    moving); ``code`` is the two letters together, e.g. ``UN``.
    """
    nodes = []
    datacenter = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("Datacenter:"):
            datacenter = line.split(":", 1)[1].strip()
            continue
        match = _STATUS_LINE.match(line)
        if not match:
            continue
        node = match.groupdict()
        node["code"] = node["status"] + node["state"]
        node["tokens"] = int(node["tokens"])
        node["dc"] = datacenter
        nodes.append(node)
    return nodes


def parse_schema_versions(text):
    """Parse the "Schema versions" block of ``nodetool describecluster``: version -> hosts."""
    versions = {}
    in_block = False
    for line in text.splitlines():
        if line.strip().startswith("Schema versions:"):
            in_block = True
            continue
        if in_block:
            match = _SCHEMA_LINE.match(line)
            if not match:
                if line.strip():
                    break
                continue
            hosts = [h.strip() for h in match.group("hosts").split(",") if h.strip()]
            versions[match.group("version")] = hosts
    return versions


def parse_pending_hints(text):
    """Parse ``nodetool listpendinghints``: list of {host_id, address, dc, rack, total_files}."""
    if "does not have any pending hints" in text:
        return []
    rows = []
    header = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "Host":
            header = line
            continue
        if header is None or len(cells) < 5:
            continue
        rows.append(
            {
                "host_id": cells[0],
                "address": cells[1],
                "rack": cells[2],
                "dc": cells[3],
                "total_files": int(cells[4]) if cells[4].isdigit() else cells[4],
            }
        )
    return rows


def run_nodetool(module, nodetool, args, *, check_rc=True):
    """Run nodetool with an argument list; return (rc, stdout, stderr, seconds)."""
    began = time.monotonic()
    rc, out, err = module.run_command([nodetool, *args])
    seconds = round(time.monotonic() - began, 2)
    if check_rc and rc != 0:
        module.fail_json(
            msg=f"nodetool {' '.join(args)} failed (rc={rc}): {(err or out).strip()[-500:]}",
            rc=rc,
        )
    return rc, out, err, seconds


def parse_concurrency(text):
    """Parse ``nodetool getconcurrency``: stage -> maximum pool size."""
    stages = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 3 and cells[1].isdigit() and cells[2].isdigit():
            stages[cells[0]] = int(cells[2])
    return stages


def parse_last_int(text):
    """The last integer in the output (``nodetool getconcurrentcompactors``)."""
    numbers = re.findall(r"-?\d+", text)
    if not numbers:
        raise ValueError(f"no number in nodetool output: {text.strip()[:200]!r}")
    return int(numbers[-1])


def parse_compaction_throughput(text):
    """``nodetool getcompactionthroughput`` ("Current compaction throughput: 64 MB/s") -> 64."""
    match = re.search(r"throughput:\s*(\d+)", text)
    if not match:
        raise ValueError(f"no throughput in nodetool output: {text.strip()[:200]!r}")
    return int(match.group(1))


def _mib_per_s(value):
    """'64MiB/s' or 64 -> 64."""
    match = re.match(r"^\s*(\d+)\s*(MiB/s)?\s*$", str(value))
    if not match:
        raise ValueError(f"expected <n>MiB/s, got {value!r}")
    return int(match.group(1))


_UNIT_MIB = {"bytes": 1 / 1048576, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}


def parse_cache_capacities(text):
    """``nodetool info`` -> {"key": MiB, "row": MiB, "counter": MiB} (cache capacities)."""
    capacities = {}
    for name, number, unit in re.findall(
        r"^(Key|Row|Counter) Cache\s*:.*?capacity ([\d.]+) (bytes|KiB|MiB|GiB)", text, re.M
    ):
        capacities[name.lower()] = round(float(number) * _UNIT_MIB[unit])
    if set(capacities) != {"key", "row", "counter"}:
        raise ValueError(f"no cache capacities in nodetool info: {text.strip()[:200]!r}")
    return capacities


def _size_mib(value):
    """'512MiB', '1GiB' or 512 -> MiB."""
    match = re.match(r"^\s*(\d+)\s*(MiB|GiB)?\s*$", str(value))
    if not match:
        raise ValueError(f"expected <n>MiB or <n>GiB, got {value!r}")
    return int(match.group(1)) * (1024 if match.group(2) == "GiB" else 1)


#: cassandra.yaml cache sizes -> the cache's name in ``nodetool info`` and setcachecapacity.
CACHE_CAPACITIES = {"key_cache_size": "key", "row_cache_size": "row"}


def set_cache_capacities(wanted, info):
    """``setcachecapacity`` with the ``wanted`` sizes ({cassandra.yaml key: MiB}).

    The command takes all three capacities: the caches not wanted keep what ``info`` (the
    ``nodetool info`` output) shows. Both sizes go in one command, so that setting one
    cannot put back the other's old capacity.
    """
    caches = parse_cache_capacities(info)
    caches.update({CACHE_CAPACITIES[key]: mib for key, mib in wanted.items()})
    return ["setcachecapacity", str(caches["key"]), str(caches["row"]), str(caches["counter"])]


def _cache_setter(key):
    """The LIVE_SETTERS entry of a cache's capacity (nodetool info / setcachecapacity)."""
    return (
        ["info"],
        lambda out: parse_cache_capacities(out)[CACHE_CAPACITIES[key]],
        lambda mib, info: set_cache_capacities({key: mib}, info),
        _size_mib,
    )


def _stage_setter(stage):
    """The LIVE_SETTERS entry of a thread-pool stage's size (getconcurrency/setconcurrency)."""
    return (
        ["getconcurrency", stage],
        lambda out: parse_concurrency(out)[stage],
        lambda n, _: ["setconcurrency", stage, str(n)],
        int,
    )


# cassandra.yaml key -> how nodetool reads and sets it while the node runs. Each entry:
# (get args, parse(output) -> int, set args(int, the get output), normalise(value) -> int).
LIVE_SETTERS = {
    "concurrent_reads": _stage_setter("ReadStage"),
    "concurrent_writes": _stage_setter("MutationStage"),
    "concurrent_counter_writes": _stage_setter("CounterMutationStage"),
    "concurrent_compactors": (
        ["getconcurrentcompactors"],
        parse_last_int,
        lambda n, _: ["setconcurrentcompactors", str(n)],
        int,
    ),
    "compaction_throughput": (
        ["getcompactionthroughput"],
        parse_compaction_throughput,
        lambda n, _: ["setcompactionthroughput", str(n)],
        _mib_per_s,
    ),
    # Live between two non-zero sizes only (planner.model.spaces.change_kind); 0 <-> n restarts.
    "row_cache_size": _cache_setter("row_cache_size"),
    "key_cache_size": _cache_setter("key_cache_size"),
}
