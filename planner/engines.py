"""The engines Kairos plans for, and what each is: the registry (issue 39 part 4).

One :class:`Engine` per engine holds what differs between Cassandra and Redis, so no other
module compares an engine to a literal name: it asks the registry a question about the engine
(``get_engine(engine).ring``: are restart batches found on a token ring?) or takes the
engine's own piece from it (``get_engine(engine).collector.get()``: the function that reads
its counters). Two kinds of fields:

facts
    Data: the workload classes, the default port, the rendered configuration file, and
    flags naming what the engine has (a token ring, tables, a JVM heap, a durability
    floor, ...). A module branches on the fact, which says why it branches.
pieces
    The engine's space, model prior, collector, load client, memory models, drift reader and
    the like, each a :class:`Ref`: the module attribute named by its import path, imported
    when used. Nearly every planner module imports this one, so it imports none of them
    but planner.errors (it stays at the bottom of the layers, docs/architecture.md).

The executor (the playbook and the role that supplies its gates) is named here too; the
playbooks choose it themselves (playbooks/tasks/rollout_prepare.yml), this records the pair.
A comparison of two engine values (a plan's against the one a command was given) is not a
branch on an engine and stays where it is; tests/unit/test_engines.py refuses a comparison
with a literal name anywhere else in planner/.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from planner.errors import ValidationError

__all__ = ["ENGINES", "REGISTRY", "Engine", "Ref", "get_engine"]


@dataclass(frozen=True)
class Ref:
    """A module attribute named by its import path, ``"package.module:attribute"``.

    :meth:`get` imports the module the first time (Python keeps it imported) and returns the
    attribute as it is now, so a test that replaces the attribute replaces it here too.
    """

    path: str

    def __post_init__(self) -> None:
        module, sep, attribute = self.path.partition(":")
        if not (module and sep and attribute):
            raise ValueError(f"Ref: expected 'package.module:attribute', got {self.path!r}")

    def get(self) -> Any:
        module, _, attribute = self.path.partition(":")
        loaded = sys.modules.get(module) or importlib.import_module(module)
        return getattr(loaded, attribute)


@dataclass(frozen=True)
class Engine:
    """Everything Kairos knows about one engine that the others do not share.

    Attributes
    ----------
    name : str
        As the CLI, the store, the plan files and the playbooks spell it.
    classes : tuple of str
        The workload's operation classes (planner.workload.series), in order.
    default_port : int
        The client port a host given without one is reached on (collect, load, drift).
    config_file : str
        The file a node's settings are rendered into (planner.model.spaces.render_settings).
    load_concurrency : int
        The load client's default concurrency (``kairos load --concurrency``).
    ring : bool
        Replicas placed on a token ring: restart batches are the ones safe at a consistency
        level on the live ring (planner.topology.ring). Otherwise one node at a time.
    consistency_level : bool
        Requests carry a consistency level (the load client reports the one it ran at).
    tables : bool
        Keyspaces and tables with options of their own (compaction, caching): a change of
        one rewrites the tables, and the collector can read per table.
    jvm : bool
        The node runs in a JVM: a heap (``heap_size``, the JVM's flags) holding the key
        cache, which the memory split must leave headroom on.
    replica_roles : bool
        Nodes are primaries or replicas and a failover swaps them: a node's counters across
        a role change are not one interval.
    shards_serve_alone : bool
        Each request is served by the one node that holds its key (Redis Cluster's slots):
        a saturated node loses its own excess only, and the others serve theirs
        (planner.planning.per_node.shard_capacity). Otherwise a request waits on several
        replicas, and the first node to saturate bounds the cluster (``min_capacity``).
    durability_floor : bool
        Persistence settings a plan is held above (planner.model.durability).
    writer_per_thread : bool
        Each of the load client's threads is an independent writer (Redis' cluster client);
        otherwise one writer per process keeps ``concurrency`` requests in flight.
    executor_playbook : str
        The playbook that applies a plan's step (playbooks/).
    role : str
        The Ansible role that supplies the executor's entry points and gates
        (``rollout_preflight``, ``rollout_live``, ``rollout_batch``, ``rollout_rescue``).
    space : Ref
        The configuration space (a planner.model.spaces.ConfigSpace).
    prior_effects : Ref
        ``() -> [(feature, effects, std)]``: the seeds' reported effects behind the prior
        performance model (planner.model.performance.prior_model).
    collector : Ref
        ``(hosts, *, per_table, keyspaces, timeout) -> CollectResult``: one collection round
        (planner.workload.collect).
    counters : Ref
        ``(ops, *, role, insert_fraction) -> {class: ops}``: a node's counter deltas as the
        workload classes (planner.workload.store).
    saturated : Ref
        ``(gauges) -> bool``: whether one round's gauges say the cluster was saturated
        (planner.autopilot.learning).
    render : Ref
        ``(space, config) -> {section: values}``: a canonical configuration as the files and
        live commands write it (planner.model.spaces.render_settings).
    load_worker : Ref
        The load client's worker class, ``(config, index, tag, stop)`` (planner.loadgen.clients).
    memory_models : Ref
        The memory split's models class (planner.model.memory_split).
    drift_reader : Ref
        ``(targets, keys, *, tables, timeout) -> (observed, errors)``: what each node runs
        (planner.executor.drift_read).
    same_setting : Ref
        ``(expected, observed) -> bool``: the read-back's comparison (planner.executor.drift).
    """

    name: str
    classes: tuple[str, ...]
    default_port: int
    config_file: str
    load_concurrency: int
    ring: bool
    consistency_level: bool
    tables: bool
    jvm: bool
    replica_roles: bool
    shards_serve_alone: bool
    durability_floor: bool
    writer_per_thread: bool
    executor_playbook: str
    role: str
    space: Ref
    prior_effects: Ref
    collector: Ref
    counters: Ref
    saturated: Ref
    render: Ref
    load_worker: Ref
    memory_models: Ref
    drift_reader: Ref
    same_setting: Ref


CASSANDRA = Engine(
    name="cassandra",
    classes=("read", "update", "insert", "scan"),
    default_port=9042,
    config_file="cassandra.yaml",
    load_concurrency=64,
    ring=True,
    consistency_level=True,
    tables=True,
    jvm=True,
    replica_roles=False,
    shards_serve_alone=False,
    durability_floor=False,
    writer_per_thread=False,
    executor_playbook="playbooks/apply_plan.yml",
    role="cassandra",
    space=Ref("planner.model.spaces:CASSANDRA_SPACE"),
    prior_effects=Ref("planner.model.performance:cassandra_prior_effects"),
    collector=Ref("planner.workload.collect:collect_cassandra"),
    counters=Ref("planner.workload.store:cassandra_classes"),
    saturated=Ref("planner.autopilot.learning:cassandra_saturated"),
    render=Ref("planner.model.spaces:render_cassandra"),
    load_worker=Ref("planner.loadgen.clients:_CassandraWorker"),
    memory_models=Ref("planner.model.memory_split:CassandraMemoryModels"),
    drift_reader=Ref("planner.executor.drift_read:read_cassandra"),
    same_setting=Ref("planner.executor.drift:same_cassandra"),
)

REDIS = Engine(
    name="redis",
    classes=("read", "write", "other"),
    default_port=6379,
    config_file="redis.conf",
    load_concurrency=8,
    ring=False,
    consistency_level=False,
    tables=False,
    jvm=False,
    replica_roles=True,
    shards_serve_alone=True,
    durability_floor=True,
    writer_per_thread=True,
    executor_playbook="playbooks/apply_plan_redis.yml",
    role="redis",
    space=Ref("planner.model.spaces:REDIS_SPACE"),
    prior_effects=Ref("planner.model.performance:redis_prior_effects"),
    collector=Ref("planner.workload.collect:collect_redis"),
    counters=Ref("planner.workload.store:redis_classes"),
    saturated=Ref("planner.autopilot.learning:redis_saturated"),
    render=Ref("planner.model.spaces:render_redis"),
    load_worker=Ref("planner.loadgen.clients:_RedisWorker"),
    memory_models=Ref("planner.model.memory_split:RedisMemoryModels"),
    drift_reader=Ref("planner.executor.drift_read:read_redis"),
    same_setting=Ref("planner.executor.drift:same_redis"),
)

#: Every engine by name, in the order the CLI lists them.
REGISTRY: MappingProxyType[str, Engine] = MappingProxyType(
    {e.name: e for e in (CASSANDRA, REDIS)}
)

#: Every engine's name, in the order the CLI lists them.
ENGINES: tuple[str, ...] = tuple(REGISTRY)


def get_engine(name: str) -> Engine:
    """The registry's :class:`Engine` called ``name``.

    Raises
    ------
    ValidationError
        No engine has that name (naming it and the known ones).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValidationError(
            f"engine: unknown engine {name!r}; known: {', '.join(ENGINES)}"
        ) from None
