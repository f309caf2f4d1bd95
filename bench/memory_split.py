"""PYTHONPATH=$PWD nice -n 19 .venv/bin/python bench/memory_split.py   (~10 s on one core)

The memory split (planner/model/memory_split.py, issue 43 part 1) on SYNTHETIC models: nothing
here is measured on the lab. Three tables, run from the repository root:

1. **Optimiser against brute force.** A lab-shaped Cassandra node (1536 MiB envelope,
   256 MiB non-heap overhead, a 300 MiB live set) split on grids of 64 down to 1 MiB:
   the dynamic programme's time (median of 5) and the enumeration's (median of 3; skipped when
   it would score more than ``--max-splits`` combinations), the number of feasible
   splits, whether both found the same predicted time per operation, and the split.
2. **Refinement of one curve.** A hidden hit-ratio curve (``synthetic_hit_curve``: a
   concave part plus a working-set cliff) measured with Gaussian noise ``--noise`` on a
   grid of 96 sizes; the mean absolute error over 96 held-out sizes (between the grid's)
   after n measurements, error-driven (``refine(strategy="error")``) against uniform, the
   mean over ``--seeds`` seeds.
3. **What the curves cost the decision.** Each of the node's three caches gets a hidden
   curve; n measurements of each are refined either way, the split is optimised on the
   fitted curves and scored on the hidden ones: the regret, in % of the best split's
   predicted time per operation, mean over the seeds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from planner.errors import ValidationError
from planner.model.memory_split import (
    MIB,
    CacheEffect,
    CassandraMemoryModels,
    MemoryBudget,
    MissRatioCurve,
    PressureCost,
    brute_force_split,
    evaluate_split,
    held_out_error,
    optimise_split,
    refine,
    synthetic_hit_curve,
)

MIX = {"read": 0.6, "update": 0.2, "insert": 0.1, "scan": 0.1}
GC = PressureCost(need_bytes=300 * MIB, seconds_at_double=0.0005)
MISS_SECONDS = {"key_cache": 0.0007, "row_cache": 0.0004, "page_cache": 0.0007}
#: The largest size each cache can take on the lab node (half a 1280 MiB heap for the key
#: cache; what a 512M heap leaves for the others).
MAX_MIB = {"key_cache": 640, "row_cache": 768, "page_cache": 768}
COUNTS = (3, 4, 6, 8, 10, 12, 16, 24)


def budget(unit_mib: int) -> MemoryBudget:
    return MemoryBudget(engine="cassandra", total_bytes=1536 * MIB, overhead_bytes=256 * MIB,
                        unit_bytes=unit_mib * MIB)


def models(curves: dict[str, MissRatioCurve]) -> CassandraMemoryModels:
    return CassandraMemoryModels(
        gc=GC, **{name: CacheEffect(curves[name], MISS_SECONDS[name]) for name in curves}
    )


def exact_curve(truth: Callable[[Any], Any], max_mib: int) -> MissRatioCurve:
    """The hidden curve as the optimiser sees it: exact at every MiB."""
    sizes = np.arange(1, max_mib + 1) * MIB
    return MissRatioCurve.fit(sizes_bytes=sizes, hit_ratios=truth(sizes))


def hidden(seed: int) -> dict[str, Callable[[Any], Any]]:
    return {name: synthetic_hit_curve(seed=1000 * i + seed, max_bytes=MAX_MIB[name] * MIB)
            for i, name in enumerate(MAX_MIB)}


def noisy(truth: Callable[[Any], Any], rng: np.random.Generator, noise: float) -> Any:
    return lambda size: float(np.clip(truth(size) + rng.normal(0, noise), 0, 1))


def optimiser_table(max_splits: int) -> None:
    truths = hidden(0)
    lab = models({name: exact_curve(truths[name], MAX_MIB[name]) for name in truths})
    print("1. optimiser against brute force (Cassandra, 1536 MiB, 256 MiB overhead)")
    print(f"{'unit':>7} {'DP ms':>9} {'brute ms':>10} {'splits':>10}  same figure")
    for unit in (64, 32, 16, 8, 4, 1):
        times = []
        for _ in range(5):
            start = time.perf_counter()
            dp = optimise_split(budget=budget(unit), models=lab, mix=MIX)
            times.append(time.perf_counter() - start)
        b = budget(unit)
        try:
            brute_times = []
            for _ in range(3):
                start = time.perf_counter()
                brute = brute_force_split(budget=b, models=lab, mix=MIX, max_splits=max_splits)
                brute_times.append(time.perf_counter() - start)
            brute_ms = f"{np.median(brute_times) * 1e3:10.1f}"
            same = "yes" if np.isclose(brute.seconds_per_op, dp.seconds_per_op,
                                       rtol=1e-12) else "NO"
        except ValidationError:  # more combinations than --max-splits
            brute_ms, same = f"{'skipped':>10}", "-"
        print(f"{unit:>4}MiB {np.median(times) * 1e3:9.2f} {brute_ms} {_splits(b):>10}  "
              f"{same:<4} {dp.config()}")


def _splits(b: MemoryBudget) -> int:
    """Feasible (heap, key, row) splits on the grid (heap >= 512M, key inside half of it)."""
    lo = 512 * MIB // b.unit_bytes
    return sum(int((1 - b.heap_headroom) * h) * (b.units - h + 1) for h in range(lo, b.units + 1))


#: The two ways of refining a curve that tables 2 and 3 compare (``refine(strategy=...)``).
STRATEGIES = ("error", "uniform")


def mean_by_strategy(seeds: int, rng_base: int,
                     score: Callable[[int, str, np.random.Generator], float]
                     ) -> dict[str, float]:
    """Each strategy's mean over the seeds of ``score(seed, strategy, rng)``; both
    strategies see the same noise (a generator seeded ``rng_base + seed`` each)."""
    return {strategy: float(np.mean([score(seed, strategy, np.random.default_rng(rng_base + seed))
                                     for seed in range(seeds)]))
            for strategy in STRATEGIES}


def refinement_table(seeds: int, noise: float) -> None:
    top = 1024 * MIB
    grid = np.arange(1, 97) * top / 96
    held_out = (np.arange(96) + 0.5) * top / 96
    print(f"\n2. held-out error of one curve (mean |h - h_true| over 96 sizes), {seeds} seeds, "
          f"noise {noise}")
    print(f"{'n':>3} {'error-driven':>13} {'uniform':>9} {'ratio':>6}")
    for n in COUNTS:

        def error(seed: int, strategy: str, rng: np.random.Generator, n: int = n) -> float:
            truth = synthetic_hit_curve(seed=seed, max_bytes=top)
            done = refine(noisy(truth, rng, noise), grid_bytes=grid, budget=n, strategy=strategy)
            return held_out_error(done.curve, truth, held_out)

        mean = mean_by_strategy(seeds, 10_000, error)
        e, u = mean["error"], mean["uniform"]
        print(f"{n:>3} {e:13.4f} {u:9.4f} {e / u:6.2f}")


def regret_table(seeds: int, noise: float) -> None:
    b = budget(16)
    print(f"\n3. regret of the split chosen from n measurements per cache (16 MiB grid), "
          f"{seeds} seeds, noise {noise}")
    print(f"{'n':>3} {'error-driven %':>15} {'uniform %':>10}")
    for n in COUNTS:

        def regret(seed: int, strategy: str, rng: np.random.Generator, n: int = n) -> float:
            truths = hidden(seed)
            true_models = models({k: exact_curve(t, MAX_MIB[k]) for k, t in truths.items()})
            best = optimise_split(budget=b, models=true_models, mix=MIX).seconds_per_op
            fitted = {k: refine(noisy(t, rng, noise),
                                grid_bytes=np.arange(1, MAX_MIB[k] // 16 + 1) * 16 * MIB,
                                budget=n, strategy=strategy).curve
                      for k, t in truths.items()}
            chosen = optimise_split(budget=b, models=models(fitted), mix=MIX)
            scored = evaluate_split(budget=b, models=true_models, mix=MIX,
                                    sizes_bytes=chosen.sizes_bytes)
            return 100 * (scored.seconds_per_op / best - 1)

        mean = mean_by_strategy(seeds, 20_000, regret)
        print(f"{n:>3} {mean['error']:15.2f} {mean['uniform']:10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--max-splits", type=int, default=2_000_000)
    args = parser.parse_args()
    optimiser_table(args.max_splits)
    refinement_table(args.seeds, args.noise)
    regret_table(args.seeds, args.noise)


if __name__ == "__main__":
    main()
