"""The memory split as a decision (planner.model.memory_split; issue 43 part 1): the optimiser
against brute force, the split's rules, the curves, and error-driven refinement."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.model.memory_split import (
    MIB,
    CacheEffect,
    CassandraMemoryModels,
    MemoryBudget,
    MissRatioCurve,
    PressureCost,
    RedisMemoryModels,
    allocate,
    brute_force_split,
    config_bytes,
    evaluate_split,
    fit_miss_cost,
    gap_errors,
    held_out_error,
    optimise_split,
    refine,
    synthetic_hit_curve,
)

MIX = {"read": 0.6, "update": 0.2, "insert": 0.1, "scan": 0.1}


def curve(*points: tuple[float, float]) -> MissRatioCurve:
    """A curve through points given in (MiB, hit ratio)."""
    return MissRatioCurve.fit(sizes_bytes=[s * MIB for s, _ in points],
                              hit_ratios=[h for _, h in points])


def lab_models() -> CassandraMemoryModels:
    return CassandraMemoryModels(
        gc=PressureCost(need_bytes=300 * MIB, seconds_at_double=0.0005),
        key_cache=CacheEffect(curve((16, 0.5), (64, 0.85), (128, 0.95)), 0.0007),
        row_cache=CacheEffect(curve((64, 0.2), (256, 0.5)), 0.0004),
        page_cache=CacheEffect(curve((256, 0.3), (512, 0.6), (1024, 0.9)), 0.0007),
    )


def lab_budget(**more: Any) -> MemoryBudget:
    return MemoryBudget(**{"engine": "cassandra", "total_bytes": 1536 * MIB,
                           "overhead_bytes": 256 * MIB, **more})


def random_curve(rng: np.random.Generator, max_mib: float) -> MissRatioCurve:
    n = int(rng.integers(0, 5))
    sizes = np.sort(rng.uniform(8, max_mib, n))
    hits = np.sort(rng.uniform(0, 1, n))
    return MissRatioCurve.fit(sizes_bytes=sizes * MIB, hit_ratios=hits)


def random_mix(rng: np.random.Generator, classes: tuple[str, ...]) -> dict[str, float]:
    weights = rng.dirichlet(np.ones(len(classes)))
    return dict(zip(classes, (float(w) for w in weights), strict=True))


def random_cassandra(seed: int) -> tuple[MemoryBudget, CassandraMemoryModels, dict[str, float]]:
    rng = np.random.default_rng(seed)
    budget = MemoryBudget(
        engine="cassandra",
        total_bytes=int(rng.choice([1024, 1280, 1536, 1792])) * MIB,
        overhead_bytes=int(rng.choice([128, 192, 256])) * MIB,
        unit_bytes=int(rng.choice([32, 64])) * MIB,
        heap_headroom=float(rng.choice([0.25, 0.5, 0.75])),
    )
    models = CassandraMemoryModels(
        gc=PressureCost(need_bytes=float(rng.uniform(100, 400)) * MIB,
                        seconds_at_double=float(rng.uniform(1e-5, 1e-3))),
        key_cache=CacheEffect(random_curve(rng, 256), float(rng.uniform(0, 1e-3))),
        row_cache=CacheEffect(random_curve(rng, 512), float(rng.uniform(0, 1e-3))),
        page_cache=CacheEffect(random_curve(rng, 1024), float(rng.uniform(0, 1e-3))),
    )
    return budget, models, random_mix(rng, ("read", "update", "insert", "scan"))


def check_rules(split: Any, budget: MemoryBudget) -> None:
    sizes = split.sizes_bytes
    if budget.engine == "cassandra":
        shares = ("heap_size", "row_cache_size", "overhead", "page_cache")
        # (1 - 0.9) is 0.0999...98 in floating point: a relative tolerance
        assert sizes["key_cache_size"] <= (1 - budget.heap_headroom) * sizes["heap_size"] \
            * (1 + 1e-9)
        assert sizes["page_cache"] >= 0
    else:
        shares = ("maxmemory", "overhead", "os")
        assert sizes["os"] >= 0
    assert sum(sizes[s] for s in shares) == budget.total_bytes
    for key in split.config():
        assert sizes[key] % budget.unit_bytes == 0, key


# ------------------------------------------------------------------ optimiser vs brute force
@pytest.mark.parametrize("seed", range(8))
def test_allocate_equals_enumeration_on_random_separable_tables(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(4, 12))
    tables = [rng.uniform(0, 10, int(rng.integers(2, size + 2))) for _ in range(3)]
    for table in tables:
        table[rng.uniform(size=table.size) < 0.2] = np.inf  # sizes a share may not take
    remainder = rng.uniform(0, 10, size)
    best, units = allocate(tables, remainder)
    enumerated = min(
        (sum(t[u] for t, u in zip(tables, combo, strict=True)) + remainder[sum(combo)], combo)
        for combo in itertools.product(*(range(t.size) for t in tables))
        if sum(combo) < size
    )
    assert best == pytest.approx(enumerated[0])
    assert sum(t[u] for t, u in zip(tables, units, strict=True)) + remainder[sum(units)] \
        == pytest.approx(best)


@pytest.mark.parametrize("seed", range(10))
def test_cassandra_split_equals_brute_force_on_small_budgets(seed: int) -> None:
    budget, models, mix = random_cassandra(seed)
    dp = optimise_split(budget=budget, models=models, mix=mix)
    brute = brute_force_split(budget=budget, models=models, mix=mix)
    assert dp.seconds_per_op == pytest.approx(brute.seconds_per_op, rel=1e-12)
    check_rules(dp, budget)
    again = evaluate_split(budget=budget, models=models, mix=mix, sizes_bytes=dp.sizes_bytes)
    assert again.seconds_per_op == pytest.approx(dp.seconds_per_op)


@pytest.mark.parametrize("seed", range(6))
def test_redis_split_equals_brute_force_on_small_budgets(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    budget = MemoryBudget(engine="redis", total_bytes=int(rng.choice([256, 512])) * MIB,
                          overhead_bytes=32 * MIB, unit_bytes=16 * MIB)
    models = RedisMemoryModels(
        maxmemory=CacheEffect(random_curve(rng, 400), float(rng.uniform(1e-4, 1e-3))),
        os=PressureCost(need_bytes=float(rng.uniform(8, 64)) * MIB,
                        seconds_at_double=float(rng.uniform(1e-5, 1e-3))),
    )
    mix = random_mix(rng, ("read", "write", "other"))
    dp = optimise_split(budget=budget, models=models, mix=mix)
    brute = brute_force_split(budget=budget, models=models, mix=mix)
    assert dp.seconds_per_op == pytest.approx(brute.seconds_per_op, rel=1e-12)
    check_rules(dp, budget)
    assert dp.classes == {"maxmemory": "live"} and not dp.needs_rollout


def test_a_share_no_operation_weighs_on_still_keeps_what_its_model_needs() -> None:
    # reads only: the OS remainder's cost weighs nothing, but a fork still needs its room
    budget = MemoryBudget(engine="redis", total_bytes=256 * MIB, overhead_bytes=32 * MIB)
    models = RedisMemoryModels(maxmemory=CacheEffect(curve((224, 1.0)), 1e-3),
                               os=PressureCost(need_bytes=40 * MIB, seconds_at_double=1e-3))
    for search in (optimise_split, brute_force_split):
        split = search(budget=budget, models=models, mix={"read": 1.0})
        assert split.sizes_bytes["os"] == 48 * MIB and split.share_seconds["os"] == 0.0


def test_the_optimum_is_no_worse_than_the_running_split_on_the_grid() -> None:
    running = config_bytes("cassandra", {"heap_size": "512M", "key_cache_size": "32MiB"})
    assert running == {"heap_size": 512 * MIB, "key_cache_size": 32 * MIB, "row_cache_size": 0}
    now = evaluate_split(budget=lab_budget(), models=lab_models(), mix=MIX, sizes_bytes=running)
    best = optimise_split(budget=lab_budget(), models=lab_models(), mix=MIX)
    assert best.seconds_per_op < now.seconds_per_op
    assert now.sizes_bytes["page_cache"] == (1536 - 256 - 512) * MIB


# ------------------------------------------------------------------ the split's rules
@pytest.mark.parametrize("headroom", [0.0, 0.5, 0.9])
def test_the_key_cache_stays_inside_the_heap_headroom(headroom: float) -> None:
    # a key cache worth more than anything else would take the whole heap if it could
    models = CassandraMemoryModels(
        gc=PressureCost(need_bytes=64 * MIB, seconds_at_double=1e-6),
        key_cache=CacheEffect(curve((1024, 1.0)), 1.0),
        row_cache=CacheEffect(curve(), 0.0),
        page_cache=CacheEffect(curve(), 0.0),
    )
    budget = lab_budget(heap_headroom=headroom)
    split = optimise_split(budget=budget, models=models, mix=MIX)
    check_rules(split, budget)
    # the most the headroom allows of the largest heap (1280 MiB): 640 or 128 MiB; without
    # headroom, 1024 MiB, where the curve tops out (more would only crowd the GC)
    assert split.sizes_bytes["heap_size"] == 1280 * MIB
    assert split.sizes_bytes["key_cache_size"] == {0.0: 1024, 0.5: 640, 0.9: 128}[headroom] * MIB


def test_a_page_cache_worth_more_than_the_heap_keeps_the_heap_at_its_minimum() -> None:
    models = CassandraMemoryModels(
        gc=PressureCost(need_bytes=200 * MIB, seconds_at_double=1e-6),
        key_cache=CacheEffect(curve((16, 0.9)), 1e-6),
        row_cache=CacheEffect(curve((64, 0.1)), 1e-6),
        page_cache=CacheEffect(curve((1280, 1.0)), 1e-2),
    )
    split = optimise_split(budget=lab_budget(), models=models, mix=MIX)
    assert split.config() == {"heap_size": "512M", "key_cache_size": "16MiB",
                              "row_cache_size": "0MiB"}
    assert split.sizes_bytes["page_cache"] == (1536 - 256 - 512) * MIB


def test_classes_follow_the_transition_from_the_running_configuration() -> None:
    running = {"heap_size": "944M", "key_cache_size": "64MiB", "row_cache_size": "32MiB"}
    split = optimise_split(budget=lab_budget(), models=lab_models(), mix=MIX, current=running)
    assert split.config() == {"heap_size": "944M", "key_cache_size": "128MiB",
                              "row_cache_size": "64MiB"}
    # the heap is unchanged; the row cache resizes between two non-zero sizes: live
    assert split.changed == ("key_cache_size", "row_cache_size")
    assert split.classes == {"heap_size": "restart", "key_cache_size": "live",
                             "row_cache_size": "live"}
    assert not split.needs_rollout
    fresh = optimise_split(budget=lab_budget(), models=lab_models(), mix=MIX,
                           current={"heap_size": "512M", "row_cache_size": "0MiB"})
    assert fresh.classes["row_cache_size"] == "restart" and fresh.needs_rollout
    assert fresh.to_dict()["needs_rollout"] is True


def test_limits_hold_the_heap_at_its_running_size_for_a_live_split() -> None:
    split = optimise_split(
        budget=lab_budget(), models=lab_models(), mix=MIX,
        current={"heap_size": "512M", "key_cache_size": "16MiB", "row_cache_size": "64MiB"},
        limits={"heap_size": (512 * MIB, 512 * MIB), "row_cache_size": (16 * MIB, 4096 * MIB)},
    )
    assert split.sizes_bytes["heap_size"] == 512 * MIB
    assert "heap_size" not in split.changed and not split.needs_rollout
    check_rules(split, lab_budget())


# ------------------------------------------------------------------ bad input
GOOD_BUDGET: dict[str, Any] = {"engine": "cassandra", "total_bytes": 1536 * MIB,
                               "overhead_bytes": 256 * MIB}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"engine": "mysql"}, "engine"),
        ({"total_bytes": -1}, "total_bytes"),
        ({"total_bytes": 1.5e9}, "total_bytes"),
        ({"overhead_bytes": 2048 * MIB}, "overhead_bytes"),
        ({"unit_bytes": 1000}, "unit_bytes"),
        ({"unit_bytes": 0}, "unit_bytes"),
        ({"heap_headroom": 1.0}, "heap_headroom"),
        ({"heap_headroom": float("nan")}, "heap_headroom"),
    ],
)
def test_a_bad_budget_names_its_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=f"^{field}:"):
        MemoryBudget(**{**GOOD_BUDGET, **change})


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: MissRatioCurve.fit(sizes_bytes=[0], hit_ratios=[0.5]), "sizes_bytes"),
        (lambda: MissRatioCurve.fit(sizes_bytes=[MIB], hit_ratios=[1.5]), "hit_ratios"),
        (lambda: MissRatioCurve.fit(sizes_bytes=[MIB, 2 * MIB], hit_ratios=[0.5]),
         "hit_ratios"),
        (lambda: MissRatioCurve(knots_bytes=(0.0, 1.0), knots_hit=(0.0, 0.5, 1.0)),
         "knots_bytes"),
        (lambda: MissRatioCurve(knots_bytes=(0.0, 2.0, 1.0), knots_hit=(0.0, 0.5, 0.6)),
         "knots_hit"),
        (lambda: CacheEffect(curve(), -1.0), "miss_seconds"),
        (lambda: PressureCost(need_bytes=0, seconds_at_double=1.0), "need_bytes"),
        (lambda: PressureCost(need_bytes=MIB, seconds_at_double=math.inf), "seconds_at_double"),
    ],
)
def test_a_bad_model_names_its_field(call: Callable[[], Any], field: str) -> None:
    with pytest.raises(ValidationError, match=f"^{field}:"):
        call()


@pytest.mark.parametrize(
    ("more", "field"),
    [
        ({"mix": {"read": 0.5, "write": 0.5}}, "mix"),
        ({"mix": {"read": 0.5, "update": 0.2}}, "mix"),
        ({"mix": {"read": 1.2, "update": -0.2}}, "mix.update"),
        ({"models": RedisMemoryModels(maxmemory=CacheEffect(curve(), 0.0),
                                      os=PressureCost(need_bytes=MIB, seconds_at_double=0.0))},
         "models"),
        ({"limits": {"maxmemory": (0, MIB)}}, "limits"),
        ({"limits": {"heap_size": (600 * MIB, 604 * MIB)}}, "limits.heap_size"),
        ({"limits": {"row_cache_size": (64 * MIB, 32 * MIB)}}, "limits.row_cache_size"),
        ({"current": {"heap_size": "256M"}}, "heap_size"),
    ],
)
def test_bad_optimiser_input_names_its_field(more: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"budget": lab_budget(), "models": lab_models(), "mix": MIX}
    with pytest.raises(ValidationError, match=f"^{field}:"):
        optimise_split(**{**arguments, **more})


def test_a_live_set_larger_than_every_heap_is_refused_naming_the_budget() -> None:
    models = CassandraMemoryModels(
        gc=PressureCost(need_bytes=2000 * MIB, seconds_at_double=1e-4),
        key_cache=CacheEffect(curve(), 0.0), row_cache=CacheEffect(curve(), 0.0),
        page_cache=CacheEffect(curve(), 0.0),
    )
    for search in (optimise_split, brute_force_split):
        with pytest.raises(ValidationError, match=r"^budget: no split of 1280 MiB"):
            search(budget=lab_budget(), models=models, mix=MIX)


def test_brute_force_refuses_a_large_grid_and_evaluate_refuses_a_broken_split() -> None:
    with pytest.raises(ValidationError, match=r"^max_splits:"):
        brute_force_split(budget=lab_budget(unit_bytes=MIB), models=lab_models(), mix=MIX)
    over = {"heap_size": 1024 * MIB, "key_cache_size": 16 * MIB, "row_cache_size": 512 * MIB}
    too_big_key = {"heap_size": 512 * MIB, "key_cache_size": 300 * MIB, "row_cache_size": 0}
    for sizes in (over, too_big_key, {"heap_size": 512 * MIB}):
        with pytest.raises(ValidationError, match=r"^sizes_bytes:"):
            evaluate_split(budget=lab_budget(), models=lab_models(), mix=MIX, sizes_bytes=sizes)


# ------------------------------------------------------------------ the curves
@pytest.mark.parametrize("seed", range(5))
def test_the_fitted_miss_ratio_never_increases_even_on_noisy_points(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.uniform(1, 512, 30) * MIB
    hits = np.clip(1 - np.exp(-sizes / (100 * MIB)) + rng.normal(0, 0.1, 30), 0, 1)
    for concave in (False, True):
        fitted = MissRatioCurve.fit(sizes_bytes=sizes, hit_ratios=hits, concave=concave)
        dense = np.linspace(0, 600 * MIB, 2000)
        assert np.all(np.diff(fitted.miss_ratio(dense)) <= 1e-12)
        assert fitted.predict(0.0) == 0.0
    assert not np.all(np.diff(hits[np.argsort(sizes)]) >= 0)  # the points themselves are not


def test_the_concave_fit_has_decreasing_returns() -> None:
    cliff = curve((100, 0.1), (200, 0.15), (300, 0.8), (400, 0.85))
    hull = MissRatioCurve.fit(sizes_bytes=np.array([100, 200, 300, 400]) * MIB,
                              hit_ratios=[0.1, 0.15, 0.8, 0.85], concave=True)
    dense = np.linspace(0, 500 * MIB, 501)
    assert np.all(np.diff(hull.predict(dense), 2) <= 1e-12)
    assert not np.all(np.diff(cliff.predict(dense), 2) <= 1e-12)  # the cliff is kept without it
    assert np.all(hull.predict(dense) >= cliff.predict(dense) - 1e-12)


def test_zero_and_one_point_rules() -> None:
    none = curve()
    assert none.predict([0, MIB, 1e12]).tolist() == [0.0, 0.0, 0.0]
    assert none.uncertainty([0, MIB]).tolist() == [0.0, 1.0]
    one = curve((64, 0.6))
    assert one.predict(np.array([0, 32, 64, 1000]) * MIB).tolist() == \
        pytest.approx([0.0, 0.3, 0.6, 0.6])
    assert one.uncertainty(np.array([32, 64, 1000]) * MIB).tolist() == \
        pytest.approx([0.3, 0.0, 0.4])


def test_the_uncertainty_bounds_a_monotone_truth_measured_without_noise() -> None:
    truth = synthetic_hit_curve(seed=3, max_bytes=1024 * MIB)
    grid = np.linspace(64, 1024, 7) * MIB
    fitted = MissRatioCurve.fit(sizes_bytes=grid, hit_ratios=truth(grid))
    dense = np.linspace(0, 1024, 1000) * MIB
    assert np.all(np.abs(fitted.predict(dense) - truth(dense)) <= fitted.uncertainty(dense)
                  + 1e-9)


def test_the_pressure_cost_rises_towards_the_need_and_is_infinite_below() -> None:
    gc = PressureCost(need_bytes=256 * MIB, seconds_at_double=1e-3)
    costs = gc.predict(np.array([128, 256, 320, 512, 1024]) * MIB)
    assert costs[:2].tolist() == [math.inf, math.inf]
    assert costs[2:].tolist() == pytest.approx([4e-3, 1e-3, 1e-3 / 3])
    assert gc.uncertainty(512 * MIB) == pytest.approx(0.25e-3)


# ------------------------------------------------------------------ refinement
MAX = 1024 * MIB
GRID = np.arange(1, 97) * MAX / 96
HELD_OUT = (np.arange(96) + 0.5) * MAX / 96  # between the grid's sizes: never measured
SEEDS = range(12)

Sampler = Callable[[Callable[[float], float], int], MissRatioCurve]


def by_strategy(strategy: str) -> Sampler:
    return lambda measure, n: refine(measure, grid_bytes=GRID, budget=n,
                                     strategy=strategy).curve


def lowest_error_first(measure: Callable[[float], float], n: int) -> MissRatioCurve:
    """The opposite rule: measure where the estimated error is *lowest* (a control)."""
    sizes = [float(GRID[0]), float(GRID[-1])]
    hits = [measure(s) for s in sizes]
    while len(sizes) < n:
        fitted = MissRatioCurve.fit(sizes_bytes=sizes, hit_ratios=hits)
        candidates, errors = gap_errors(fitted, GRID, sizes)
        sizes.append(float(candidates[int(np.argmin(errors))]))
        hits.append(measure(sizes[-1]))
    return MissRatioCurve.fit(sizes_bytes=sizes, hit_ratios=hits)


def mean_held_out_error(sampler: Sampler, n: int, noise: float = 0.01) -> float:
    errors = []
    for seed in SEEDS:
        truth = synthetic_hit_curve(seed=seed, max_bytes=MAX)
        rng = np.random.default_rng(10_000 + seed)

        def measure(size: float, truth: Any = truth, rng: Any = rng) -> float:
            return float(np.clip(truth(size) + rng.normal(0, noise), 0, 1))

        errors.append(held_out_error(sampler(measure, n), truth, HELD_OUT))
    return float(np.mean(errors))


def clearly_better(candidate: float, baseline: float) -> bool:
    """The bar error-driven sampling must clear: a quarter below uniform's error."""
    return candidate < 0.75 * baseline


@pytest.mark.parametrize("n", [8, 12])
def test_error_driven_sampling_beats_uniform_sampling_on_held_out_sizes(n: int) -> None:
    error = mean_held_out_error(by_strategy("error"), n)
    uniform = mean_held_out_error(by_strategy("uniform"), n)
    assert clearly_better(error, uniform), (error, uniform)


def test_the_comparison_can_fail_the_opposite_rule_does_not_clear_the_bar() -> None:
    uniform = mean_held_out_error(by_strategy("uniform"), 8)
    assert not clearly_better(mean_held_out_error(lowest_error_first, 8), uniform)
    # with as many measurements as grid sizes both measure everything: no advantage either
    assert not clearly_better(mean_held_out_error(by_strategy("error"), 96, noise=0.0),
                              mean_held_out_error(by_strategy("uniform"), 96, noise=0.0))


def test_refinement_measures_distinct_grid_sizes_within_its_budget() -> None:
    truth = synthetic_hit_curve(seed=0, max_bytes=MAX)
    done = refine(lambda s: float(truth(s)), grid_bytes=GRID, budget=10)
    assert len(done.sizes_bytes) == len(set(done.sizes_bytes)) == 10
    assert set(done.sizes_bytes) <= set(GRID.tolist())
    assert done.sizes_bytes[:2] == (GRID[0], GRID[-1])
    assert held_out_error(done.curve_after(2), truth, HELD_OUT) > \
        held_out_error(done.curve, truth, HELD_OUT)


@pytest.mark.parametrize(
    ("more", "field"),
    [
        ({"budget": 1}, "budget"),
        ({"budget": 97}, "budget"),
        ({"strategy": "random"}, "strategy"),
        ({"grid_bytes": [MIB]}, "grid_bytes"),
    ],
)
def test_bad_refinement_input_names_its_field(more: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"grid_bytes": GRID, "budget": 4, **more}
    with pytest.raises(ValidationError, match=f"^{field}:"):
        refine(lambda s: 0.5, **arguments)


def test_the_synthetic_truth_is_a_hit_ratio_curve() -> None:
    for seed in range(20):
        truth = synthetic_hit_curve(seed=seed, max_bytes=MAX)
        values = truth(np.linspace(0, MAX, 500))
        assert values[0] == pytest.approx(0.0, abs=1e-12)
        assert np.all(np.diff(values) >= 0) and values[-1] < 1


def test_the_miss_cost_fit_recovers_a_linear_cost_and_clips_a_negative_one() -> None:
    """1/ops = base + slope x miss: recovered from windows at three hit ratios; the slope per
    operation reaching the cache is slope / share; a negative slope (noise) buys no cache."""
    hits = [0.5, 0.8, 0.95]
    ops = [1.0 / (1e-4 + 2e-4 * (1 - h)) for h in hits]
    cost = fit_miss_cost(hit_ratios=hits, ops_per_second=ops, share=0.9)
    assert cost.base_seconds == pytest.approx(1e-4) and cost.slope_seconds == pytest.approx(2e-4)
    assert cost.miss_seconds == pytest.approx(2e-4 / 0.9) and cost.r_squared == pytest.approx(1)
    assert cost.ops_per_second(0.8) == pytest.approx(ops[1])
    flat = fit_miss_cost(hit_ratios=hits, ops_per_second=[900.0, 800.0, 700.0], share=0.9)
    assert flat.slope_seconds == 0.0 and flat.miss_seconds == 0.0
    assert flat.base_seconds == pytest.approx(np.mean([1 / 900, 1 / 800, 1 / 700]))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"hit_ratios": [0.5, 0.9], "ops_per_second": [1.0]}, "ops_per_second"),
    ({"hit_ratios": [0.5, 1.5], "ops_per_second": [1.0, 2.0]}, "hit_ratios"),
    ({"hit_ratios": [0.5, 0.9], "ops_per_second": [1.0, 0.0]}, "ops_per_second"),
    ({"hit_ratios": [0.5, 0.5], "ops_per_second": [1.0, 2.0]}, "hit_ratios"),
    ({"hit_ratios": [0.5, 0.9], "ops_per_second": [1.0, 2.0], "share": 0.0}, "share"),
])
def test_a_bad_miss_cost_input_names_its_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=f"^{field}: "):
        fit_miss_cost(**{"share": 0.9, **kwargs})


def test_windows_whose_fit_makes_a_read_free_are_refused() -> None:
    """The memory-split run of 2026-12-03 beside another load: its 48 MiB window was measured
    before the cache had filled, and the fit's base came out at -767 us a read."""
    refused = r"^ops_per_second: .* base of -7\d\d us, not above 0"
    with pytest.raises(ValidationError, match=refused):
        fit_miss_cost(hit_ratios=[0.521, 0.811, 0.910], ops_per_second=[269.0, 1827.0, 2747.0],
                      share=0.9)
