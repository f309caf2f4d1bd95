"""planner.planning.per_table: each table's compaction strategy by its own mix (MeT, seeds/001).

The shipped prior's compaction terms favour LeveledCompactionStrategy for reads and hurt
writes with it, so a read-heavy table should get LCS and a write-heavy one keep STCS.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from planner.model.performance import load_default_model
from planner.model.spaces import get_space
from planner.planning.per_table import (
    TableWorkload,
    choose_per_table,
    harmonic_capacity,
)

STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"
UCS = "UnifiedCompactionStrategy"
T = 6
STEP = 300.0
MODEL = load_default_model("cassandra")
CONFIG = get_space("cassandra").complete({})


def _table(load: float | np.ndarray, read: float, scan: float = 0.0) -> TableWorkload:
    """A table's forecast: ``read`` of its operations reads, the rest update."""
    return TableWorkload(np.broadcast_to(np.asarray(load, dtype=float), (T,)).copy(),
                         np.tile([read, 1 - read - scan, 0.0, scan], (T, 1)))


def _seconds(seconds: float) -> Any:
    return lambda _key, _old, _new: seconds


def _choose(tables: dict[str, TableWorkload], **kw: Any) -> Any:
    base: dict[str, Any] = {
        "model": MODEL, "configs": [CONFIG] * T, "running": CONFIG, "tables": tables,
        "step_seconds": STEP, "change_seconds": _seconds(120.0), "served": "offered",
    }
    return choose_per_table(**(base | kw))


def test_a_read_heavy_table_gets_lcs_and_a_write_heavy_one_keeps_stcs() -> None:
    # 50,000 ops/s saturates the prior's cluster (~6,000-11,000 ops/s): capacity is served.
    found = _choose({"shop.events": _table(50_000, 0.05), "shop.profiles": _table(50_000, 0.95)})
    events, profiles = found.tables["shop.events"], found.tables["shop.profiles"]
    assert profiles.override and profiles.values == ({"compaction": LCS},)
    assert profiles.capacity_chosen > profiles.capacity_cluster
    assert profiles.gain_ops > profiles.cost_ops > 0
    assert not events.override and events.values == ({"compaction": STCS},)
    assert events.reason == "the cluster-wide value is already its best"
    assert found.overrides(0) == {"shop.profiles": {"compaction": LCS}}
    assert found.gain_ops == pytest.approx(profiles.gain_ops)
    assert found.cost_ops == pytest.approx(profiles.cost_ops)


def test_on_an_lcs_cluster_the_write_heavy_table_gets_stcs() -> None:
    lcs = {**CONFIG, "compaction": LCS}
    found = _choose({"shop.events": _table(50_000, 0.05), "shop.profiles": _table(50_000, 0.95)},
                    configs=[lcs] * T, running=lcs)
    assert found.overrides(0) == {"shop.events": {"compaction": STCS}}
    assert not found.tables["shop.profiles"].override


def test_the_separable_argmax_is_the_best_of_every_assignment() -> None:
    # Three tables, three strategies: 27 assignments, each valued by the harmonic capacity.
    tables = {"ks.a": _table(np.linspace(100, 900, T), 0.9),
              "ks.b": _table(np.linspace(700, 200, T), 0.1),
              "ks.c": _table(400.0, 0.5, scan=0.2)}
    values = (STCS, LCS, UCS)
    own = {name: {v: MODEL.predict_matrix(
        [dict(zip(MODEL.classes, w.mix[0].tolist(), strict=True))],
        [{**CONFIG, "compaction": v}])[0][0, 0] for v in values} for name, w in tables.items()}
    loads = np.stack([w.load for w in tables.values()])

    def capacity(assignment: tuple[str, ...]) -> float:
        caps = np.stack([np.full(T, own[n][v]) for n, v in zip(tables, assignment, strict=True)])
        return float(np.sum(harmonic_capacity(loads, caps)))

    brute = max(itertools.product(values, repeat=len(tables)), key=capacity)
    # served = capacity and no change cost: every table whose best differs is taken
    found = _choose(tables, values={"compaction": values}, served="capacity",
                    change_seconds=_seconds(0.0))
    assert tuple(c.values[0]["compaction"] for c in found.tables.values()) == brute
    assert tuple(max(own[n], key=own[n].__getitem__) for n in tables) == brute
    stay = capacity((STCS,) * len(tables))
    assert found.gain_ops == pytest.approx((capacity(brute) - stay) * STEP, rel=1e-9)


def test_a_table_whose_gain_does_not_beat_its_cost_keeps_the_cluster_value() -> None:
    # 1,000 ops/s: far below capacity, served work does not grow with capacity
    found = _choose({"shop.events": _table(500, 0.05), "shop.profiles": _table(500, 0.95)})
    profiles = found.tables["shop.profiles"]
    assert profiles.best == ({"compaction": LCS},)
    assert not profiles.override and profiles.values == ({"compaction": STCS},)
    assert profiles.gain_ops == 0.0 and profiles.cost_ops > 0
    assert profiles.reason is not None and "does not beat its change cost" in profiles.reason
    assert found.overrides(0) == {} and found.gain_ops == 0.0 and found.cost_ops == 0.0


def test_the_cost_of_one_tables_change_is_scaled_by_its_share_of_the_load() -> None:
    tables = {"ks.big": _table(45_000, 0.05), "ks.read": _table(5_000, 0.95)}
    found = _choose(tables)
    own = [MODEL.predict_matrix([dict(zip(MODEL.classes, w.mix[0].tolist(), strict=True))],
                                [CONFIG])[0][0, 0] for w in tables.values()]
    # saturated: the cluster-wide plan serves its capacity; 120 s of it, times 10 %
    capacity = harmonic_capacity(np.array([[45_000.0], [5_000.0]]), np.array([[own[0]],
                                                                              [own[1]]]))[0]
    assert found.tables["ks.read"].cost_ops == pytest.approx(120.0 * capacity * 0.1)


def test_a_step_that_changes_the_node_level_config_may_change_the_choice() -> None:
    # The cluster goes to LCS at time point 3: the read table's override is needed only
    # before it, the write table's only after it; each change is charged where it starts.
    lcs = {**CONFIG, "compaction": LCS}
    configs = [CONFIG] * 3 + [lcs] * 3
    found = _choose({"ks.w": _table(50_000, 0.05), "ks.r": _table(50_000, 0.95)},
                    configs=configs)
    assert found.starts == (0, 3)
    assert found.overrides(0) == {"ks.r": {"compaction": LCS}}
    assert found.overrides(1) == {"ks.w": {"compaction": STCS}}
    # both follow the table's own best value throughout: nothing changes at time point 3
    assert found.changes(1) == ()
    assert found.segment_cost_ops[1] == 0.0 and found.segment_cost_ops[0] > 0


def test_the_load_no_table_forecast_names_runs_the_cluster_value() -> None:
    alone = _choose({"ks.r": _table(20_000, 0.95)})
    crowded = _choose({"ks.r": _table(20_000, 0.95)}, rest=_table(30_000, 0.05))
    # the rest dilutes the read table's share of cluster time, so its gain shrinks
    assert 0 < crowded.tables["ks.r"].gain_ops < alone.tables["ks.r"].gain_ops
