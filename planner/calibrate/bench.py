"""The real cluster as a calibration bench: the executor applies, the load generator measures.

:class:`ExecutorBench` applies a change with the executor playbook
(playbooks/change_settings.yml: live where possible, a rolling restart otherwise), warms up
until the throughput stops rising and measures one mix with :func:`planner.loadgen.run_load`.
:func:`read_running_config` reads the configuration the nodes run before a calibration
begins, :func:`describe_environment` the provenance of the measurements.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import loadgen
from planner._module_utils import kairos_driverlog
from planner.calibrate.space import Config
from planner.errors import KairosError, ValidationError
from planner.model.spaces import CACHE_VIEW_ROWS, from_settings_view, get_space, settings_row
from planner.workload import collect

#: Executor wall time assumed for the minutes budget before anything was measured.
ASSUMED_LIVE_APPLY_SECONDS = 40.0
ASSUMED_RESTART_APPLY_SECONDS = 180.0


def change_settings_command(
    *,
    ansible_playbook: str,
    playbook: str | Path,
    inventory: str | Path,
    changes: Mapping[str, Any],
    rollout_cl: str,
    tables: Sequence[str] = (),
    restart_all: bool = False,
) -> list[str]:
    """argv of the executor's "change these settings safely" entry point.

    Live keys are set on every node; restart keys roll through safe batches (the executor
    decides, see docs/executor.md). ``tables`` are the tables a compaction or row-cache
    change applies to (the row cache sets their caching). ``restart_all``: every node
    restarts in those batches too (``kairos_restart_all``; a Redis reload re-encodes).
    """
    extra: dict[str, Any] = {"settings": dict(changes), "cl": rollout_cl}
    if "compaction" in changes or "row_cache_size" in changes:
        extra["kairos_tables"] = list(tables)
    if restart_all:
        extra["kairos_restart_all"] = True
    return [ansible_playbook, "-i", str(inventory), str(playbook), "-e", json.dumps(extra)]


def find_ansible_playbook() -> str:
    """ansible-playbook beside this Python (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.exists():
        return str(beside)
    import shutil

    found = shutil.which("ansible-playbook")
    if not found:
        raise ValidationError("ansible-playbook: not found beside Python nor on PATH")
    return found


class ExecutorBench:
    """Applies changes with the executor playbook and measures with planner.loadgen.

    Parameters
    ----------
    load : planner.loadgen.LoadConfig
        The measurement run (hosts, CL, keys, concurrency); its mix and seconds are replaced
        per call.
    warmup_seconds, measure_seconds : float
    warmup_max_seconds : float
        After the first window, warm up in further windows of ``warmup_seconds`` for as long
        as the throughput still rises by more than ``warmup_tolerance`` from one window to
        the next, up to this many seconds of further windows (0: the first window only).
        A node just restarted runs cold (JIT, caches) for minutes: measured too early, a
        restart-class configuration looks worse than it is.
    warmup_tolerance : float
    restart_warmup_seconds : float
        The first window after a restart (and of the calibration) lasts at least this long.
    settle_timeout : float
        After a change of compaction strategy, wait (with no load) until no node runs or
        queues a compaction, up to this many seconds (:func:`wait_for_compactions`; 0: do
        not wait). Every node rewrites its SSTables then, for minutes on GBs of data, and a
        warm-up that only waits for the throughput to stop rising misses it: the
        throughput is flat while it is low.
    playbook, inventory : path
    rollout_cl : str
        Consistency level the executor keeps while restarting (its batching).
    read_caches : callable, optional
        Reads the nodes' cache counters (:func:`read_caches`); when given, every measured
        window records its caches (:func:`cache_window`) under ``caches``: whether a row or
        key cache was warm is then part of the measurement, not a guess.
    log_path : path
        The executor's output is appended here (it is long); its tail is shown on failure.
    """

    def __init__(self, *, load: loadgen.LoadConfig, warmup_seconds: float, measure_seconds: float,
                 playbook: str | Path, inventory: str | Path, rollout_cl: str,
                 warmup_max_seconds: float = 0.0, warmup_tolerance: float = 0.05,
                 restart_warmup_seconds: float = 0.0, settle_timeout: float = 0.0,
                 log_path: str | Path, ansible_playbook: str | None = None,
                 log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
                 playbook_timeout: float = 3600.0,
                 read_caches: Callable[[], Mapping[str, Mapping[str, int]]] | None = None,
                 ) -> None:
        self.load = load
        self.read_caches = read_caches
        self.warmup_seconds = warmup_seconds
        self.warmup_max_seconds = warmup_max_seconds
        self.warmup_tolerance = warmup_tolerance
        self.restart_warmup_seconds = restart_warmup_seconds
        self.settle_timeout = settle_timeout
        self.measure_seconds = measure_seconds
        self.playbook = Path(playbook).resolve()
        self.inventory = Path(inventory).resolve()
        self.rollout_cl = rollout_cl
        self.log_path = Path(log_path)
        self.ansible_playbook = ansible_playbook or find_ansible_playbook()
        self.log = log
        self.playbook_timeout = playbook_timeout

    def apply(self, changes: Mapping[str, Any], *, restart_all: bool = False,
              tables: Sequence[str] = ()) -> None:
        """``changes`` through playbooks/change_settings.yml (``tables``: the tables a
        compaction change applies to, by default the load's)."""
        argv = change_settings_command(
            ansible_playbook=self.ansible_playbook, playbook=self.playbook,
            inventory=self.inventory, changes=changes, rollout_cl=self.rollout_cl,
            tables=list(tables) or [f"{self.load.keyspace}.{self.load.table}"],
            restart_all=restart_all,
        )
        self._run_playbook(argv, f"applying {dict(changes)}")
        space = get_space(self.load.engine)
        if self.settle_timeout > 0 and any(space[k].location == "table" for k in changes):
            self.wait_for_compactions()

    def apply_plan(self, plan: str | Path) -> None:
        """The due step of ``plan`` through playbooks/apply_plan.yml (beside the playbook)."""
        argv = [self.ansible_playbook, "-i", str(self.inventory),
                str(self.playbook.parent / "apply_plan.yml"), "-e", f"plan={Path(plan).resolve()}"]
        self._run_playbook(argv, f"applying the plan {plan}")
        if self.settle_timeout > 0:
            self.wait_for_compactions()

    def wait_for_compactions(self) -> None:
        waited = wait_for_compactions(self.load.contact_points, port=self.load.port or 9042,
                                      timeout=self.settle_timeout, log=self.log)
        self.log(f"calibrate: compactions finished {waited:.0f} s after the change (no load)")

    def _run_playbook(self, argv: Sequence[str], what: str) -> None:
        # The repository root: ansible.cfg there sets the roles, modules and module_utils.
        root = self.playbook.parent.parent
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as out:
            out.write(f"\n=== {datetime.now(UTC).isoformat()} {' '.join(argv)}\n")
            out.flush()
            # The environment passes through: credentials travel there, never in argv.
            proc = subprocess.run(list(argv), cwd=root, env=dict(os.environ), stdout=out,
                                  stderr=subprocess.STDOUT, timeout=self.playbook_timeout,
                                  check=False)
        if proc.returncode != 0:
            # A log of subprocess output, shown not parsed: odd bytes are replaced.
            tail = self.log_path.read_text(errors="replace").splitlines()[-25:]
            raise KairosError(
                f"the executor failed (rc {proc.returncode}) {what}; the "
                f"calibration state is saved, rerun the same command to resume. Last lines of "
                f"{self.log_path}:\n" + "\n".join(tail)
            )

    def load_for(self, mix: Mapping[str, float], name: str) -> loadgen.LoadConfig:
        """The load that measures mix ``name`` (one load, its mix replaced)."""
        return replace(self.load, mix=dict(mix))

    def _run(self, mix: Mapping[str, float], seconds: float, preload: bool, name: str = ""
             ) -> loadgen.LoadResult:
        config = replace(self.load_for(mix, name), seconds=seconds, preload=preload)
        return loadgen.run_load(config)  # Ctrl-C: raised once the workers stopped

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool = False,
                name: str = "") -> None:
        first = max(self.warmup_seconds, self.restart_warmup_seconds if restarted else 0.0)
        if first <= 0 and not preload:
            return
        window = max(self.warmup_seconds, 1.0)
        first = max(first, 1.0)
        self.log(f"calibrate: warming up {first:g} s"
                 + (" (after a restart)" if restarted and first > window else "")
                 + (" (preloading every record first)" if preload else ""))
        last = measurement_from_result(self._run(mix, first, preload, name))
        extra = 0.0
        while extra + window <= self.warmup_max_seconds:
            nxt = measurement_from_result(self._run(mix, window, False, name))
            extra += window
            rising = self.still_rising(last, nxt)
            self.log(f"calibrate: warm-up {self.describe_window(last, nxt)}"
                     + (", still rising" if rising else ", steady"))
            if not rising:
                return
            last = nxt
        if extra:
            self.log(f"calibrate: warm-up stopped at --warmup-max ({first + extra:g} s in all) "
                     "while the throughput was still rising")

    def still_rising(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
        """Whether a warm-up window ``after`` is still faster than the one ``before`` by
        more than the tolerance (the cluster is not warm yet)."""
        return bool(after["ops_per_s"] > before["ops_per_s"] * (1 + self.warmup_tolerance))

    def describe_window(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
        return f"{before['ops_per_s']:.0f} -> {after['ops_per_s']:.0f} ops/s"

    def measure(self, mix: Mapping[str, float], name: str = "") -> dict[str, Any]:
        shown = ",".join(f"{c}={f:g}" for c, f in mix.items() if f)
        self.log(f"calibrate: measuring {shown} for {self.measure_seconds:g} s")
        before = self._caches()
        result = self._run(mix, self.measure_seconds, False, name)
        measurement = measurement_from_result(result)
        after = self._caches() if before is not None else None
        if before is not None and after is not None:
            measurement["caches"] = cache_window(before, after)
        return measurement

    def _caches(self) -> Mapping[str, Mapping[str, int]] | None:
        if self.read_caches is None:
            return None
        try:
            return self.read_caches()
        except KairosError as exc:
            # The throughput is still a measurement; only its cache figures are missing.
            self.log(f"calibrate: the window's cache figures are not recorded: {exc}")
            return None

    def expected_seconds(self, changes: Mapping[str, Any], n_mixes: int) -> float:
        space = get_space(self.load.engine)
        restart = space.restart_params(changes)
        apply = (ASSUMED_RESTART_APPLY_SECONDS if restart
                 else ASSUMED_LIVE_APPLY_SECONDS if changes else 0.0)
        # ~10 s per load run for spawning workers and connecting; two warm-up windows
        # (the least a warm-up past the first window takes)
        windows = 2 if self.warmup_max_seconds >= self.warmup_seconds else 1
        warm = windows * (self.warmup_seconds + 10)
        if restart:
            warm += max(self.restart_warmup_seconds - self.warmup_seconds, 0.0)
        return apply + warm + n_mixes * (self.measure_seconds + 10)


def measurement_from_result(result: Any) -> dict[str, Any]:
    """The record of one measurement from a :class:`planner.loadgen.LoadResult`.

    ``ops_per_s`` counts successful operations only (failed ones are not throughput). A
    shaped Redis run also records its read hit ratio (``hit_ratio``: the shape's lookups of
    class read) and the keys the primaries evicted while it ran (``evicted_keys``).
    """
    seconds = float(result.seconds)
    ok_ops = result.ops - result.failed
    out = {
        "ops_per_s": round(ok_ops / seconds, 1) if seconds > 0 else 0.0,
        "ops": int(result.ops),
        "failed": int(result.failed),
        "failures": dict(result.failures),
        "seconds": round(seconds, 2),
        "latency_ms": dict(result.latency_ms),
    }
    if getattr(result, "shape", None):
        ratio = result.hit_ratio("read")
        out["hit_ratio"] = None if ratio is None else round(ratio, 4)
        out["evicted_keys"] = result.evicted_keys
    return out


# ------------------------------------------------------------ running configuration
def parse_setting(engine: str, name: str, shown: str | None) -> Any:
    """A value as ``system_views.settings`` shows it -> canonical (unset -> the default);
    ``shown`` is the row :func:`planner.model.spaces.settings_row` names."""
    return from_settings_view(engine, name, shown)


def address_port(host: str, port: int) -> tuple[str, int]:
    """``address`` or ``address:port`` -> (address, port), ``port`` when none is given."""
    name, _, own = host.rpartition(":") if ":" in host else (host, "", "")
    return name, int(own or port)


@contextlib.contextmanager
def node_session(host: str, port: int, *, timeout: float = 30.0,
                 application: bool = False) -> Iterator[Any]:
    """A CQL session that talks to ``host`` alone (virtual tables are per node).

    Credentials come from the environment: Kairos' own login, or with ``application`` the
    load's (which owns the application's tables), as :func:`loadgen.cassandra_login` says.
    """
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    kairos_driverlog.route_driver_log()  # the driver's tracebacks: to its file, not stderr
    login = loadgen.cassandra_login(application)
    auth = PlainTextAuthProvider(username=login[0], password=login[1]) if login else None
    cluster = Cluster(
        [host], port=port, protocol_version=5, auth_provider=auth, connect_timeout=timeout,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=WhiteListRoundRobinPolicy([host]), request_timeout=timeout)},
        ssl_context=collect.cassandra_ssl_context(),
    )
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def compaction_backlog(session: Any) -> int:
    """Compactions one node is running (``system_views.sstable_tasks``) or has queued
    (the CompactionExecutor pool's pending tasks)."""
    running = len(list(session.execute("SELECT kind FROM system_views.sstable_tasks")))
    pool = session.execute("SELECT pending_tasks FROM system_views.thread_pools "
                           "WHERE name = 'CompactionExecutor'").one()
    return running + (int(pool.pending_tasks) if pool else 0)


#: The caches of ``system_views.caches`` a window records.
CACHES = ("keys", "rows")


def read_caches(hosts: Sequence[str], *, port: int) -> dict[str, dict[str, int]]:
    """The nodes' key and row cache counters, summed over ``hosts``.

    ``{"keys": {"capacity_bytes", "entry_count", "hit_count", "request_count"}, "rows":
    ...}`` from each node's ``system_views.caches``; ``hosts`` are addresses or
    ``address:port``.

    Raises
    ------
    KairosError
        A node cannot be reached or has no such view.
    """
    fields = ("capacity_bytes", "entry_count", "hit_count", "request_count")
    total = {name: dict.fromkeys(fields, 0) for name in CACHES}
    try:
        for h in hosts:
            with node_session(*address_port(h, port)) as session:
                for row in session.execute(f"SELECT name, {', '.join(fields)} "
                                           "FROM system_views.caches"):
                    if row.name in total:
                        for f in fields:
                            total[row.name][f] += int(getattr(row, f) or 0)
    except Exception as exc:
        raise KairosError(f"cannot read system_views.caches over CQL "
                          f"({type(exc).__name__}: {exc})") from None
    return total


def cache_window(before: Mapping[str, Mapping[str, int]],
                 after: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, Any]]:
    """What each cache did between two :func:`read_caches`: its requests, its hit ratio over
    them (None without requests, or when a counter went back: a node restarted), and its
    entries and capacity at the end.

    A node's row of ``system_views.caches`` reads its hit and request counters one after the
    other, so a read in flight can be counted as a hit and not yet as a request: when every
    read hits, a window can show a few more hits than requests (seen on the lab: the first
    window of a calibration). The ratio is then 1.0."""
    out: dict[str, dict[str, Any]] = {}
    for name in CACHES:
        b, a = before.get(name), after.get(name)
        if not b or not a:
            continue
        requests = a["request_count"] - b["request_count"]
        hits = a["hit_count"] - b["hit_count"]
        valid = requests > 0 and hits >= 0
        out[name] = {
            "requests": requests if requests >= 0 else None,
            "hit_ratio": round(min(hits, requests) / requests, 4) if valid else None,
            "entries": a["entry_count"],
            "capacity_mib": round(a["capacity_bytes"] / 2**20, 1),
        }
    return out


def wait_for_compactions(
    hosts: Sequence[str], *, port: int, timeout: float, quiet_seconds: float = 15.0,
    poll_seconds: float = 5.0, log: Callable[[str], None] = lambda msg: None,
) -> float:
    """Wait until no node has run or queued a compaction for ``quiet_seconds``; seconds waited.

    ``hosts`` are addresses, or ``address:port`` (``port`` is the default).

    After a compaction-strategy change every node rewrites its SSTables for minutes, at a
    fraction of its throughput (docs/calibration.md, "2 GB a node"): a measurement that
    starts then measures the rewrite, not the configuration.

    Raises
    ------
    KairosError
        A node cannot be reached, or compactions still run after ``timeout`` seconds.
    """
    with contextlib.ExitStack() as stack:
        try:
            sessions = {}
            for h in hosts:
                sessions[h] = stack.enter_context(node_session(*address_port(h, port)))
            return wait_until_quiet(
                lambda: {h: compaction_backlog(s) for h, s in sessions.items()},
                timeout=timeout, quiet_seconds=quiet_seconds, poll_seconds=poll_seconds,
                log=log)
        except KairosError:
            raise
        except Exception as exc:
            raise KairosError(f"cannot read the nodes' compactions over CQL "
                              f"({type(exc).__name__}: {exc})") from None


def wait_until_quiet(
    backlog: Callable[[], Mapping[str, int]], *, timeout: float, quiet_seconds: float,
    poll_seconds: float, log: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Poll ``backlog()`` (tasks per node) until every node has had none for
    ``quiet_seconds``; seconds waited. A strategy picks its next task as one ends, so a
    backlog that stays at zero that long is a settled node, not a gap between two tasks.

    Raises KairosError when the backlog is not quiet after ``timeout`` seconds.
    """
    began = clock()
    quiet_since: float | None = None
    said = -1e9
    while True:
        now_backlog = dict(backlog())
        now = clock()
        if any(now_backlog.values()):
            quiet_since = None
            if now - said >= 30.0:
                log(f"waiting for compactions to finish: {now_backlog} "
                    f"({now - began:.0f} s so far)")
                said = now
        else:
            quiet_since = now if quiet_since is None else quiet_since
            if now - quiet_since >= quiet_seconds:
                return now - began
        if now - began >= timeout:
            raise KairosError(f"compactions still run after {timeout:g} s: {now_backlog} "
                              "(tasks per node)")
        sleep(poll_seconds)


def read_running_config(
    params: Sequence[str], *, hosts: Sequence[str], port: int, keyspace: str, table: str,
    timeout: float = 30.0,
) -> tuple[Config, str]:
    """The running values of ``params`` on every Cassandra node (``hosts``: addresses or
    ``address:port``, ``port`` where none is given), and its release version.

    cassandra.yaml parameters come from each node's ``system_views.settings`` (the caches'
    sizes from ``system_views.caches``, which a live resize changes), the compaction
    strategy from ``system_schema.tables`` for ``keyspace.table`` (the default strategy when
    the table does not exist yet). Credentials come from the environment (as for the load
    generator). The JVM heap cannot be read over CQL: give it with ``--current``.

    Raises
    ------
    ValidationError
        ``heap_size`` asked for, or the nodes run different values.
    KairosError
        A node cannot be reached.
    """
    space = get_space("cassandra")
    unreadable = [p for p in params if space[p].location == "jvm"]
    if unreadable:
        raise ValidationError(f"{', '.join(unreadable)}: cannot be read over CQL; give the "
                              "running value with --current FILE")
    per_node: dict[str, Config] = {}
    version = ""
    for host in hosts:
        try:
            with node_session(*address_port(host, port), timeout=timeout) as session:
                shown = {r.name: r.value for r in session.execute(
                    "SELECT name, value FROM system_views.settings")}
                caches = ({r.name: int(r.capacity_bytes or 0) for r in session.execute(
                    "SELECT name, capacity_bytes FROM system_views.caches")}
                    if any(p in CACHE_VIEW_ROWS for p in params) else {})
                values: Config = {}
                for p in params:
                    if CACHE_VIEW_ROWS.get(p) in caches:
                        # a live resize leaves system_views.settings at the start-up size
                        values[p] = space[p].coerce(space[p].format_size(
                            caches[CACHE_VIEW_ROWS[p]] / 2**20))
                    elif space[p].location == "table":
                        row = session.execute(
                            "SELECT compaction FROM system_schema.tables WHERE "
                            "keyspace_name=%s AND table_name=%s", (keyspace, table)).one()
                        values[p] = (str(row.compaction["class"]).rsplit(".", 1)[-1] if row
                                     else space[p].default)
                    else:
                        values[p] = parse_setting("cassandra", p,
                                                  shown.get(settings_row("cassandra", p)))
                per_node[host] = values
                version = str(session.execute("SELECT release_version FROM system.local")
                              .one().release_version)
        except ValidationError:
            raise
        except Exception as exc:
            raise KairosError(f"{host}: cannot read the running configuration over CQL "
                              f"({type(exc).__name__}: {exc})") from None
    return agreed_values(per_node, params), version


def agreed_values(per_node: Mapping[str, Config], params: Sequence[str]) -> Config:
    """The values every node runs (node -> its values of ``params``).

    Raises ValidationError naming the parameters and two nodes that differ."""
    first_node, first = next(iter(per_node.items()))
    for node, values in per_node.items():
        differ = [k for k in params if values[k] != first[k]]
        if differ:
            raise ValidationError(
                f"the nodes run different values of {', '.join(differ)} ({first_node}: "
                f"{ {k: first[k] for k in differ} }, {node}: "
                f"{ {k: values[k] for k in differ} }); make them equal first, or give "
                "--current FILE")
    return dict(first)


def describe_environment(cluster_version: str = "") -> dict[str, Any]:
    """Provenance of the measurements: hardware, versions, date, and the resource envelopes
    this starter's nodes run in, as the kernel holds them (docs/envelopes.md)."""
    from planner import __version__
    from planner._module_utils import kairos_cgroup

    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "host": platform.node(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "kairos": __version__,
        "cluster_version": cluster_version,
        **kairos_cgroup.held(),
    }
