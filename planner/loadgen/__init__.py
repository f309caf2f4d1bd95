"""A load generator for live Cassandra and Redis clusters that checks acknowledged writes.

It proves availability during rolling restarts (every operation counted, every failure
counted by exception type, every write the cluster acknowledged read back after the run)
and drives calibration runs (fixed rate, unthrottled, or a workload trace replayed with
time compression). The command line is ``kairos load`` (:mod:`planner.commands.load`).

This module is the load generator's public face: import from here. The code lives in
rooms along its seams, each importing only those above it in this list:

- :mod:`planner.loadgen.workload`: what load to generate: key distributions, operation
  mix, trace schedule, pacing (pure).
- :mod:`planner.loadgen.shapes`: the named Redis workload shapes (``--shape``): which
  command and key each operation is (pure).
- :mod:`planner.loadgen.config`: :class:`LoadConfig`, one run, validated where it is made.
- :mod:`planner.loadgen.check`: acknowledged writes and their read-back check, failure and
  latency counting, :class:`LoadResult` and :func:`aggregate` (pure).
- :mod:`planner.loadgen.clients`: the Cassandra and Redis workers that issue the load and
  read it back, inside worker processes.
- :mod:`planner.loadgen.run`: the worker processes and the parent that runs them:
  :class:`BackgroundLoad` and :func:`run_load`.
"""

from __future__ import annotations

from planner.loadgen.check import (
    HIST_BUCKETS,
    AckLog,
    LatencyHistogram,
    LoadResult,
    WorkerStats,
    aggregate,
    check_value,
    make_value,
    owned_key,
)
from planner.loadgen.clients import (
    CASSANDRA_PASSWORD_ENV,
    CASSANDRA_USER_ENV,
    LOAD_CASSANDRA_PASSWORD_ENV,
    LOAD_CASSANDRA_USER_ENV,
    REDIS_PASSWORD_ENV,
    cassandra_login,
    redis_password,
    unlink_load_keys,
)

# Internal classes, importable here for the tests that drive them directly.
from planner.loadgen.clients import _CassandraWorker as _CassandraWorker
from planner.loadgen.clients import _Plan as _Plan
from planner.loadgen.clients import _RedisWorker as _RedisWorker
from planner.loadgen.clients import _Writer as _Writer
from planner.loadgen.config import (
    CONSISTENCY_LEVELS,
    DEFAULT_HOSTS,
    MAX_RUN_SECONDS,
    LoadConfig,
    default_verify_cl,
    split_host_port,
)
from planner.loadgen.run import BackgroundLoad, LoadError, run_load
from planner.loadgen.shapes import SHAPES, Op, ShapeChooser, ShapeSpec, hash_fields
from planner.loadgen.workload import (
    CLASSES,
    DEFAULT_MIX,
    DISTRIBUTIONS,
    ENGINES,
    ZIPFIAN_THETA,
    KeyChooser,
    OpMix,
    Pacer,
    TraceSchedule,
    ZipfianGenerator,
    fnv1a64,
    parse_mix,
)

__all__ = [
    "CASSANDRA_PASSWORD_ENV",
    "CASSANDRA_USER_ENV",
    "CLASSES",
    "CONSISTENCY_LEVELS",
    "DEFAULT_HOSTS",
    "DEFAULT_MIX",
    "DISTRIBUTIONS",
    "ENGINES",
    "HIST_BUCKETS",
    "LOAD_CASSANDRA_PASSWORD_ENV",
    "LOAD_CASSANDRA_USER_ENV",
    "MAX_RUN_SECONDS",
    "REDIS_PASSWORD_ENV",
    "SHAPES",
    "ZIPFIAN_THETA",
    "AckLog",
    "BackgroundLoad",
    "KeyChooser",
    "LatencyHistogram",
    "LoadConfig",
    "LoadError",
    "LoadResult",
    "Op",
    "OpMix",
    "Pacer",
    "ShapeChooser",
    "ShapeSpec",
    "TraceSchedule",
    "WorkerStats",
    "ZipfianGenerator",
    "aggregate",
    "cassandra_login",
    "check_value",
    "default_verify_cl",
    "fnv1a64",
    "hash_fields",
    "make_value",
    "owned_key",
    "parse_mix",
    "redis_password",
    "run_load",
    "split_host_port",
    "unlink_load_keys",
]
