"""Bayesian optimisation against the maximin + uncertainty design, on the same run budget.

SYNTHETIC (not a measurement): a calibration is run by ``planner.calibrate.run_calibration``
(the loop ``kairos calibrate`` runs) against a synthetic bench instead of the cluster, once
per design and seed, over two grids of the real Cassandra calibration space
(``planner.calibrate.space``, the running configuration STCS, 32, 32, 0.33, heap_buffers):

* ``default``: ``kairos calibrate`` without ``--param`` (the space's grid keys over their
  candidate values): compaction x memtable_cleanup_threshold x concurrent_writes x
  concurrent_reads, 16 configurations;
* ``seeds/002``: compaction STCS/LCS, concurrent_reads and concurrent_writes 16/32/64/128,
  memtable_cleanup_threshold 0.11/0.2/0.33, memtable_allocation_type
  heap_buffers/offheap_objects, 192 configurations.

The truth, drawn per seed: log ops/s = the mix's fractions times each class's (read, update)
log throughput, 1,000 and 1,300 ops/s at the base, plus per class one **large** effect (one
parameter: +15..30 % times its closeness to one level) and one **interaction** (two other
parameters: +10..20 % times the product of their closeness to one level each, so it pays
only when both are near it); the class's remaining parameters are **null** (1 of 4 in the
default grid, 2 of 5 in seeds/002). Closeness is 1 at the level; a numeric parameter's falls
off quadratically with the rank distance (0 at the far end of its range), an enum's is 0 at
any other level. Which parameter plays which part, and the levels, are drawn per seed and
class. Each run is the truth times a log-normal noise of ``--noise`` (7 %: the lab's runs
spread 4-8 %), the same draw for the same (seed, configuration, mix) whichever design
measures it. Each design starts with the original and space-filling points up to its default
``--initial`` (``planner.calibrate.design.default_initial``: parameters + 1 for maximin, 3
for bo), then chooses by its own rule. The first k configurations of a run are what a k-run
budget measures (the choice never looks at the budget), so one run to the largest budget
gives every budget.

Per (grid, budget, design), over the seeds: the **regret** (how far below the true best
the configuration picked as best delivers, mean of the two mixes; median and IQR) of
(a) the best measured configuration (``best_by_mix``, what ``kairos calibrate`` reports) and
(b) the fitted pooled model's best over the whole grid (what a plan with ``model.json``
moves to); how often (a) is the true best in both mixes; and the pooled model's error on the
configurations never measured (MAPE against the truth, both mixes; median). Then, seed by
seed, bo's regret minus maximin's. Run from the repository root (about 1 min of CPU)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python bench/design.py
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from planner import calibrate as cal
from planner.calibrate import design as calibrate_design
from planner.errors import ValidationError
from planner.model import performance as perfmodel
from planner.model.spaces import get_space

RUNNING = {"compaction": "SizeTieredCompactionStrategy", "concurrent_reads": 32,
           "concurrent_writes": 32, "memtable_cleanup_threshold": 0.33,
           "memtable_allocation_type": "heap_buffers"}
SEEDS_002 = ["compaction=SizeTieredCompactionStrategy,LeveledCompactionStrategy",
             "concurrent_reads=16,32,64,128", "concurrent_writes=16,32,64,128",
             "memtable_cleanup_threshold=0.11,0.2,0.33",
             "memtable_allocation_type=heap_buffers,offheap_objects"]
BASE = {"read": math.log(1000.0), "update": math.log(1300.0)}
DESIGNS = ("maximin", "bo")


def grids() -> dict[str, cal.CalibrationSpace]:
    out = {}
    for name, levels in (("default", cal.default_levels("cassandra")),
                         ("seeds/002", cal.parse_levels(SEEDS_002, "cassandra"))):
        out[name] = cal.make_space("cassandra", levels, {k: RUNNING[k] for k in levels})
    return out


class Truth:
    """A response surface drawn for one seed (SYNTHETIC; see the module docstring).

    Per class, a list of terms ``(amplitude, {parameter: {level: weight in [0, 1]}})``: the
    term adds ``amplitude x`` the product of its parameters' weights to log throughput.
    """

    def __init__(self, space: cal.CalibrationSpace, seed: int) -> None:
        rng = np.random.default_rng([seed, 2])
        params = list(space.params)
        self.terms: dict[str, list[tuple[float, dict[str, dict[Any, float]]]]] = {}
        for cls in BASE:
            large, a, b = (params[i] for i in rng.permutation(len(params))[:3])
            self.terms[cls] = [
                (float(rng.uniform(0.15, 0.30)), {large: self._bump(space, large, rng)}),
                (float(rng.uniform(0.10, 0.20)), {a: self._bump(space, a, rng),
                                                  b: self._bump(space, b, rng)}),
            ]

    @staticmethod
    def _bump(space: cal.CalibrationSpace, name: str, rng: np.random.Generator
              ) -> dict[Any, float]:
        """1 at a random level; a numeric parameter falls off quadratically with the rank
        distance from it (0 at the far end of its range), an enum is 0 elsewhere."""
        levels = space.levels[name]
        peak = int(rng.integers(len(levels)))
        if get_space(space.engine)[name].type in ("enum", "bool"):
            return {lv: float(j == peak) for j, lv in enumerate(levels)}
        span = max(1, len(levels) - 1)
        return {lv: 1 - ((j - peak) / span) ** 2 for j, lv in enumerate(levels)}

    def log_ops(self, config: Mapping[str, Any], mix: Mapping[str, float]) -> float:
        total = 0.0
        for cls, base in BASE.items():
            gain = sum(amp * math.prod(w[config[k]] for k, w in parts.items())
                       for amp, parts in self.terms[cls])
            total += mix.get(cls, 0.0) * (base + gain)
        return total


class Bench:
    """The cluster stand-in: the truth times a log-normal run noise keyed by (seed,
    configuration, mix, run), so both designs see the same run of the same pair."""

    def __init__(self, truth: Truth, seed: int, noise: float) -> None:
        self.truth, self.seed, self.noise = truth, seed, noise
        self.running: dict[str, Any] = {}
        self.runs: dict[tuple[str, str], int] = {}

    def apply(self, changes: Mapping[str, Any]) -> None:
        self.running.update(changes)

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool,
                name: str = "") -> None:
        pass

    def measure(self, mix: Mapping[str, float], name: str = "") -> dict[str, Any]:
        key = cal.config_key(self.running)
        label = cal.config_key(mix)
        n = self.runs[(key, label)] = self.runs.get((key, label), 0) + 1
        rng = np.random.default_rng([self.seed, zlib.crc32(key.encode()),
                                     zlib.crc32(label.encode()), n])
        log_ops = self.truth.log_ops(self.running, mix) + rng.normal(0.0, self.noise)
        return {"ops_per_s": math.exp(log_ops), "failed": 0}

    def expected_seconds(self, changes: Mapping[str, Any], n_mixes: int) -> float:
        return 60.0 * n_mixes


def calibrate(space: cal.CalibrationSpace, truth: Truth, *, design: str, seed: int, runs: int,
              initial: int, noise: float, tmp: Path) -> cal.CalibrationState:
    """One synthetic calibration of ``runs`` configurations with ``design``."""
    original = {k: RUNNING[k] for k in space.params}
    state = cal.CalibrationState(engine="cassandra", levels=space.to_dict(),
                             mixes=dict(cal.DEFAULT_MIXES), seed=seed, original=original,
                             applied=dict(original), design_strategy=design)
    bench = Bench(truth, seed, noise)
    bench.running.update(original)
    cal.run_calibration(state, bench=bench, budget=cal.Budget(runs=runs), initial=initial,
                    state_path=tmp / "state.json", observations_path=tmp / "obs.csv",
                    log=lambda _msg: None)
    return state


def score(state: cal.CalibrationState, truth: Truth, budget: int) -> dict[str, Any]:
    """Regrets of the two picks and the pooled model's error on the unmeasured grid, from
    the first ``budget`` configurations of ``state``."""
    space, mixes = state.space, list(state.mixes.values())
    grid = space.grid()
    design = state.design[:budget]
    keys = {cal.config_key(c) for c in design}
    sub = cal.CalibrationState(**{**vars(state), "design": design, "measurements": [
        m for m in state.measurements if cal.config_key(m["config"]) in keys]})
    true = np.array([[truth.log_ops(c, mix) for c in grid] for mix in mixes])
    best = true.max(axis=1)
    idx = {cal.config_key(c): i for i, c in enumerate(grid)}
    measured = np.full(true.shape, -np.inf)
    for m in sub.measurements:
        measured[list(state.mixes).index(m["mix"]), idx[cal.config_key(m["config"])]] = \
            math.log(m["ops_per_s"])
    pick = measured.argmax(axis=1)
    regret = 1 - np.exp(true[np.arange(len(mixes)), pick] - best)
    out: dict[str, Any] = {"regret": float(regret.mean()),
                           "found": bool((regret < 1e-12).all())}
    try:
        model = perfmodel.fit_design(cal.observations_frame(sub), engine="cassandra",
                                     design=perfmodel.POOLED)
    except ValidationError:
        return {**out, "model_regret": math.nan, "heldout": math.nan}
    pred, _ = model.predict_log(model.mix_matrix(mixes), model.config_matrix(grid))
    pred = np.asarray(pred)
    m_pick = pred.argmax(axis=1)
    m_regret = 1 - np.exp(true[np.arange(len(mixes)), m_pick] - best)
    unseen = np.array([cal.config_key(c) not in keys for c in grid])
    err = np.abs(np.exp(pred[:, unseen] - true[:, unseen]) - 1)
    return {**out, "model_regret": float(m_regret.mean()),
            "heldout": float(err.mean()) if unseen.any() else math.nan}


def _q(values: list[float]) -> str:
    """Median [IQR] of percentages."""
    v = np.array([x for x in values if not math.isnan(x)])
    if not len(v):
        return "-"
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return f"{med:.1%} [{q1:.1%}, {q3:.1%}]"


def run_grid(name: str, space: cal.CalibrationSpace, args: argparse.Namespace,
             budgets: list[int]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """Every seed's calibration with each design on ``space``, scored at each budget."""
    size = len(space.grid())
    rows: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        truth = Truth(space, seed)
        for design in DESIGNS:
            with tempfile.TemporaryDirectory() as tmp:
                state = calibrate(space, truth, design=design, seed=seed,
                                  runs=min(max(budgets), size),
                                  initial=args.initial or calibrate_design.default_initial(
                                      len(space.params), design),
                                  noise=args.noise, tmp=Path(tmp))
            for b in budgets:
                if b <= size:
                    rows.setdefault((b, design), []).append(score(state, truth, b))
    return rows


def print_tables(results: dict[str, dict[tuple[int, str], list[dict[str, Any]]]]) -> None:
    print("| grid | runs | design | regret, best measured | true best found | "
          "regret, model's best | model error, unmeasured |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        for (b, design), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "bo")):
            print(f"| {name} | {b} | {design} | {_q([r['regret'] for r in rs])} | "
                  f"{sum(r['found'] for r in rs)} / {len(rs)} | "
                  f"{_q([r['model_regret'] for r in rs])} | {_q([r['heldout'] for r in rs])} |")
    print()
    print("| grid | runs | bo - maximin, regret of the best measured: mean (median) | "
          "bo lower / equal / higher (seeds) | same for the model's best |")
    print("| --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        for b in sorted({b for b, _ in rows}):
            line = [name, str(b)]
            for key in ("regret", "model_regret"):
                d = np.array([x[key] - y[key] for x, y in zip(rows[(b, "bo")],
                                                              rows[(b, "maximin")],
                                                              strict=True)])
                d = d[~np.isnan(d)]
                tie = np.abs(d) < 1e-12
                if key == "regret":
                    line.append(f"{np.mean(d):+.1%} ({np.median(d):+.1%})")
                line.append(f"{int((d < 0)[~tie].sum())} / {int(tie.sum())} / "
                            f"{int((d > 0)[~tie].sum())}")
            print("| " + " | ".join(line) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--budgets", default="8,12,16")
    ap.add_argument("--noise", type=float, default=0.07)
    ap.add_argument("--initial", type=int, default=0,
                    help="space-filling configurations, the original included (default: "
                    "as the CLI, planner.calibrate.design.default_initial)")
    ap.add_argument("--grids", default="default,seeds/002")
    args = ap.parse_args()
    budgets = sorted(int(b) for b in args.budgets.split(","))
    t0 = time.monotonic()
    print(f"# SYNTHETIC: seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, run "
          f"noise {args.noise:.0%}, budgets {budgets}; regret = 1 - true(pick) / true(best), "
          "mean of the two mixes, median [IQR] over the seeds")
    results = {}
    for name, space in grids().items():
        if name in args.grids.split(","):
            results[f"{name} ({len(space.grid())})"] = run_grid(name, space, args, budgets)
    print_tables(results)
    print(f"# {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
