"""Named Redis workload shapes (``kairos load --shape``): loads whose best configuration differs.

A shape gives the operation classes of the Redis mix (read, write, other) a meaning that
makes one of Redis' settings matter (issue 41 part 2):

- ``cache-hot``: a cache-aside cache. ``read`` GETs a key drawn from the key distribution
  (zipfian by default, over ``keys`` keys: size it larger than maxmemory); a miss is
  filled with a SET (+ WAIT), so the hit ratio and the evictions depend on
  ``maxmemory-policy``. ``write`` SETs a drawn key (write-through); ``other`` is the
  default EVAL.
- ``cache-scan``: the same cache, ``other`` being a scan: a run of ``scan_length`` GETs
  over consecutive keys of the cold range ``[keys, max_keys)`` (each filled on a miss):
  one-hit wonders that push the hot set out of an LRU but not out of an LFU.
- ``hash-read`` / ``hash-write``: ``keys`` hashes of 256-768 fields each (a fixed count
  per hash, :func:`hash_fields`), on both sides of Redis' default
  hash-max-listpack-entries (512). ``read`` is HGET of one field (85 %) or HMGET of 10
  (15 %), ``other`` HGETALL, ``write`` HSET of 1-10 fields; a read that misses fills the
  whole hash with one HSET. hash-read is read-heavy, hash-write write-heavy: the listpack
  against hashtable thresholds (hash-max-listpack-entries/value) trade memory for CPU.
- ``evict-burst``: cache-hot, but for :data:`BURST_SECONDS` of every
  :data:`BURST_PERIOD` seconds every operation is a SET of a large value
  (:data:`BURST_VALUE_SIZE` bytes) to the next key of the range ``[keys, max_keys)``:
  bursts that push memory past maxmemory and evict.

Every key has one writer (keys ``k`` with ``k % writers == slot``), reads included: a
thread reads and fills only its own keys, so each write is still ordered and checked
(:mod:`planner.loadgen.check`). Pure: :class:`ShapeChooser` draws the operations, the
Redis worker (:mod:`planner.loadgen.clients`) sends them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from planner.loadgen.workload import KeyChooser, fnv1a64

#: Fields per hash of the hash shapes: between these bounds (inclusive), fixed per hash.
#: They straddle Redis' default hash-max-listpack-entries (512; redis.conf's example 128):
#: at the default about half the hashes are listpacks, and the threshold moves them.
HASH_FIELDS: tuple[int, int] = (256, 768)
#: Fields an HMGET reads, and the most an HSET of hash-write writes.
HMGET_FIELDS = 10
HSET_MAX_FIELDS = 10
#: Share of hash reads that are HMGET (the rest HGET).
HMGET_SHARE = 0.15
#: The field each hash write also sets to its own value: the hash's verified marker.
MARKER_FIELD = "_w"
#: evict-burst: seconds of burst in each period, the period, and the bytes of a burst value.
BURST_SECONDS = 2.0
BURST_PERIOD = 10.0
BURST_VALUE_SIZE = 64 * 1024


@dataclass(frozen=True)
class ShapeSpec:
    """A shape's engine, default mix and the CLI's defaults for ``--keys`` and
    ``--value-size``."""

    name: str
    mix: dict[str, float]
    keys: int
    value_size: int
    hashes: bool = False
    cold_range: bool = False  # uses [keys, max_keys): max_keys must exceed keys
    engine: str = "redis"  # the engine whose commands it sends


SHAPES: dict[str, ShapeSpec] = {
    s.name: s for s in (
        ShapeSpec("cache-hot", {"read": 0.9, "write": 0.1}, keys=100_000, value_size=1000),
        # A hot set that would fit (20,000 1-KB values in 32 MB) read often enough for LFU
        # to tell it from the scans' one-hit wonders: LRU lets the scans flush it.
        ShapeSpec("cache-scan", {"read": 0.9, "write": 0.05, "other": 0.05}, keys=20_000,
                  value_size=1000, cold_range=True),
        ShapeSpec("hash-read", {"read": 0.85, "write": 0.1, "other": 0.05}, keys=1_000,
                  value_size=40, hashes=True),
        ShapeSpec("hash-write", {"read": 0.2, "write": 0.8}, keys=1_000, value_size=40,
                  hashes=True),
        ShapeSpec("evict-burst", {"read": 0.9, "write": 0.1}, keys=20_000, value_size=1000,
                  cold_range=True),
    )
}


@dataclass(frozen=True)
class Op:
    """One shaped operation: ``kind`` (get, set, eval, scan, burst, hget, hmget, hgetall,
    hset), the key(s) and, for hashes, the field numbers."""

    kind: str
    key: int
    keys: tuple[int, ...] = ()
    fields: tuple[int, ...] = ()

    @property
    def writes(self) -> bool:
        return self.kind in ("set", "burst", "hset")

    @property
    def cls(self) -> str:
        """The Redis class it is counted in: write, other (scan, HGETALL, EVAL) or read."""
        if self.writes:
            return "write"
        return "other" if self.kind in ("scan", "hgetall", "eval") else "read"


def hash_fields(key: int) -> int:
    """How many fields hash ``key`` has (fixed per hash, in :data:`HASH_FIELDS`)."""
    lo, hi = HASH_FIELDS
    return lo + fnv1a64(key) % (hi - lo + 1)


def field_name(field: int) -> str:
    return f"f{field}"


def in_burst(elapsed: float) -> bool:
    """evict-burst: whether ``elapsed`` seconds into the run falls in a burst."""
    return elapsed % BURST_PERIOD < BURST_SECONDS


class ShapeChooser:
    """Draws the operations of one writer slot (one Redis client thread) for a shape.

    Parameters
    ----------
    shape : str
        A name of :data:`SHAPES`.
    slot, writers : int
        This writer and the writer count: every key drawn is owned (``key % writers == slot``).
    keys, max_keys : int
        The hot key space ``[0, keys)`` and the bound of the cold/burst range.
    distribution : str
        Key popularity over the hot key space.
    scan_length : int
        Keys per scan (cache-scan).
    """

    def __init__(self, shape: str, *, slot: int, writers: int, keys: int, max_keys: int,
                 distribution: str, scan_length: int) -> None:
        self.spec = SHAPES[shape]
        self.slot = slot
        self.writers = writers
        self.keys = keys
        self.max_keys = max_keys
        self.scan_length = scan_length
        # Owned keys only: draw an index among this writer's keys of [0, keys).
        self.owned = (keys - slot + writers - 1) // writers
        self.chooser = KeyChooser(distribution, self.owned)
        first = keys + (slot - keys) % writers
        self._cold_first = first
        self._cold_count = max(0, (max_keys - first + writers - 1) // writers)
        self._cursor: int | None = None

    def hot_key(self, rng: random.Random) -> int:
        """An owned key of ``[0, keys)`` drawn with the distribution."""
        return self.chooser.next(rng, self.owned) * self.writers + self.slot

    def cold_keys(self, n: int, rng: random.Random) -> tuple[int, ...]:
        """The next ``n`` owned keys of the cold range ``[keys, max_keys)``, in order, wrapping.

        The first call starts at a random owned key, so that runs one after the other (a
        warm-up, then the measured run) do not scan the same keys again: a scan key is read
        once per pass over the range.
        """
        if self._cold_count == 0:
            return ()
        if self._cursor is None:
            self._cursor = rng.randrange(self._cold_count)
        out = []
        for _ in range(n):
            out.append(self._cold_first + (self._cursor % self._cold_count) * self.writers)
            self._cursor += 1
        return tuple(out)

    def next(self, cls: str, rng: random.Random, elapsed: float = 0.0) -> Op:
        """The operation of class ``cls`` (read, write or other) at ``elapsed`` seconds."""
        name = self.spec.name
        if name == "evict-burst" and in_burst(elapsed):
            cold = self.cold_keys(1, rng)
            if cold:
                return Op("burst", cold[0])
        if self.spec.hashes:
            return self._hash_op(cls, rng)
        key = self.hot_key(rng)
        if cls == "read":
            return Op("get", key)
        if cls == "write":
            return Op("set", key)
        if name == "cache-scan":
            keys = self.cold_keys(self.scan_length, rng)
            return Op("scan", keys[0], keys=keys)
        return Op("eval", key)

    def _hash_op(self, cls: str, rng: random.Random) -> Op:
        key = self.hot_key(rng)
        n = hash_fields(key)
        if cls == "other":
            return Op("hgetall", key)
        if cls == "write":
            count = rng.randint(1, min(HSET_MAX_FIELDS, n))
            return Op("hset", key, fields=tuple(sorted(rng.sample(range(n), count))))
        if rng.random() < HMGET_SHARE:
            return Op("hmget", key, fields=tuple(sorted(rng.sample(range(n),
                                                                   min(HMGET_FIELDS, n)))))
        return Op("hget", key, fields=(rng.randrange(n),))
