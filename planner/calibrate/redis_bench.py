"""A Redis Cluster as a calibration bench: the workload shapes are the mixes.

A Redis configuration's effect depends on what the load does, not only on its class
fractions: LFU against LRU matters under scans, the listpack thresholds under big hashes
(docs/load-generator.md, "Do the shapes move the optimum?"). So a Redis calibration
measures named shapes (:data:`planner.loadgen.shapes.SHAPES`), each with its own keys and
value size: ``--shape cache-scan:keys=120000``. The shapes share the nodes' memory, so
:class:`RedisShapeBench` warms each shape up before measuring it unless the run just
before was that shape's: the cache then holds that shape's keys, not the last one's.
:func:`read_running_redis` reads the directives every node runs with ``CONFIG GET``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planner import loadgen
from planner.calibrate.bench import ExecutorBench, agreed_values
from planner.calibrate.space import Config
from planner.errors import KairosError, ValidationError
from planner.loadgen.shapes import SHAPES
from planner.model.spaces import from_settings_view

#: The engine whose loads take shapes (planner.loadgen.shapes.ShapeSpec.engine).
ENGINE = "redis"
#: The shapes a Redis calibration measures when none are given: scans against a hot set
#: (the eviction policy) and read-heavy big hashes (the listpack thresholds).
DEFAULT_SHAPES = ("cache-scan", "hash-read")
#: A warm-up window whose read hit ratio moved by more than this from the window before is
#: a cache not settled yet (one point: the run-to-run spread of a full cache's hit ratio on
#: the lab is a few tenths of a point).
HIT_RATIO_STEP = 0.01
#: What a ``--shape`` may set besides its name (LoadConfig fields); the Redis classes
#: (read, write, other) set its mix instead of the shape's own.
SHAPE_OPTIONS = {"keys": "keys", "value-size": "value_size"}


def parse_shapes(specs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["cache-scan:keys=120000", "hash-read:read=0.9,write=0.1"]`` -> ``{shape:
    {LoadConfig field: value}}``, a mix given as class fractions under ``"mix"``
    (normalised; classes left out are 0).

    Raises ValidationError naming the spec, the shape or the option."""
    from planner.loadgen.workload import engine_classes, parse_mix

    classes = engine_classes(ENGINE)
    out: dict[str, dict[str, Any]] = {}
    for spec in specs or DEFAULT_SHAPES:
        name, _, text = spec.partition(":")
        name = name.strip()
        if name not in SHAPES or SHAPES[name].engine != ENGINE:
            known = ", ".join(s for s in SHAPES if SHAPES[s].engine == ENGINE)
            raise ValidationError(f"--shape: {spec!r}: unknown shape {name!r}; known: {known}")
        if name in out:
            raise ValidationError(f"--shape: {name} given twice")
        options: dict[str, Any] = {}
        fractions: dict[str, str] = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            key, sep, value = (t.strip() for t in item.partition("="))
            if sep and key in classes:
                fractions[key] = value
                continue
            if not sep or key not in SHAPE_OPTIONS:
                raise ValidationError(
                    f"--shape: {spec!r}: {item!r} is not one of "
                    f"{', '.join(k + '=N' for k in SHAPE_OPTIONS)} or a class fraction "
                    f"({', '.join(c + '=F' for c in classes)})")
            try:
                number = int(value)
            except ValueError:
                raise ValidationError(f"--shape: {spec!r}: {key}={value!r} is not an "
                                      "integer") from None
            if number < 1:
                raise ValidationError(f"--shape: {spec!r}: {key} must be >= 1")
            options[SHAPE_OPTIONS[key]] = number
        if fractions:
            try:
                options["mix"] = parse_mix(",".join(f"{c}={f}" for c, f in fractions.items()),
                                           ENGINE)
            except ValidationError as exc:
                raise ValidationError(f"--shape: {spec!r}: {exc}") from None
        out[name] = options
    return out


def data_prefix(prefix: str, hashes: bool, keys: int, value_size: int) -> str:
    """The key prefix of a shape's data: shapes over the same data (hashes or strings, as
    many keys of the same size, e.g. hash-read and hash-write) share it, and their keys
    stay in the cache from one to the other; any other shape's data has its own."""
    return f"{prefix}:{'hashes' if hashes else 'strings'}-{keys}x{value_size}"


def shape_loads(shapes: Mapping[str, Mapping[str, Any]], base: loadgen.LoadConfig
                ) -> dict[str, loadgen.LoadConfig]:
    """One load per shape: ``base`` with the shape, its mix, and its keys and value size
    (the shape's defaults unless given); the cold range of a scan or burst shape above;
    its keys under the prefix of its data (:func:`data_prefix`), which the bench clears
    before another data set's shape."""
    loads: dict[str, loadgen.LoadConfig] = {}
    for name, options in shapes.items():
        spec = SHAPES[name]
        keys = options.get("keys", spec.keys)
        value_size = options.get("value_size", spec.value_size)
        loads[name] = replace(
            base, shape=name, mix=dict(options.get("mix") or spec.mix), keys=keys,
            prefix=data_prefix(base.prefix, spec.hashes, keys, value_size),
            value_size=value_size,
            max_keys=max(base.max_keys, 10 * keys if spec.cold_range else keys))
    return loads


class RedisShapeBench(ExecutorBench):
    """:class:`ExecutorBench` whose mixes are Redis shapes (``loads``: shape -> its load).

    The executor playbook is playbooks/change_settings_redis.yml. A shape is warmed up
    (the usual windows, until the throughput stops rising and the read hit ratio stops
    moving: :meth:`still_rising`) before it is measured whenever
    the load run before was another shape's, once the other shapes' keys are unlinked
    (``unlink``: :func:`planner.loadgen.unlink_load_keys`).
    """

    def __init__(self, *, loads: Mapping[str, loadgen.LoadConfig],
                 unlink: Callable[[loadgen.LoadConfig], int] = loadgen.unlink_load_keys,
                 **kwargs: Any) -> None:
        super().__init__(load=next(iter(loads.values())), **kwargs)
        self.loads = dict(loads)
        self.unlink = unlink
        self._last_shape: str | None = None

    def load_for(self, mix: Mapping[str, float], name: str) -> loadgen.LoadConfig:
        if name not in self.loads:
            raise KairosError(f"no load for the mix {name!r}: the Redis mixes are the shapes "
                              f"{', '.join(self.loads)}")
        return replace(self.loads[name], mix=dict(mix))

    def apply(self, changes: Mapping[str, Any], *, restart_all: bool = False,
              tables: Sequence[str] = ()) -> None:
        super().apply(changes, restart_all=restart_all, tables=tables)
        self._last_shape = None  # a change may have emptied or re-encoded the cache

    def _clear_others(self, name: str) -> None:
        """UNLINK the keys the other shapes' loads wrote over other data (shapes over the
        same data share their keys): each shape is measured on a cache of its own data.
        Left there, they would hold memory as long as the policy keeps them (an LFU keeps a
        hash read thousands of times for minutes after its last read), and the shape
        measured next would run in less memory under one policy than under another."""
        prefix = self.loads[name].prefix
        cleared: set[str] = set()
        for other, load in self.loads.items():
            if load.prefix != prefix and load.prefix not in cleared:
                cleared.add(load.prefix)
                removed = self.unlink(load)
                if removed:
                    self.log(f"calibrate: removed the {removed:,} key(s) of {other} before "
                             f"{name}")

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool = False,
                name: str = "") -> None:
        if self._last_shape != name:
            self._clear_others(name)
        super().warm_up(mix, preload=preload, restarted=restarted, name=name)
        self._last_shape = name

    def measure(self, mix: Mapping[str, float], name: str = "") -> dict[str, Any]:
        if self._last_shape != name:
            self.log(f"calibrate: {name} follows {self._last_shape or 'a change'}: warming "
                     "it up first")
            self.warm_up(mix, preload=False, name=name)
        measurement = super().measure(mix, name)
        self._last_shape = name
        hit = measurement.get("hit_ratio")
        if hit is not None:
            self.log(f"calibrate: {name}: read hit ratio {hit:.1%}, "
                     f"{measurement.get('evicted_keys')} key(s) evicted")
        return measurement

    def still_rising(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
        """A cache not settled yet: faster, or its read hit ratio moved by more than
        :data:`HIT_RATIO_STEP` either way. Up: a cache still filling (its throughput can
        look flat while it is half empty). Down: the data still growing into a change
        (e.g. listpacks converted to hashtables by their next write after a lower
        hash-max-listpack-entries), measured on the lab: 77.0 % then 62.8 % then 57 %."""
        hit_before, hit_after = before.get("hit_ratio"), after.get("hit_ratio")
        moving = (hit_before is not None and hit_after is not None
                  and abs(hit_after - hit_before) > HIT_RATIO_STEP)
        return moving or super().still_rising(before, after)

    def describe_window(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
        text = super().describe_window(before, after)
        if before.get("hit_ratio") is not None and after.get("hit_ratio") is not None:
            text += f", read hits {before['hit_ratio']:.1%} -> {after['hit_ratio']:.1%}"
        return text

    def expected_seconds(self, changes: Mapping[str, Any], n_mixes: int) -> float:
        # every shape after the first is warmed up again (the shapes share the memory)
        extra = max(n_mixes - 1, 0) * (self.warmup_seconds + 10)
        return super().expected_seconds(changes, n_mixes) + extra


def read_running_redis(params: Sequence[str], *, hosts: Sequence[str], port: int = 6379,
                       timeout: float = 10.0) -> tuple[Config, str]:
    """The running values of ``params`` on every Redis node (``CONFIG GET`` with Kairos'
    login and TLS from the environment), and the server version. ``hosts`` are
    ``[name=]address[:port]``; ``port`` is the default port (the load's, as ``--port``).

    Raises
    ------
    KairosError
        A node cannot be read.
    ValidationError
        The nodes run different values, or a value is outside the space.
    """
    from planner.executor.drift_read import read_nodes
    from planner.workload import collect

    targets = collect.parse_targets(list(hosts), default_port=port)
    observed, errors, names = read_nodes(
        ENGINE, [f"{t.name}={t.address}:{t.port}" for t in targets], list(params),
        timeout=timeout)
    if errors:
        node, error = next(iter(errors.items()))
        raise KairosError(f"{node}: cannot read the running configuration with CONFIG GET "
                          f"({error})")
    per_node: dict[str, Config] = {}
    for node in names:
        running = observed[node]["running"]
        values: Config = {}
        for p in params:
            if running.get(p) is None:
                raise KairosError(f"{node}: CONFIG GET {p} returned nothing (unknown to this "
                                  "server, or Kairos' ACL user may not read it)")
            try:
                values[p] = from_settings_view(ENGINE, p, str(running[p]))
            except ValidationError as exc:
                raise ValidationError(f"{node}: runs {exc}") from None
        per_node[node] = values
    return agreed_values(per_node, params), _redis_version(targets[0], timeout)


def _redis_version(target: Any, timeout: float) -> str:
    """``redis_version`` of INFO server on one node ("" if it cannot be read)."""
    from planner.workload import collect

    user, password = collect.redis_login()
    try:
        text, _ = collect.read_redis_info(target, password=password, username=user,
                                          timeout=timeout)
    except Exception:  # the version is provenance only; the config read above succeeded
        return ""
    return str(collect.parse_info(text).get("redis_version", ""))
