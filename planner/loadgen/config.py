"""What one load run is: :class:`LoadConfig`, validated where it is made.

Where the load goes (hosts, port, consistency levels, keyspace or key prefix), what it
generates (mix, key distribution, record count, rate or trace; built from
:mod:`planner.loadgen.workload`) and its bounds (duration, request count). A config is
frozen and picklable: it crosses into the spawned worker processes as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.engines import get_engine
from planner.errors import ValidationError
from planner.loadgen.shapes import SHAPES
from planner.loadgen.workload import (
    DEFAULT_MIX,
    DISTRIBUTIONS,
    ENGINES,
    TraceSchedule,
    engine_classes,
    parse_mix,
)

CONSISTENCY_LEVELS: tuple[str, ...] = (
    "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE",
)
DEFAULT_HOSTS: dict[str, tuple[str, ...]] = {
    "cassandra": ("127.0.0.1", "127.0.0.2", "127.0.0.3"),
    "redis": ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"),
}
#: Hard upper bound on any run, whatever the caller asks.
MAX_RUN_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class LoadConfig:
    """Everything a load run needs; validated on creation (see ``docs/load-generator.md``).

    Parameters
    ----------
    engine : {"cassandra", "redis"}
    contact_points : sequence of str
        Cassandra hosts (``host`` or ``host:port``), or Redis Cluster nodes (``host:port``).
    cl : str
        Cassandra consistency level of every operation.
    verify_cl : str or None
        Consistency level of the read-back; None picks QUORUM for QUORUM-or-stronger writes
        (R + W > RF) and ALL for weaker ones.
    seconds : float
        Run length (always bounded; at most ``MAX_RUN_SECONDS``). With a trace, at most the
        trace's replay length.
    rate : float or None
        Target operations per second over all processes; None = unthrottled.
    max_requests : int or None
        Stop after this many requests (over all processes).
    keys : int
        Record count: keys ``0 .. keys-1`` exist conceptually from the start.
    max_keys : int
        Upper bound of the key space including inserts; inserts wrap around below it.
    concurrency : int
        Cassandra: requests in flight per process. Redis: client threads per process.
    processes : int
        Worker processes.
    trace : TraceSchedule or None
        Replay per-step rates and mixes instead of ``rate``/``mix``.
    shape : str or None
        Redis only: a named workload shape (:data:`planner.loadgen.shapes.SHAPES`) that
        gives the mix's classes their commands; its mix is the default mix. None = the
        plain GET / SET+WAIT / EVAL load.
    miss_penalty_ms : float
        Redis shapes only: what a cache-aside application pays its backing store on each
        miss before it fills the key (the client waits this long, counted in the fill's
        latency). 0 (the default): a miss costs only the fill.
    password : str or None
        Redis password; None reads ``KAIROS_REDIS_PASSWORD`` then ``REDISCLI_AUTH`` in the
        workers. Never shown in ``repr``.
    """

    engine: str
    contact_points: tuple[str, ...] = ()
    port: int | None = None
    cl: str = "QUORUM"
    verify_cl: str | None = None
    keyspace: str = "kairos_load"
    table: str = "usertable"
    replication_factor: int = 3
    replication_class: str = "SimpleStrategy"
    create_schema: bool = True
    local_dc: str | None = None
    prefix: str = "kairos_load"
    mix: Mapping[str, float] | None = None
    distribution: str = "zipfian"
    keys: int = 10_000
    max_keys: int = 1_000_000
    value_size: int = 100
    scan_length: int = 10
    rate: float | None = None
    seconds: float = 30.0
    max_requests: int | None = None
    concurrency: int = 64
    processes: int = 1
    trace: TraceSchedule | None = None
    request_timeout: float = 10.0
    verify: bool = True
    preload: bool = False
    wait_replicas: int = 1
    wait_timeout_ms: int = 1000
    seed: int | None = None
    shape: str | None = None
    miss_penalty_ms: float = 0.0
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValidationError(f"engine: unknown {self.engine!r}; known: {', '.join(ENGINES)}")
        points = tuple(self.contact_points) or DEFAULT_HOSTS[self.engine]
        object.__setattr__(self, "contact_points", points)
        for p in points:
            host, _port = split_host_port(p, self.port or get_engine(self.engine).default_port)
            if not host:
                raise ValidationError(f"contact_points: empty host in {p!r}")
        self._check_shape()
        default_mix = SHAPES[self.shape].mix if self.shape else DEFAULT_MIX[self.engine]
        mix = parse_mix(self.mix if self.mix is not None else default_mix, self.engine)
        object.__setattr__(self, "mix", mix)
        cl = self.cl.upper()
        if cl not in CONSISTENCY_LEVELS:
            raise ValidationError(
                f"cl: unknown {self.cl!r}; known: {', '.join(CONSISTENCY_LEVELS)}"
            )
        object.__setattr__(self, "cl", cl)
        vcl = (self.verify_cl or default_verify_cl(cl)).upper()
        if vcl not in CONSISTENCY_LEVELS:
            raise ValidationError(f"verify_cl: unknown {self.verify_cl!r}")
        object.__setattr__(self, "verify_cl", vcl)
        if self.distribution not in DISTRIBUTIONS:
            raise ValidationError(
                f"distribution: unknown {self.distribution!r}; known: {', '.join(DISTRIBUTIONS)}"
            )
        positive_ints = {
            "concurrency": self.concurrency, "processes": self.processes,
            "replication_factor": self.replication_factor, "value_size": self.value_size,
            "scan_length": self.scan_length,
        }
        for name, value in positive_ints.items():
            if int(value) != value or value < 1:
                raise ValidationError(f"{name}: must be a positive integer, got {value!r}")
        if self.value_size < 32:
            raise ValidationError(f"value_size: must be >= 32 (the value carries an id), got "
                                  f"{self.value_size}")
        writers = self.writers
        if self.keys < writers:
            raise ValidationError(f"keys: must be >= the number of writers ({writers}), got "
                                  f"{self.keys}")
        if self.max_keys < self.keys:
            raise ValidationError(f"max_keys: must be >= keys ({self.keys}), got {self.max_keys}")
        if not math.isfinite(self.seconds) or not 0 < self.seconds <= MAX_RUN_SECONDS:
            raise ValidationError(
                f"seconds: must be in (0, {MAX_RUN_SECONDS:g}], got {self.seconds!r}"
            )
        if self.rate is not None and (not math.isfinite(self.rate) or self.rate <= 0):
            raise ValidationError(f"rate: must be positive (or None for unthrottled), got "
                                  f"{self.rate!r}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValidationError(f"max_requests: must be >= 1, got {self.max_requests}")
        if not math.isfinite(self.request_timeout) or self.request_timeout <= 0:
            raise ValidationError(f"request_timeout: must be positive, got {self.request_timeout}")
        if not math.isfinite(self.miss_penalty_ms) or not 0 <= self.miss_penalty_ms <= 10_000:
            raise ValidationError(f"miss_penalty_ms: must be in [0, 10000], got "
                                  f"{self.miss_penalty_ms!r}")
        if self.miss_penalty_ms and self.shape is None:
            raise ValidationError("miss_penalty_ms: only a Redis shape fills a miss (--shape)")
        if self.wait_replicas < 0 or self.wait_timeout_ms < 0:
            raise ValidationError("wait_replicas, wait_timeout_ms: must be >= 0")
        if self.trace is not None:
            for i, m in enumerate(self.trace.mixes):
                if sum(m.values()) <= 0:
                    continue
                try:
                    parse_mix(m, self.engine)
                except ValidationError as exc:
                    raise ValidationError(f"trace: step {i}: {exc}") from None
            object.__setattr__(self, "seconds", min(self.seconds, self.trace.duration))

    def _check_shape(self) -> None:
        if self.shape is None:
            return
        if self.shape not in SHAPES:
            raise ValidationError(
                f"shape: unknown {self.shape!r}; known: {', '.join(SHAPES)}")
        spec = SHAPES[self.shape]
        if self.engine != spec.engine:
            raise ValidationError(f"shape: {self.shape!r} is a "
                                  f"{spec.engine.capitalize()} shape, not for "
                                  f"{self.engine}")
        need = self.keys + self.writers
        if SHAPES[self.shape].cold_range and self.max_keys < need:
            raise ValidationError(
                f"max_keys: shape {self.shape} uses the range [keys, max_keys) above the hot "
                f"keys, one key or more per writer: must be >= keys + writers ({need}), got "
                f"{self.max_keys}")

    @property
    def writers(self) -> int:
        """Independent writers: one per process (Cassandra) or per client thread (Redis)."""
        return self.processes * (self.concurrency if get_engine(self.engine).writer_per_thread
                                 else 1)

    @property
    def classes(self) -> tuple[str, ...]:
        return engine_classes(self.engine)


def default_verify_cl(cl: str) -> str:
    """QUORUM-family writes are read back at the same CL; weaker writes at ALL."""
    cl = cl.upper()
    if cl in ("QUORUM", "LOCAL_QUORUM", "EACH_QUORUM"):
        return cl
    if cl == "ALL":
        return "QUORUM"
    return "ALL"


def split_host_port(text: str, default_port: int) -> tuple[str, int]:
    """``"h:p"`` -> (h, p); ``"h"`` -> (h, default_port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        return text.strip(), default_port
    try:
        return host, int(port)
    except ValueError:
        raise ValidationError(f"contact_points: bad port in {text!r}") from None

