"""The engine clients: the Cassandra and Redis workers that issue the load and read it back.

Each worker runs inside one spawned worker process (:mod:`planner.loadgen.run`). The issue
side shared by both engines is :class:`_Plan` (clock, bounds, trace step, pacing, mix) and
:class:`_Writer` (key choice and the acknowledged-write log of one writer slot).

Cassandra acknowledges a write when the coordinator answers at the requested consistency
level; its worker keeps ``concurrency`` asynchronous requests in flight. Redis acknowledges
a write here only when ``WAIT <replicas> <timeout>`` sent on the same connection right
after the ``SET`` reports at least ``replicas`` replicas; its worker runs ``concurrency``
client threads, one writer each. The drivers are imported inside the workers, so the
parent never loads them. Credentials come from the environment, never from argv.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from planner._module_utils import kairos_driverlog
from planner.errors import ValidationError
from planner.loadgen.check import (
    AckLog,
    LatencyHistogram,
    WorkerStats,
    check_value,
    make_value,
    merge_failure_messages,
    owned_key,
)
from planner.loadgen.config import LoadConfig, split_host_port
from planner.loadgen.shapes import (
    BURST_VALUE_SIZE,
    MARKER_FIELD,
    SHAPES,
    Op,
    ShapeChooser,
    field_name,
    hash_fields,
)
from planner.loadgen.workload import KeyChooser, OpMix, Pacer, parse_mix
from planner.workload import collect

#: Environment variables read (in this order) for the Redis password; never argv.
REDIS_PASSWORD_ENV = collect.REDIS_PASSWORD_ENV
#: Environment variables for Cassandra password authentication (optional): Kairos' own
#: login, and the application's that loads (which create and write their tables) use when
#: it is set (planner.workload.collect.cassandra_login).
CASSANDRA_USER_ENV = collect.CASSANDRA_USER_ENV
CASSANDRA_PASSWORD_ENV = collect.CASSANDRA_PASSWORD_ENV
LOAD_CASSANDRA_USER_ENV = collect.LOAD_CASSANDRA_USER_ENV
LOAD_CASSANDRA_PASSWORD_ENV = collect.LOAD_CASSANDRA_PASSWORD_ENV
cassandra_login = collect.cassandra_login


# ------------------------------------------------------------ issue side (both engines)
class _Plan:
    """The issue-side state shared by both engines: clock, bounds, schedule, key choice."""

    def __init__(self, config: LoadConfig, index: int, stop: Any) -> None:
        self.config = config
        self.index = index
        self.stop = stop
        self.start = time.monotonic()
        self.end = self.start + config.seconds
        share = config.processes
        self.rate = config.rate / share if config.rate is not None else None
        self.max_requests = (
            None if config.max_requests is None
            else max(1, config.max_requests // share + (index < config.max_requests % share))
        )
        self.issued = 0
        self.stopped_by = "duration"
        self.pacer = Pacer()
        self._mixes: dict[int, OpMix | None] = {}
        self.default_mix = OpMix(config.mix or {})
        self.lock = threading.Lock()

    def step(self, now: float) -> int | None:
        if self.config.trace is None:
            return None
        return self.config.trace.step_at(now - self.start)

    def target(self, step: int | None) -> tuple[float | None, OpMix | None]:
        """The per-process rate and the mix of ``step`` (mix None = idle step)."""
        trace = self.config.trace
        if trace is None or step is None:
            return self.rate, self.default_mix
        rate = trace.rates[step] / self.config.processes
        if step not in self._mixes:
            mix = trace.mixes[step]
            idle = rate <= 0 or sum(mix.values()) <= 0
            self._mixes[step] = None if idle else OpMix(parse_mix(mix, self.config.engine))
        return rate, self._mixes[step]

    def should_stop(self, now: float) -> bool:
        if self.stop.is_set():
            self.stopped_by = "stopped"
            return True
        if now >= self.end:
            return True
        if self.max_requests is not None and self.issued >= self.max_requests:
            self.stopped_by = "max_requests"
            return True
        return False

    def next_slot(self) -> tuple[int | None, OpMix] | None:
        """Block until an operation may be issued; return (step, mix), or None to stop."""
        while True:
            now = time.monotonic()
            if self.should_stop(now):
                return None
            step = self.step(now)
            rate, mix = self.target(step)
            if mix is None:
                time.sleep(0.05)
                continue
            wait = self.pacer.delay(rate, now)
            if wait > 0:
                time.sleep(wait)
                continue
            with self.lock:
                if self.max_requests is not None and self.issued >= self.max_requests:
                    continue
                self.issued += 1
            return step, mix

    def slots(self) -> Iterator[tuple[int | None, OpMix]]:
        """``(step, mix)`` of each operation to issue, until the run should stop."""
        while (slot := self.next_slot()) is not None:
            yield slot


class _Writer:
    """Key choice and acknowledged-write bookkeeping of one writer slot."""

    def __init__(self, config: LoadConfig, slot: int, tag: str, rng: random.Random) -> None:
        self.config = config
        self.slot = slot
        self.tag = tag
        self.rng = rng
        self.writers = config.writers
        self.chooser = KeyChooser(config.distribution, config.keys)
        self.acks = AckLog(slot, self.writers, capacity=config.keys // self.writers + 1)
        self.seq = 0
        self.inserted = 0
        first = config.keys + ((slot - config.keys) % self.writers)
        self._first_insert = first
        self._insert_capacity = max(1, (config.max_keys - first + self.writers - 1)
                                    // self.writers) if first < config.max_keys else 0

    def items(self) -> int:
        """Estimated keys in the table now (records + everyone's inserts, bounded)."""
        return min(self.config.max_keys, self.config.keys + self.inserted * self.writers)

    def read_key(self) -> int:
        return self.chooser.next(self.rng, self.items())

    def update_key(self) -> int:
        return owned_key(self.chooser.next(self.rng, self.items()), self.slot, self.writers)

    def insert_key(self) -> int:
        if self._insert_capacity == 0:
            return self.update_key()
        i = self.inserted % self._insert_capacity
        self.inserted += 1
        return self._first_insert + i * self.writers

    def next_value(self) -> tuple[int, str]:
        self.seq += 1
        return self.seq, make_value(self.tag, self.slot, self.seq, self.config.value_size)


# -------------------------------------------------------------------------- Cassandra
class _CassandraWorker:
    """One worker process's Cassandra client: async requests, bounded in flight."""

    def __init__(self, config: LoadConfig, index: int, tag: str, stop: Any) -> None:
        self.config = config
        self.index = index
        self.stop = stop
        self.rng = random.Random(None if config.seed is None else config.seed * 1000 + index)
        self.writer = _Writer(config, index, tag, self.rng)
        self.stats = WorkerStats(config.classes, config.trace.steps if config.trace else 0)
        self.inflight = threading.BoundedSemaphore(config.concurrency)
        self.cluster: Any = None
        self.session: Any = None

    # -- connection and schema
    def connect(self) -> None:
        from cassandra import ConsistencyLevel
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import DCAwareRoundRobinPolicy, RetryPolicy, TokenAwarePolicy

        kairos_driverlog.route_driver_log()  # a spawned worker: its own handler
        cfg = self.config
        hosts = [split_host_port(p, cfg.port or 9042) for p in cfg.contact_points]
        ports = {p for _, p in hosts}
        if len(ports) != 1:
            raise ValidationError("contact_points: Cassandra nodes must share one CQL port")
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=cfg.local_dc)),
            retry_policy=RetryPolicy(),
            consistency_level=getattr(ConsistencyLevel, cfg.cl),
            request_timeout=cfg.request_timeout,
        )
        login = cassandra_login(application=True)
        auth = PlainTextAuthProvider(username=login[0], password=login[1]) if login else None
        self.cluster = Cluster(
            contact_points=[h for h, _ in hosts],
            # Cassandra 5.0 speaks v5: negotiating down from the driver's newest version
            # defuncts connections, and with authentication a host could be marked down.
            protocol_version=5,
            port=ports.pop(),
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            auth_provider=auth,
            connect_timeout=cfg.request_timeout,
            ssl_context=collect.cassandra_ssl_context(),
        )
        self.session = self.cluster.connect()
        self._cl = ConsistencyLevel

    def create_schema(self) -> None:
        cfg = self.config
        self.session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {cfg.keyspace} WITH replication = "
            f"{{'class': '{cfg.replication_class}', "
            f"'replication_factor': {cfg.replication_factor}}}",
            timeout=60,
        )
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {cfg.keyspace}.{cfg.table} "
            "(key bigint PRIMARY KEY, field0 text)",
            timeout=60,
        )

    def prepare(self) -> None:
        cfg = self.config
        t = f"{cfg.keyspace}.{cfg.table}"
        s = self.session
        self.cluster.refresh_schema_metadata(max_schema_agreement_wait=30)
        self.q_read = s.prepare(f"SELECT field0 FROM {t} WHERE key = ?")
        self.q_update = s.prepare(f"UPDATE {t} SET field0 = ? WHERE key = ?")
        self.q_insert = s.prepare(f"INSERT INTO {t} (key, field0) VALUES (?, ?)")
        self.q_scan = s.prepare(f"SELECT key, field0 FROM {t} WHERE token(key) > token(?) LIMIT ?")
        self.q_verify = s.prepare(f"SELECT field0 FROM {t} WHERE key = ?")
        self.q_verify.consistency_level = getattr(self._cl, cfg.verify_cl or "ALL")
        for q in (self.q_read, self.q_update, self.q_insert, self.q_scan, self.q_verify):
            # Plain reads and writes of a fixed value: safe to retry on another coordinator.
            q.is_idempotent = True

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()

    # -- one operation
    def _statement(self, cls: str) -> tuple[Any, tuple[Any, ...], int | None, int | None]:
        w = self.writer
        if cls == "read":
            return self.q_read, (w.read_key(),), None, None
        if cls == "scan":
            return self.q_scan, (w.read_key(), self.config.scan_length), None, None
        key = w.insert_key() if cls == "insert" else w.update_key()
        seq, value = w.next_value()
        if cls == "insert":
            return self.q_insert, (key, value), key, seq
        return self.q_update, (value, key), key, seq

    def _issue(self, cls: str, step: int | None, record: bool = True) -> None:
        stmt, params, key, seq = self._statement(cls)
        began = time.perf_counter()
        try:
            future = self.session.execute_async(stmt, params)
        except Exception as exc:
            self.inflight.release()
            if record:
                self.stats.failure(cls, exc, step)
            return
        future.add_callbacks(
            self._on_success, self._on_error,
            callback_args=(cls, began, key, seq, step, record),
            errback_args=(cls, key, seq, step, record),
        )

    def _on_success(self, _rows: Any, cls: str, began: float, key: int | None,
                    seq: int | None, step: int | None, record: bool) -> None:
        try:
            if key is not None and seq is not None:
                with self.stats.lock:
                    self.writer.acks.record(key, seq)
            if record:
                self.stats.success(cls, time.perf_counter() - began, step)
        finally:
            self.inflight.release()

    def _on_error(self, exc: BaseException, cls: str, _key: int | None, _seq: int | None,
                  step: int | None, record: bool) -> None:
        try:
            if record:
                self.stats.failure(cls, exc, step)
            else:  # a preload write: not an operation of the run, but still a failure
                with self.stats.lock:
                    self.stats.failures[f"preload:{type(exc).__name__}"] += 1
        finally:
            self.inflight.release()

    def _drain(self) -> None:
        deadline = time.monotonic() + 2 * self.config.request_timeout + 5
        taken = 0
        while taken < self.config.concurrency and time.monotonic() < deadline:
            if self.inflight.acquire(timeout=0.1):
                taken += 1
        for _ in range(taken):
            self.inflight.release()

    # -- phases
    def preload(self) -> None:
        """Write every owned record once (acknowledged writes, not counted as operations)."""
        w = self.writer
        for key in range(w.slot, self.config.keys, w.writers):
            if self.stop.is_set():
                break
            self.inflight.acquire()
            seq, value = w.next_value()
            began = time.perf_counter()
            future = self.session.execute_async(self.q_insert, (key, value))
            future.add_callbacks(
                self._on_success, self._on_error,
                callback_args=("insert", began, key, seq, None, False),
                errback_args=("insert", key, seq, None, False),
            )
        self._drain()

    def run(self, plan: _Plan) -> None:
        for step, mix in plan.slots():
            while not self.inflight.acquire(timeout=0.1):
                if plan.should_stop(time.monotonic()):
                    self._drain()
                    return
            self._issue(mix.choose(self.rng), step)
        self._drain()

    def verify(self) -> dict[str, Any]:
        lost: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        lock = threading.Lock()
        checked = 0
        w = self.writer

        def done(rows: Any, acked_seq: int) -> None:
            try:
                row = rows[0] if rows else None
                kind = check_value(row.field0 if row else None, tag=w.tag, slot=w.slot,
                                   acked_seq=acked_seq)
                if kind != "ok":
                    with lock:
                        lost[kind] += 1
            finally:
                self.inflight.release()

        def failed(exc: BaseException) -> None:
            with lock:
                errors[type(exc).__name__] += 1
            self.inflight.release()

        for key, seq in w.acks.items():
            self.inflight.acquire()
            checked += 1
            try:
                future = self.session.execute_async(self.q_verify, (key,))
            except Exception as exc:
                failed(exc)
                continue
            future.add_callbacks(done, failed, callback_args=(seq,))
        self._drain()
        return {"lost": dict(lost), "verify_errors": dict(errors), "verified_keys": checked,
                "verified": not errors}


# ------------------------------------------------------------------------------ Redis
def redis_password(config: LoadConfig) -> str | None:
    """The load's Redis password: the config's, else the application's login
    (:func:`planner.workload.collect.redis_login`)."""
    if config.password is not None:
        return config.password
    return collect.redis_login(application=True)[1]


def redis_cluster(config: LoadConfig) -> Any:
    """A redis-py cluster client of the load's nodes, logged in as the load (the
    application's login unless the config gives a password), TLS from the environment."""
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry

    nodes = [ClusterNode(*split_host_port(p, config.port or 6379))
             for p in config.contact_points]
    return RedisCluster(
        startup_nodes=nodes,
        username=None if config.password is not None else collect.redis_login(True)[0],
        password=redis_password(config),
        decode_responses=True,
        socket_timeout=config.request_timeout,
        socket_connect_timeout=min(2.0, config.request_timeout),
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0),
                    retries=max(3, int(config.request_timeout))),
        **collect.redis_tls_kwargs(),
    )


def unlink_load_keys(config: LoadConfig, *, batch: int = 1000) -> int:
    """UNLINK every key of the load's ``prefix`` on every primary (only the keys a load with
    this prefix writes: ``prefix:...``); the number unlinked."""
    kairos_driverlog.route_driver_log()
    rc = redis_cluster(config)
    removed = 0
    try:
        for node in rc.get_nodes():
            if node.server_type != "primary":
                continue
            keys: list[str] = []
            for key in rc.scan_iter(match=f"{config.prefix}:*", count=batch,
                                    target_nodes=node):
                keys.append(key)
                if len(keys) >= batch:
                    removed += _unlink(rc, keys)
                    keys = []
            removed += _unlink(rc, keys)
    finally:
        rc.close()
    return removed


def _unlink(rc: Any, keys: list[str]) -> int:
    if not keys:
        return 0
    pipe = rc.pipeline()
    for key in keys:
        pipe.unlink(key)
    return sum(int(n) for n in pipe.execute())


class EvictionMeter:
    """The keys the cluster's nodes evicted, counted through failovers and restarts.

    INFO's ``evicted_keys`` is a node's own and starts again from 0 when the node restarts
    (a new ``run_id``), and a failover moves a node from the primaries to the replicas: a
    sum over the primaries at the start and at the end misses both (a reload restarts every
    node). Each reading adds, per node, what its counter rose since that node's last
    reading, or its whole count under a new run id. A node is counted from its first
    reading, and what it evicted after its last reading before it stopped is missed: the
    total is a lower bound, so no missing key is put down to an eviction that did not
    happen."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, int]] = {}  # node -> (run_id, evicted_keys)
        self.total = 0
        self.readings = 0

    def add(self, infos: Mapping[str, Mapping[str, Any]]) -> None:
        """One reading: INFO server and stats of the nodes that answered, by node."""
        for node, info in infos.items():
            run_id, count = str(info["run_id"]), int(info["evicted_keys"])
            before = self.seen.get(node)
            if before is not None:
                self.total += count - before[1] if run_id == before[0] else count
            self.seen[node] = (run_id, count)
        self.readings += 1


#: The "other" operation: a Lua script (Redis's "other" class) touching one key.
_OTHER_SCRIPT = "return redis.call('EXISTS', KEYS[1])"

#: Error replies of a WAIT whose primary has just turned replica (Redis 7.0's words).
_FAILED_OVER_REPLIES = ("UNBLOCKED", "WAIT cannot be used with replica instances")


def _failed_over(reply: str) -> bool:
    """An error reply that says the write's primary turned replica under it."""
    return reply.startswith(_FAILED_OVER_REPLIES)


class _RedisWorker:
    """One worker process's Redis Cluster client: ``concurrency`` threads, one writer each."""

    def __init__(self, config: LoadConfig, index: int, tag: str, stop: Any) -> None:
        self.config = config
        self.index = index
        self.tag = tag
        self.stop = stop
        steps = config.trace.steps if config.trace else 0
        self.threads = config.concurrency
        self.rngs = [random.Random(None if config.seed is None
                                   else config.seed * 1000 + index * self.threads + t)
                     for t in range(self.threads)]
        self.writers = [_Writer(config, index * self.threads + t, tag, self.rngs[t])
                        for t in range(self.threads)]
        self.stats = [WorkerStats(config.classes, steps) for _ in range(self.threads)]
        self.rc: Any = None
        self.choosers = [
            ShapeChooser(config.shape, slot=w.slot, writers=w.writers, keys=config.keys,
                         max_keys=config.max_keys, distribution=config.distribution,
                         scan_length=config.scan_length)
            for w in self.writers] if config.shape else []
        self.hashes = config.shape is not None and SHAPES[config.shape].hashes
        self.miss_penalty = config.miss_penalty_ms / 1000.0
        self.began = time.monotonic()
        # A shaped run's evictions (None: not measured, or not readable).
        self.meter: EvictionMeter | None = EvictionMeter() if config.shape else None

    def connect(self) -> None:
        from redis.cluster import RedisCluster

        kairos_driverlog.route_driver_log()  # a spawned worker: its own handler
        self.rc = redis_cluster(self.config)
        self.rc.ping(target_nodes=RedisCluster.PRIMARIES)
        self.read_evictions()

    def read_evictions(self) -> None:
        """Add a reading of every node's evictions to the meter (shaped runs: at the start,
        every second while the load runs, and at the end). A node that does not answer (it
        restarts) is read again next time; a reading refused (e.g. a login without INFO)
        leaves the count unknown."""
        if self.meter is None:
            return
        infos: dict[str, Mapping[str, Any]] = {}
        for node in self.rc.get_nodes():
            try:
                info = self.rc.info("server", "stats", target_nodes=node)
            except Exception as exc:  # a node down (restarting) answers next time
                if "NOPERM" in str(exc):
                    self.meter = None
                    return
                continue
            if isinstance(info, Mapping) and node.name in info:  # redis-py: {name: reply}
                info = info[node.name]
            if not (isinstance(info, Mapping) and "evicted_keys" in info and "run_id" in info):
                self.meter = None
                return
            infos[node.name] = info
        self.meter.add(infos)

    def close(self) -> None:
        if self.rc is not None:
            self.rc.close()

    def key_name(self, key: int) -> str:
        if self.hashes:
            return f"{self.config.prefix}:h:{key}"
        return f"{self.config.prefix}:{key}"

    def write(self, key: int, value: str) -> bool:
        """SET then WAIT on the same connection of the key's primary; True if acknowledged."""
        return self.acked_write(self.key_name(key), lambda pipe, name: pipe.set(name, value))

    def acked_write(self, name: str, queue: Any) -> bool:
        """``queue(pipe, name)`` then WAIT on the same connection of the key's primary;
        True if acknowledged.

        Follows MOVED (slot map refreshed) and ASK, and retries connection errors and
        CLUSTERDOWN/TRYAGAIN with bounded exponential backoff until ``request_timeout``.
        """
        from redis.exceptions import (
            AskError,
            ClusterDownError,
            ConnectionError,
            MovedError,
            ResponseError,
            TimeoutError,
            TryAgainError,
        )

        cfg = self.config
        deadline = time.monotonic() + cfg.request_timeout
        attempt = 0
        ask: Any = None
        while True:
            node = ask or self.rc.get_node_from_key(name)
            try:
                pipe = self.rc.get_redis_connection(node).pipeline(transaction=False)
                if ask is not None:
                    pipe.execute_command("ASKING")
                queue(pipe, name)
                pipe.execute_command("WAIT", cfg.wait_replicas, cfg.wait_timeout_ms)
                replies = pipe.execute()
                return int(replies[-1]) >= cfg.wait_replicas
            except AskError as exc:
                ask = self.rc.nodes_manager.get_node(host=exc.host, port=exc.port) or None
                if ask is None:
                    self.rc.nodes_manager.initialize()
            except MovedError as exc:
                ask = None
                self.rc.nodes_manager.move_slot(exc)
            except (ConnectionError, TimeoutError, ClusterDownError, TryAgainError,
                    ResponseError) as exc:
                # A primary that turns replica (a failover) ends the WAITs it holds with
                # UNBLOCKED, and refuses a WAIT that reaches it just after (the SET before
                # it done): the slot moved, as with MOVED; the write goes again to the new
                # primary (the same value: idempotent). Any other error reply is the load's.
                if isinstance(exc, ResponseError) and not _failed_over(str(exc)):
                    raise
                ask = None
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(1.0, 0.05 * 2**attempt) * (0.5 + random.random() / 2))
                # The next attempt reports the error if it persists.
                with contextlib.suppress(Exception):
                    self.rc.nodes_manager.initialize()
            attempt += 1
            if time.monotonic() >= deadline or attempt > 64:
                raise TimeoutError(f"write of {name} not done within {cfg.request_timeout}s")

    def _one(self, t: int, cls: str, step: int | None) -> None:
        if self.choosers:
            self._shaped(t, cls, step)
            return
        w, stats = self.writers[t], self.stats[t]
        began = time.perf_counter()
        try:
            if cls == "read":
                self.rc.get(self.key_name(w.read_key()))
            elif cls == "write":
                key = w.update_key()
                seq, value = w.next_value()
                if self.write(key, value):
                    w.acks.record(key, seq)
                else:
                    stats.unacknowledged += 1
            else:  # "other": a script (keyed, so routed and retried like any command)
                self.rc.eval(_OTHER_SCRIPT, 1, self.key_name(w.read_key()))
        except Exception as exc:
            stats.failure(cls, exc, step)
            return
        stats.success(cls, time.perf_counter() - began, step)

    # -- shaped operations (--shape; planner.loadgen.shapes)
    def _shaped(self, t: int, cls: str, step: int | None) -> None:
        """One operation of the shape: the op of class ``cls`` (an evict-burst burst
        overrides it), counted in the op's own class; each miss is then filled (a write)."""
        op = self.choosers[t].next(cls, self.rngs[t], time.monotonic() - self.began)
        stats = self.stats[t]
        began = time.perf_counter()
        try:
            missed = self._issue_shaped(t, op)
        except Exception as exc:
            stats.failure(op.cls, exc, step)
            return
        stats.success(op.cls, time.perf_counter() - began, step)
        for key in missed:
            began = time.perf_counter()
            try:
                if self.miss_penalty:  # the application fetches from its backing store
                    time.sleep(self.miss_penalty)
                self._fill(t, key)
            except Exception as exc:
                stats.failure("write", exc, step)
                continue
            stats.success("write", time.perf_counter() - began, step)

    def _issue_shaped(self, t: int, op: Op) -> list[int]:
        """Send ``op``; count its hits and misses; return the keys that missed."""
        rc, stats, name = self.rc, self.stats[t], self.key_name(op.key)
        if op.writes:
            self._fill(t, op.key, op)
            return []
        if op.kind == "eval":
            rc.eval(_OTHER_SCRIPT, 1, name)
            return []
        if op.kind == "scan":
            values = rc.mget_nonatomic([self.key_name(k) for k in op.keys])
            missed = [k for k, v in zip(op.keys, values, strict=True) if v is None]
        elif op.kind == "get":
            missed = [op.key] if rc.get(name) is None else []
        elif op.kind == "hgetall":
            missed = [] if rc.hgetall(name) else [op.key]
        else:  # hget, hmget
            fields = [field_name(f) for f in op.fields]
            values = [rc.hget(name, fields[0])] if op.kind == "hget" else rc.hmget(name, fields)
            absent = sum(v is None for v in values)
            stats.lookups(op.cls, len(values) - absent, absent)
            return [op.key] if absent else []
        n = len(op.keys) if op.kind == "scan" else 1
        stats.lookups(op.cls, n - len(missed), len(missed))
        return missed

    def _fill(self, t: int, key: int, op: Op | None = None) -> None:
        """Write ``key`` (SET or HSET + WAIT) and log the acknowledgement: a miss's fill
        (a whole hash, or a value), a write-through SET, an HSET of a few fields, a burst."""
        cfg, w = self.config, self.writers[t]
        seq = w.next_value()[0]
        size = BURST_VALUE_SIZE if op is not None and op.kind == "burst" else cfg.value_size
        value = make_value(w.tag, w.slot, seq, max(size, cfg.value_size))
        if self.hashes:
            fields = op.fields if op is not None else tuple(range(hash_fields(key)))
            mapping = {field_name(f): value for f in fields}
            mapping[MARKER_FIELD] = value
            ok = self.acked_write(self.key_name(key),
                                  lambda pipe, name: pipe.hset(name, mapping=mapping))
        else:
            ok = self.acked_write(self.key_name(key), lambda pipe, name: pipe.set(name, value))
        if ok:
            w.acks.record(key, seq)
        else:
            self.stats[t].unacknowledged += 1

    def _thread(self, t: int, plan: _Plan, errors: list[str]) -> None:
        try:
            for step, mix in plan.slots():
                self._one(t, mix.choose(self.rngs[t]), step)
        except BaseException:
            errors.append(traceback.format_exc())

    def preload(self) -> None:
        for t, w in enumerate(self.writers):
            for key in range(w.slot, self.config.keys, w.writers):
                if self.stop.is_set():
                    return
                if self.choosers:  # a shape's records: its fill of each key
                    try:
                        self._fill(t, key)
                    except Exception as exc:
                        self.stats[t].failures[f"preload:{type(exc).__name__}"] += 1
                    continue
                seq, value = w.next_value()
                try:
                    if self.write(key, value):
                        w.acks.record(key, seq)
                    else:
                        self.stats[t].unacknowledged += 1
                except Exception as exc:
                    self.stats[t].failures[f"preload:{type(exc).__name__}"] += 1

    def run(self, plan: _Plan) -> None:
        errors: list[str] = []
        self.began = plan.start  # evict-burst's bursts count from the start of the run
        threads = [threading.Thread(target=self._thread, args=(t, plan, errors), daemon=True,
                                    name=f"kairos-load-{t}") for t in range(self.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise RuntimeError(errors[0])

    def verify(self) -> dict[str, Any]:
        lost: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        checked = 0
        for w in self.writers:
            items = list(w.acks.items())
            for i in range(0, len(items), 500):
                chunk = items[i : i + 500]
                names = [self.key_name(k) for k, _ in chunk]
                try:
                    values = self._read_back(names)
                except Exception as exc:
                    errors[type(exc).__name__] += len(chunk)
                    continue
                checked += len(chunk)
                for (_key, seq), value in zip(chunk, values, strict=True):
                    kind = check_value(value, tag=w.tag, slot=w.slot, acked_seq=seq)
                    if kind != "ok":
                        lost[kind] += 1
        return {"lost": dict(lost), "verify_errors": dict(errors),
                "verified_keys": checked, "verified": not errors}

    def evictions(self) -> dict[str, Any]:
        """A shaped run's ``evicted_keys``: the keys the nodes evicted since :meth:`connect`
        (after the read-back, when there is one), verified or not; None when unknown."""
        if not self.choosers:
            return {}
        self.read_evictions()
        meter = self.meter
        return {"evicted_keys": meter.total if meter is not None and meter.readings >= 2
                else None}

    def _read_back(self, names: list[str]) -> list[Any]:
        """The values to check of ``names``: a hash's marker field (set by every HSET of it
        in the same command, so it carries the hash's latest acknowledged write), else GET."""
        if not self.hashes:
            return list(self.rc.mget_nonatomic(names))
        pipe = self.rc.pipeline()
        for name in names:
            pipe.hget(name, MARKER_FIELD)
        return list(pipe.execute())

    def progress(self) -> tuple[int, int]:
        ops = fails = 0
        for s in self.stats:
            o, f = s.snapshot()
            ops += o
            fails += f
        return ops, fails

    def payload(self) -> dict[str, Any]:
        merged = WorkerStats(self.config.classes, len(self.stats[0].step_ops))
        hists = {c: LatencyHistogram() for c in self.config.classes}
        for s in self.stats:
            for c, n in s.ops.items():
                merged.ops[c] += n
            merged.failures.update(s.failures)
            merge_failure_messages(merged.failure_messages, s.failure_messages)
            for c, h in s.hist.items():
                hists[c].merge(h)
            merged.step_ops = [a + b for a, b in zip(merged.step_ops, s.step_ops, strict=True)]
            merged.step_failures = [a + b for a, b in
                                    zip(merged.step_failures, s.step_failures, strict=True)]
            merged.unacknowledged += s.unacknowledged
            merged.hits.update(s.hits)
            merged.misses.update(s.misses)
        merged.hist = hists
        out = merged.payload()
        out["acknowledged"] = sum(w.acks.acknowledged for w in self.writers)
        return out

