"""Configuration spaces of Cassandra 5.0 and Redis 7.0 as data.

A :class:`ConfigSpace` lists the tunable :class:`Parameter` objects of one engine: the exact
name the engine reads (a ``cassandra.yaml`` key, a ``redis.conf`` directive, ``heap_size`` for
the JVM heap, ``compaction`` for the table compaction strategy and ``memtable_implementation``
for the default memtable, written as cassandra.yaml's nested ``memtable`` key), its type,
range or choices, default, and how a change takes effect (``live`` through a named command, or
``restart``).

A *configuration* is a plain mapping ``{parameter name: value}``; it may be partial (missing
parameters keep their defaults). Values may be given loosely (``64`` or ``"64MiB"`` for a size,
``"yes"`` or ``True`` for a Redis boolean); :meth:`ConfigSpace.normalize` returns the canonical
form (sizes as strings in the engine's own unit format, booleans as ``bool``), which is what
:meth:`ConfigSpace.candidates` and :meth:`ConfigSpace.defaults` return and what plans should
store. :func:`render_settings` maps a configuration to the values the Ansible templates write;
:func:`settings_row` and :func:`from_settings_view` read a running Cassandra value back from
``system_views.settings``.

See docs/config-spaces.md for the sources of every name, default and command.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml

from planner._module_utils import kairos_javamap
from planner.engines import get_engine
from planner.errors import ValidationError
from planner.inputs import CONFIG, in_file, load_yaml, mapping

ParamType = Literal["int", "float", "bool", "enum", "size"]
Change = Literal["live", "restart"]
Location = Literal["cassandra.yaml", "jvm", "table", "redis.conf"]

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")
# Multipliers to MiB for the suffixes each engine accepts (case-insensitive).
_TO_MIB: dict[str, float] = {
    "": 1.0,  # a bare number is read in the parameter's own unit; handled separately
    "b": 1.0 / (1024 * 1024),
    "k": 1.0 / 1024,
    "kb": 1.0 / 1024,
    "kib": 1.0 / 1024,
    "m": 1.0,
    "mb": 1.0,
    "mib": 1.0,
    "g": 1024.0,
    "gb": 1024.0,
    "gib": 1024.0,
}
_REDIS_DECIMAL: dict[str, float] = {"": 1.0, "b": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


@dataclass(frozen=True)
class Parameter:
    """One tunable parameter of an engine.

    Parameters
    ----------
    name : str
        The exact name the engine reads: a ``cassandra.yaml`` key (5.0 spelling), a
        ``redis.conf`` directive, ``heap_size`` (JVM) or ``compaction`` (table option);
        ``memtable_implementation`` is written as the nested cassandra.yaml key ``memtable``
        (:func:`memtable_yaml`).
    type : {"int", "float", "bool", "enum", "size"}
        Value type. ``size`` values are held in MiB internally and written in ``unit`` format.
    default : Any
        The engine's default (canonical form).
    change : {"live", "restart"}
        ``live`` when a running node can take the new value through ``live_command``;
        ``restart`` when the node must be restarted (the file is always rewritten too, so
        a live change survives the next restart).
    location : {"cassandra.yaml", "jvm", "table", "redis.conf"}
        Where the value is written.
    description : str
        What it does, in one or two sentences.
    choices : tuple, optional
        Allowed values of an ``enum``.
    minimum, maximum : float, optional
        Inclusive bounds of a numeric or size parameter (sizes in MiB).
    unit : str, optional
        Unit format of a size: ``"MiB"`` (cassandra.yaml, e.g. ``"64MiB"``), ``"M"`` (JVM,
        e.g. ``"512M"``/``"1G"``) or ``"mb"`` (redis.conf, e.g. ``"256mb"``).
    live_command : str, optional
        The command that applies a live change (``None`` for restart parameters).
    candidate_values : tuple, optional
        Values the optimiser's default grid tries; ``None`` keeps the parameter at its base.
    note : str, optional
        Caveats (e.g. when a live change is not possible).
    reencode : bool
        True when a change reaches only data written after it: what a node holds keeps the
        encoding it was written under until it is rewritten or the node reloads it (a
        restart). Redis' compact-encoding thresholds; measured in docs/redis-executor.md,
        "A reload re-encodes".
    """

    name: str
    type: ParamType
    default: Any
    change: Change
    location: Location
    description: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    unit: str | None = None
    live_command: str | None = None
    candidate_values: tuple[Any, ...] | None = None
    note: str | None = None
    reencode: bool = False

    def __post_init__(self) -> None:
        if self.type == "enum" and not self.choices:
            raise ValueError(f"{self.name}: an enum needs choices")
        if self.change == "live" and not self.live_command:
            raise ValueError(f"{self.name}: a live parameter needs its live_command")
        if self.type == "size" and self.unit not in ("MiB", "MiB/s", "M", "mb"):
            raise ValueError(f"{self.name}: unknown size unit {self.unit!r}")

    # ------------------------------------------------------------------ values
    def coerce(self, value: Any) -> Any:
        """Return ``value`` in canonical form, or raise ValidationError naming the reason."""
        if self.type == "bool":
            return self._coerce_bool(value)
        if self.type == "enum":
            if isinstance(value, bool) and ("yes" if value else "no") in (self.choices or ()):
                # YAML 1.1 reads a bare no/yes as a boolean (--set appendfsync=no): the choice
                value = "yes" if value else "no"
            if value not in self.choices:  # type: ignore[operator]
                allowed = ", ".join(map(str, self.choices or ()))
                raise ValidationError(f"{self.name}: {value!r} is not one of {allowed}")
            return value
        if self.type == "int":
            if isinstance(value, bool) or not _is_integral(value):
                raise ValidationError(f"{self.name}: {value!r} is not an integer")
            number: float = int(value)
        elif self.type == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValidationError(f"{self.name}: {value!r} is not a number")
            number = float(value)
            if not math.isfinite(number):
                raise ValidationError(f"{self.name}: {value!r} is not finite")
        else:  # size
            number = self.size_mib(value)
        if self.minimum is not None and number < self.minimum:
            raise ValidationError(
                f"{self.name}: {value!r} is below the minimum {self._fmt_bound(self.minimum)}"
            )
        if self.maximum is not None and number > self.maximum:
            raise ValidationError(
                f"{self.name}: {value!r} is above the maximum {self._fmt_bound(self.maximum)}"
            )
        if self.type == "size":
            return self.format_size(number)
        return number

    def numeric(self, value: Any) -> float:
        """Numeric view of a (valid) value: MiB for sizes, 0/1 for booleans."""
        canonical = self.coerce(value)
        if self.type == "size":
            return self.size_mib(canonical)
        if self.type == "bool":
            return 1.0 if canonical else 0.0
        if self.type == "enum":
            raise ValidationError(f"{self.name}: an enum has no numeric value")
        return float(canonical)

    def size_mib(self, value: Any) -> float:
        """Parse a size (``"64MiB"``, ``"1G"``, ``"256mb"`` or a bare number in ``unit``)."""
        if isinstance(value, bool):
            raise ValidationError(f"{self.name}: {value!r} is not a size")
        if isinstance(value, int | float):
            if not math.isfinite(float(value)) or float(value) != int(value):
                raise ValidationError(f"{self.name}: {value!r} is not a whole size")
            bare = float(value)
            return bare / (1024 * 1024) if self.unit == "mb" else bare
        if not isinstance(value, str):
            raise ValidationError(f"{self.name}: {value!r} is not a size")
        if self.unit == "MiB/s" and value.rstrip().endswith("/s"):
            value = value.rstrip()[:-2]  # a rate: '64MiB/s' is 64 MiB each second
        match = _SIZE_RE.match(value)
        if not match:
            raise ValidationError(f"{self.name}: {value!r} is not a size like {self.example()}")
        amount, suffix = int(match.group(1)), match.group(2).lower()
        if suffix not in _TO_MIB:
            raise ValidationError(
                f"{self.name}: unknown size unit {match.group(2)!r} in {value!r} "
                f"(write it like {self.example()})"
            )
        if self.unit == "mb" and suffix in _REDIS_DECIMAL:
            # redis.conf: a bare number is bytes; k/m/g are powers of 1000, kb/mb/gb of 1024
            return amount * _REDIS_DECIMAL[suffix] / (1024 * 1024)
        return amount * _TO_MIB[suffix]

    def format_size(self, mib: float) -> str:
        """Write a size in this parameter's unit format."""
        if self.unit in ("MiB", "MiB/s"):
            if mib != int(mib):
                raise ValidationError(f"{self.name}: {mib} MiB is not a whole number of MiB")
            return f"{int(mib)}{self.unit}"
        if self.unit == "M":
            if mib != int(mib):
                raise ValidationError(f"{self.name}: {mib} MiB is not a whole number of MiB")
            whole = int(mib)
            return f"{whole // 1024}G" if whole and whole % 1024 == 0 else f"{whole}M"
        if mib == 0:
            return "0"
        if mib != int(mib):
            return f"{round(mib * 1024 * 1024)}"
        return f"{int(mib)}mb"

    def example(self) -> str:
        return {"MiB": "'64MiB'", "MiB/s": "'64MiB/s'", "M": "'512M' or '1G'",
                "mb": "'256mb'"}.get(self.unit or "", "")

    def _coerce_bool(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("yes", "true"):
            return True
        if isinstance(value, str) and value.lower() in ("no", "false"):
            return False
        raise ValidationError(f"{self.name}: {value!r} is not a boolean (true/false, yes/no)")

    def _fmt_bound(self, bound: float) -> str:
        if self.type == "size":
            return self.format_size(bound)
        return f"{bound:g}"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data view (for ``kairos`` reports and docs)."""
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "choices": list(self.choices) if self.choices else None,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "unit": self.unit,
            "change": self.change,
            "live_command": self.live_command,
            "location": self.location,
            "description": self.description,
            "note": self.note,
        }


def _is_integral(value: Any) -> bool:
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value) and value == int(value)


@dataclass(frozen=True)
class ConfigSpace:
    """The tunable parameters of one engine.

    Parameters
    ----------
    engine : str
        ``"cassandra"`` or ``"redis"``.
    parameters : Mapping[str, Parameter]
        Parameters by name (read-only view).
    grid_keys : tuple of str
        Parameters :meth:`candidates` varies by default (each over its ``candidate_values``).
    """

    engine: str
    parameters: Mapping[str, Parameter]
    grid_keys: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        for name, param in self.parameters.items():
            if name != param.name:
                raise ValueError(f"parameter registered as {name!r} is named {param.name!r}")
        for key in self.grid_keys:
            if key not in self.parameters or not self.parameters[key].candidate_values:
                raise ValueError(f"grid key {key!r} has no candidate values")

    def __contains__(self, key: object) -> bool:
        return key in self.parameters

    def __getitem__(self, key: str) -> Parameter:
        return self._param(key)

    def _param(self, key: str) -> Parameter:
        try:
            return self.parameters[key]
        except KeyError:
            close = [k for k in self.parameters if _similar(k, key)]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValidationError(
                f"{key}: unknown {self.engine} parameter{hint}; known: "
                f"{', '.join(sorted(self.parameters))}"
            ) from None

    def validate(self, config: Mapping[str, Any]) -> None:
        """Raise ValidationError naming the key and the reason if ``config`` is not valid.

        ``config`` may be partial; every key must be a parameter of this space and every value
        valid for it. Cross-parameter rules are checked as well (see :meth:`normalize`).
        """
        self.normalize(config)

    def normalize(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return ``config`` with canonical values (keys unchanged, no defaults added)."""
        if not isinstance(config, Mapping):
            raise ValidationError(
                f"a {self.engine} configuration must be a mapping, not {config!r}"
            )
        out: dict[str, Any] = {}
        for key, value in config.items():
            if not isinstance(key, str):
                raise ValidationError(f"{key!r}: parameter names are strings")
            out[key] = self._param(key).coerce(value)
        return out

    def complete(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``config`` (normalised): a full configuration."""
        full = self.defaults()
        full.update(self.normalize(config))
        return full

    def defaults(self) -> dict[str, Any]:
        """The default configuration (every parameter, canonical values)."""
        return {name: param.default for name, param in self.parameters.items()}

    def restart_params(self, keys: Iterable[str]) -> list[str]:
        """The subset of ``keys`` whose change needs a restart (in the given order)."""
        return [k for k in keys if self._param(k).change == "restart"]

    def live_params(self, keys: Iterable[str]) -> list[str]:
        """The subset of ``keys`` that can change on a running node (in the given order)."""
        return [k for k in keys if self._param(k).change == "live"]

    def reencode_params(self, keys: Iterable[str]) -> list[str]:
        """The subset of ``keys`` that re-encode the data only at a reload (in the given
        order; ``Parameter.reencode``, which :func:`change_kind` makes restart-class)."""
        return [k for k in keys if self._param(k).reencode]

    def changed_keys(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
        """Keys whose value differs between two configurations (missing = default)."""
        a, b = self.complete(old), self.complete(new)
        return [k for k in self.parameters if a[k] != b[k]]

    def candidates(
        self,
        *,
        keys: Sequence[str] | None = None,
        base: Mapping[str, Any] | None = None,
        max_configs: int = 32,
        values: Mapping[str, Sequence[Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """A finite list of full candidate configurations for the optimiser.

        The full factorial grid over ``keys`` (default :attr:`grid_keys`), each over its
        ``candidate_values`` (or ``values[key]``), with every other parameter taken from
        ``base`` (default: the space's defaults). ``base`` itself is always the first
        candidate.

        Raises
        ------
        ValidationError
            If a key is unknown or has no candidate values, or the grid exceeds ``max_configs``.
        """
        keys = tuple(self.grid_keys if keys is None else keys)
        start = self.complete(base or {})
        axes = []
        for key in keys:
            axis = (values or {}).get(key) or self._param(key).candidate_values
            if not axis:
                raise ValidationError(f"{key}: has no candidate values to vary")
            axes.append(tuple(axis))
        size = math.prod(len(a) for a in axes)
        if size > max_configs:
            raise ValidationError(
                f"candidate grid over {', '.join(keys)} has {size} configurations, more than "
                f"max_configs={max_configs}; vary fewer keys or raise max_configs"
            )
        out = [start]
        for combo in itertools.product(*axes):
            config = dict(start)
            config.update(dict(zip(keys, combo, strict=True)))
            if config not in out:
                out.append(config)
        return out

    def describe(self) -> list[dict[str, Any]]:
        """Plain-data view of every parameter."""
        return [p.to_dict() for p in self.parameters.values()]


def _similar(a: str, b: str) -> bool:
    a2, b2 = a.replace("-", "_").lower(), b.replace("-", "_").lower()
    return a2 == b2 or a2 in b2 or b2 in a2


# ---------------------------------------------------------------- Cassandra 5.0
COMPACTION_STRATEGIES: tuple[str, ...] = (
    "SizeTieredCompactionStrategy",
    "LeveledCompactionStrategy",
    "UnifiedCompactionStrategy",
)
#: The memtable configurations cassandra.yaml defines (as Cassandra 5.0's own file does) and
#: their classes; ``memtable_implementation`` chooses which one ``default`` inherits.
MEMTABLE_CLASSES: dict[str, str] = {"skiplist": "SkipListMemtable", "trie": "TrieMemtable"}
#: The ``system_views.settings`` row that shows cassandra.yaml's ``memtable``: 5.0 flattens
#: nested options into dotted rows, and ``memtable`` has the one field ``configurations``.
MEMTABLE_SETTINGS_ROW = "memtable.configurations"


# Rows: name, type, default, the values the optimiser's grid tries, description; then
# bounds, choices, unit and notes where the parameter has them.
def _yaml(
    name: str, type: ParamType, default: Any, values: tuple[Any, ...], description: str,
    **more: Any,
) -> Parameter:
    """A cassandra.yaml key that takes effect on restart."""
    return Parameter(name, type, default, "restart", "cassandra.yaml", description,
                     candidate_values=values, **more)  # fmt: skip


def _stage_threads(name: str, stage: str, description: str) -> Parameter:
    """Threads of a Cassandra stage: live through ``nodetool setconcurrency <stage>``."""
    return Parameter(name, "int", 32, "live", "cassandra.yaml", description, minimum=2,
                     maximum=1024, live_command=f"nodetool setconcurrency {stage} <n>",
                     candidate_values=(32, 64))  # fmt: skip


_CASSANDRA_PARAMS: tuple[Parameter, ...] = (
    Parameter(
        name="compaction",
        type="enum",
        default="SizeTieredCompactionStrategy",
        choices=COMPACTION_STRATEGIES,
        change="live",
        live_command="ALTER TABLE <keyspace>.<table> WITH compaction = {'class': '<strategy>'}",
        location="table",
        description="Table compaction strategy (SOPHIA parameter 1). Size-tiered favours "
        "writes, leveled favours reads; unified (new in 5.0) can emulate either.",
        candidate_values=("SizeTieredCompactionStrategy", "LeveledCompactionStrategy"),
        note="Live, but the most expensive change: every node rewrites its SSTables in the "
        "new layout in the background after the ALTER (SOPHIA). Applied once per table, "
        "schema-wide; it is not a per-node setting.",
    ),
    _yaml("memtable_flush_writers", "int", 2, (2, 4),
          "Memtable flush threads per data directory (SOPHIA parameter 2); "
          "default two for a single data directory.",
          minimum=1, maximum=32),
    _yaml("memtable_cleanup_threshold", "float", 0.33, (0.11, 0.33),
          "Fraction of the memtable space whose occupancy triggers a flush of the "
          "largest memtable (SOPHIA parameter 3; seeds/002). Cassandra's own default is "
          "1/(memtable_flush_writers+1), i.e. 0.33 for two writers.",
          minimum=0.01, maximum=0.99,
          note="Deprecated in cassandra.yaml 5.0 (commented out) but still read."),
    _yaml("trickle_fsync", "bool", False, (False, True),
          "fsync every trickle_fsync_interval (10240KiB) during sequential writes "
          "(SOPHIA parameter 4)."),
    _yaml("row_cache_size", "size", "0MiB", ("0MiB", "64MiB"),
          "Off-heap row cache capacity (SOPHIA parameter 5); 0MiB disables it. "
          "Tables only use it with caching = {'rows_per_partition': ...} (render_settings "
          "sets that when the size is non-zero).",
          unit="MiB", minimum=0, maximum=65536,
          note="Resizing between two non-zero sizes is live with 'nodetool setcachecapacity "
          "<key-MiB> <row-MiB> <counter-MiB>'; enabling it from 0MiB needs a restart "
          "(Cassandra installs a no-op cache when started with 0), so the space lists it as "
          "restart; ConfigSpace.change_kind refines this per transition."),
    _stage_threads("concurrent_writes", "MutationStage",
                   "Threads of the write (mutation) stage (SOPHIA parameter 6; seeds/002). "
                   "Rule of thumb 8 x cores."),
    Parameter("heap_size", "size", "1G", "restart", "jvm",
              "JVM heap, written as -Xms and -Xmx (SOPHIA parameter 7). The lab runs "
              "512M..1G; 512M is the practical minimum.",
              unit="M", minimum=512, maximum=65536, candidate_values=("512M", "1G")),
    _stage_threads("concurrent_reads", "ReadStage",
                   "Threads of the read stage (seeds/002). Rule of thumb 16 x data drives."),
    _yaml("memtable_allocation_type", "enum", "heap_buffers", ("heap_buffers", "offheap_objects"),
          "How memtable memory is allocated: on-heap NIO buffers, off-heap NIO "
          "buffers, or off-heap objects (seeds/002).",
          choices=("heap_buffers", "offheap_buffers", "offheap_objects")),
    # Compaction's share of the machine: what a calibration on GBs of data can find (issue
    # 16); not in the optimiser's default grid, a calibrated model's parameters are.
    Parameter("compaction_throughput", "size", "64MiB/s", "live", "cassandra.yaml",
              "Compaction's I/O rate limit per node; 0MiB/s is unthrottled. Lower leaves "
              "more of the machine to requests and lets compaction debt grow.",
              unit="MiB/s", minimum=0, maximum=65536,
              live_command="nodetool setcompactionthroughput <MiB/s>",
              candidate_values=("64MiB/s", "16MiB/s")),
    Parameter("concurrent_compactors", "int", 2, "live", "cassandra.yaml",
              "Compactions run at once per node. Cassandra's default is min(8, max(2, "
              "min(data disks, cores))): 2 on the lab.",
              minimum=1, maximum=64, live_command="nodetool setconcurrentcompactors <n>",
              candidate_values=(2, 1)),
    # Not in the optimiser's default grid either: a calibration that measured it puts it in
    # the plans' search (as compaction_throughput).
    Parameter("key_cache_size", "size", "51MiB", "live", "cassandra.yaml",
              "On-heap cache of the partition index positions of recently read keys (issue "
              "16). Cassandra's default is derived from the heap, min(5 % of the heap, "
              "100MiB): 51MiB for the space's default heap of 1G, 25MiB on the lab's 512M.",
              unit="MiB", minimum=1, maximum=65536,
              live_command="nodetool setcachecapacity <key-MiB> <row-MiB> <counter-MiB>",
              candidate_values=("51MiB", "100MiB"),
              note="Live: setcachecapacity takes the three caches' capacities, the executor "
              "keeps the row and counter caches as they are. The role writes it to "
              "cassandra.yaml only when a plan sets it, so a node keeps the heap-derived "
              "default until then; a calibration starts from what the nodes run."),
    _yaml("memtable_implementation", "enum", "skiplist", ("skiplist", "trie"),
          "Memtable of every table without its own memtable option: the skip list of "
          "Cassandra up to 4.1, or the trie (new in 5.0), which keeps more of the memtable "
          "off-heap, fits more data in the same space and takes writes faster, but can do "
          "worse when writes crowd onto a few partitions.",
          choices=tuple(MEMTABLE_CLASSES),
          note="Written as the cassandra.yaml mapping memtable: configurations skiplist and "
          "trie, and default inheriting the chosen one (render_settings); "
          "system_views.settings shows it in the row memtable.configurations. A table "
          "created WITH memtable = '...' keeps its own choice."),
)  # fmt: skip

# ------------------------------------------------------------------- Redis 7.0
_EVICTION = (
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
)


def _redis(
    name: str, type: ParamType, default: Any, values: tuple[Any, ...] | None, description: str,
    *, set_as: str | None = "<n>", **more: Any,
) -> Parameter:
    """A redis.conf directive, live through ``CONFIG SET <name> <set_as>``; None: restart."""
    live = set_as is not None
    return Parameter(name, type, default, "live" if live else "restart", "redis.conf",
                     description, live_command=f"CONFIG SET {name} {set_as}" if live else None,
                     candidate_values=values, **more)  # fmt: skip


def _redis_bool(name: str, description: str, default: bool = False) -> Parameter:
    return _redis(name, "bool", default, (False, True), description, set_as="<yes|no>")


def _encoding_limit(
    name: str, default: int, description: str, *, values: tuple[int, ...] | None = None,
    minimum: int = 0, maximum: int = 1_000_000,
) -> Parameter:
    """A threshold of a compact encoding; the grid keeps the default unless ``values``."""
    return _redis(name, "int", default, values or (default,), description,
                  minimum=minimum, maximum=maximum, reencode=True)  # fmt: skip


_REDIS_PARAMS: tuple[Parameter, ...] = (
    _redis("maxmemory", "size", "0", None,
           "Memory limit for data; 0 means no limit. maxmemory-policy acts only when it is set.",
           set_as="<bytes|Nmb>", unit="mb", minimum=0, maximum=1024 * 1024),
    _redis("maxmemory-policy", "enum", "noeviction", ("noeviction", "allkeys-lru"),
           "What Redis evicts when maxmemory is reached.",
           set_as="<policy>", choices=_EVICTION),
    _redis("io-threads", "int", 1, (1, 2),
           "I/O threads for client socket writes (and reads with io-threads-do-reads); "
           "1 = main thread only. Cannot be changed with CONFIG SET.",
           set_as=None, minimum=1, maximum=128),
    _redis("io-threads-do-reads", "bool", False, (False, True),
           "Also thread socket reads and protocol parsing. Cannot be changed with CONFIG SET.",
           set_as=None),
    _redis_bool("appendonly", "Append-only file persistence."),
    _redis("appendfsync", "enum", "everysec", ("everysec", "no"),
           "When the AOF is fsynced (only matters with appendonly yes).",
           set_as="<always|everysec|no>", choices=("always", "everysec", "no")),
    _redis("hz", "int", 10, (10, 50),
           "Frequency of background tasks (expiry, timeouts), per second.",
           minimum=1, maximum=500),
    _redis_bool("dynamic-hz", "Scale hz with the number of clients.", default=True),
    _redis_bool(
        "activedefrag",
        "Active defragmentation (needs Redis built with its bundled jemalloc, as Debian's is).",
    ),
    _redis_bool("lazyfree-lazy-eviction", "Free evicted keys in a background thread."),
    _redis_bool("lazyfree-lazy-expire", "Free expired keys in a background thread."),
    _redis_bool("lazyfree-lazy-server-del", "Free keys deleted implicitly (e.g. RENAME) lazily."),
    _redis_bool("lazyfree-lazy-user-del", "Make DEL behave like UNLINK."),
    _redis_bool("lazyfree-lazy-user-flush", "Make FLUSHALL/FLUSHDB default to ASYNC."),
    _redis_bool("replica-lazy-flush", "Replica flushes its dataset lazily on full sync."),
    _encoding_limit("hash-max-listpack-entries", 512,
                    "Hashes with at most this many fields use the compact listpack encoding.",
                    values=(128, 512)),
    _encoding_limit("hash-max-listpack-value", 64,
                    "Largest hash field value (bytes) kept in a listpack."),
    _encoding_limit("zset-max-listpack-entries", 128,
                    "Sorted sets with at most this many members use a listpack."),
    _encoding_limit("zset-max-listpack-value", 64,
                    "Largest sorted-set member (bytes) kept in a listpack."),
    _encoding_limit("list-max-listpack-size", -2,
                    "Per-node limit of quicklist listpacks: -5..-1 = 64/32/16/8/4 KiB, "
                    "positive = entries.", minimum=-5, maximum=32767),
    _encoding_limit("set-max-intset-entries", 512,
                    "Integer-only sets up to this size use the intset encoding."),
)  # fmt: skip


CASSANDRA_SPACE = ConfigSpace(
    engine="cassandra",
    parameters={p.name: p for p in _CASSANDRA_PARAMS},
    grid_keys=(
        "compaction",
        "memtable_cleanup_threshold",
        "concurrent_writes",
        "concurrent_reads",
    ),
)
REDIS_SPACE = ConfigSpace(
    engine="redis",
    parameters={p.name: p for p in _REDIS_PARAMS},
    grid_keys=("maxmemory-policy", "io-threads", "appendfsync", "hz"),
)


def get_space(engine: str) -> ConfigSpace:
    """The configuration space of ``engine`` (``"cassandra"`` or ``"redis"``): the
    registry's ``space`` (planner.engines).

    Raises
    ------
    ValidationError
        An unknown engine.
    """
    space: ConfigSpace = get_engine(engine).space.get()
    return space


def load_config(path: str | Path, *, engine: str) -> dict[str, Any]:
    """A current-configuration file: a YAML (or JSON) mapping parameter -> value.

    Every parameter is checked against the engine's space (unknown names, types,
    bounds); an empty file means "all defaults" and gives ``{}``.
    """
    data = load_yaml(path, kind=CONFIG, allow_empty=True)
    if data is None:
        return {}
    with in_file(path):
        config = mapping(data, "current configuration")
        return get_space(engine).normalize(config)


def change_kind(engine: str, key: str, old: Any, new: Any) -> Change:
    """How a change of ``key`` from ``old`` to ``new`` takes effect, per transition: how a
    plan applies it.

    Same as the parameter's ``change`` except where the space's note says otherwise: a
    Cassandra ``row_cache_size`` resize between two non-zero sizes is live
    (``nodetool setcachecapacity``), while enabling or disabling the row cache needs a restart.
    A re-encoding threshold (``Parameter.reencode``: Redis' compact encodings) is a restart
    although CONFIG SET takes it: its effect, as measured (docs/redis-executor.md, "A reload
    re-encodes"), is that of data encoded under it, which only a reload gives; set live, the
    keys written before keep their encoding. ``kairos rollout adhoc`` and
    playbooks/change_settings_redis.yml still set it live, by the parameter's ``change``.
    """
    param = get_space(engine)[key]
    if key == "row_cache_size" and row_cache_enabled(old) and row_cache_enabled(new):
        return "live"
    if param.reencode:
        return "restart"
    return param.change


def render_settings(engine: str, config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Map a configuration to the values the templates and live commands write.

    Parameters
    ----------
    engine : str
        ``"cassandra"`` or ``"redis"``.
    config : Mapping[str, Any]
        A (possibly partial) configuration; it is validated first. Only the given keys are
        rendered, so a role can overlay them on its own defaults.

    Returns
    -------
    dict
        Cassandra: ``{"cassandra.yaml": {key: YAML scalar}, "jvm": {"-Xms": "512M",
        "-Xmx": "512M"}, "table": {"compaction": {"class": ...}, "caching": {...}}}``
        (the ``table`` entries are CQL table options: ``ALTER TABLE ... WITH compaction =
        {'class': ...}``); ``memtable_implementation`` becomes the cassandra.yaml key
        ``memtable``, a mapping (:func:`memtable_yaml`). Redis: ``{"redis.conf": {directive:
        string}}`` with booleans as ``yes``/``no``. Sections with nothing to write are present
        and empty.
    """
    space = get_space(engine)
    rendered: dict[str, dict[str, Any]] = get_engine(engine).render.get()(
        space, space.normalize(config))
    return rendered


def render_redis(space: ConfigSpace, canonical: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`render_settings` for Redis (the registry's ``render``, planner.engines)."""
    out: dict[str, Any] = {}
    for key, value in canonical.items():
        if isinstance(value, bool):
            out[key] = "yes" if value else "no"
        else:
            out[key] = str(value)
    return {"redis.conf": out}


def render_cassandra(
    space: ConfigSpace, canonical: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """:func:`render_settings` for Cassandra (the registry's ``render``, planner.engines)."""
    yaml_part: dict[str, Any] = {}
    jvm: dict[str, Any] = {}
    table: dict[str, Any] = {}
    for key, value in canonical.items():
        location = space[key].location
        if location == "jvm":
            jvm["-Xms"] = value
            jvm["-Xmx"] = value
        elif location == "table":
            table["compaction"] = {"class": value}
        elif key == "memtable_implementation":
            yaml_part["memtable"] = memtable_yaml(value)
        else:
            yaml_part[key] = value
    if "row_cache_size" in canonical:
        table["caching"] = table_caching([canonical])
    return {"cassandra.yaml": yaml_part, "jvm": jvm, "table": table}


def row_cache_enabled(value: Any) -> bool:
    """Whether a Cassandra ``row_cache_size`` value turns the row cache on (non-zero)."""
    param = get_space("cassandra")["row_cache_size"]
    return param.size_mib(param.coerce(value)) > 0


def table_caching(configs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The tables' ``caching`` option for nodes running ``configs`` (Cassandra).

    A table caches rows only with ``rows_per_partition`` other than ``NONE``, whatever the
    row cache's size; the option is schema, one value for every node, so rows are cached
    when any node has a row cache (a node without one caches nothing either way). ``NONE``
    with ``keys: ALL`` is Cassandra's default for a new table.
    """
    on = any(row_cache_enabled(c.get("row_cache_size", "0MiB")) for c in configs)
    return {"keys": "ALL", "rows_per_partition": "ALL" if on else "NONE"}


def changes_tables(engine: str, key: str, old: Any, new: Any) -> bool:
    """Whether changing ``key`` from ``old`` to ``new`` changes the tables' schema.

    True for a table option (``location: table``), and for Cassandra's row cache turned on
    or off, which changes the tables' ``caching`` (:func:`table_caching`): without it the
    cache would hold no rows. Such a change needs the tables it applies to.
    """
    if get_space(engine)[key].location == "table":
        return True
    return key == "row_cache_size" and row_cache_enabled(old) != row_cache_enabled(new)


def memtable_yaml(implementation: str) -> dict[str, Any]:
    """cassandra.yaml's ``memtable`` mapping that makes ``implementation`` the default.

    Both configurations are defined, as in Cassandra 5.0's own cassandra.yaml (so a table can
    still choose one with ``WITH memtable = '...'``), and ``default``, which every table
    without a memtable option uses, inherits the chosen one::

        memtable:
          configurations:
            skiplist: {class_name: SkipListMemtable}
            trie: {class_name: TrieMemtable}
            default: {inherits: trie}

    The rollout file and the role's applied record sort their keys, so the node's file lists
    ``default`` first; Cassandra 5.0.6 resolves every ``inherits`` after the classes
    (``MemtableParams.expandDefinitions``), in any order.
    """
    get_space("cassandra")["memtable_implementation"].coerce(implementation)
    configurations: dict[str, Any] = {
        name: {"class_name": cls} for name, cls in MEMTABLE_CLASSES.items()
    }
    configurations["default"] = {"inherits": implementation}
    return {"configurations": configurations}


def settings_row(engine: str, name: str) -> str:
    """The Cassandra ``system_views.settings`` row that shows parameter ``name``.

    The parameter's own name, except ``memtable_implementation``
    (:data:`MEMTABLE_SETTINGS_ROW`).
    """
    get_space(engine)[name]  # the engine's parameter: memtable_implementation is Cassandra's
    if name == "memtable_implementation":
        return MEMTABLE_SETTINGS_ROW
    return name


#: Cassandra's cache sizes -> their ``system_views.caches`` row: ``nodetool setcachecapacity``
#: resizes a cache live while ``system_views.settings`` keeps the start-up size, so the size a
#: node runs is the row's capacity_bytes. module_utils/kairos_settings.CACHE_ROWS is the same
#: map on the nodes.
CACHE_VIEW_ROWS = {"key_cache_size": "keys", "row_cache_size": "rows"}


def from_settings_view(engine: str, name: str, shown: str | None) -> Any:
    """Parameter ``name`` as its ``system_views.settings`` row shows it -> canonical.

    ``shown`` is the row :func:`settings_row` names; unset (``None``, empty, ``null``) is
    the default. ``memtable_implementation`` is read from the memtable configurations
    (:func:`memtable_from_settings_view`).

    Raises
    ------
    ValidationError
        The value is not valid for the parameter (naming it).
    """
    param = get_space(engine)[name]  # memtable_implementation is Cassandra's parameter
    if name == "memtable_implementation":
        return memtable_from_settings_view(shown)
    if shown is None or shown in ("", "null"):
        return param.default
    raw = yaml.safe_load(shown) if param.type != "size" else shown
    return param.coerce(raw)


# Cassandra 5.0.6 prints the row memtable.configurations as java.util.HashMap.toString() of
# its InheritingClass entries, each ``[<inherits>+][<class_name>][<parameters map>]``:
# ``{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}``; with
# -Dcassandra.virtual_table_complex_settings_format_json=true, as a JSON object of
# {class_name, parameters, inherits}. module_utils/kairos_settings.py reads the same row on
# the nodes (the read-back after a rollout), where the planner cannot be imported; both read
# the Java text with module_utils/kairos_javamap.py.


def _memtable_configurations(shown: str) -> dict[str, dict[str, str | None]]:
    """``{name: {"inherits": ..., "class_name": ...}}`` from the row's text."""
    if shown.lstrip().startswith('{"'):
        data = json.loads(shown)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return {str(name): {"inherits": (conf or {}).get("inherits"),
                            "class_name": (conf or {}).get("class_name")}
                for name, conf in data.items()}
    out: dict[str, dict[str, str | None]] = {}
    for name, value in kairos_javamap.java_map(shown).items():
        entry = kairos_javamap.memtable_configuration(value)
        out[name] = {"inherits": entry["inherits"], "class_name": entry["class_name"] or None}
    return out


def memtable_from_settings_view(shown: str | None) -> str:
    """The ``memtable_implementation`` a node runs, from its row ``memtable.configurations``.

    Unset (no ``memtable`` in cassandra.yaml) is Cassandra's default, the skip list. The
    ``default`` configuration is followed through ``inherits`` to its class; a configuration
    list without ``default`` means the skip list too.

    Raises
    ------
    ValidationError
        The row cannot be read, or the default is neither SkipListMemtable nor TrieMemtable
        (e.g. ShardedSkipListMemtable): Kairos does not know that configuration.
    """
    if shown is None or shown.strip() in ("", "null"):
        return "skiplist"
    try:
        configurations = _memtable_configurations(shown)
    except (ValueError, AttributeError) as exc:  # AttributeError: JSON entries not objects
        raise ValidationError(
            f"memtable_implementation: cannot read {MEMTABLE_SETTINGS_ROW} = {shown!r} ({exc})"
        ) from None
    name, seen = "default", set()
    while name in configurations and name not in seen:
        seen.add(name)
        conf = configurations[name]
        if conf["class_name"]:  # its own class wins over what it inherits, as in Cassandra
            cls = conf["class_name"].rsplit(".", 1)[-1]
            for implementation, known in MEMTABLE_CLASSES.items():
                if cls == known:
                    return implementation
            raise ValidationError(
                f"memtable_implementation: the nodes' default memtable is {cls} "
                f"({MEMTABLE_SETTINGS_ROW} = {shown!r}), not one of "
                f"{', '.join(MEMTABLE_CLASSES.values())}"
            )
        name = conf["inherits"] or ""
    if name == "default" and name not in seen:
        return "skiplist"  # no default configuration in the file: Cassandra's, the skip list
    raise ValidationError(
        f"memtable_implementation: the default memtable configuration does not resolve to a "
        f"class ({MEMTABLE_SETTINGS_ROW} = {shown!r})"
    )
