"""Partial pooling vs the former all-or-nothing design selection (docs/calibration.md).

SYNTHETIC calibrations shaped like the lab's (3 knobs: compaction STCS/LCS,
concurrent_reads 32/64, memtable_cleanup_threshold 0.333/0.11; the whole grid of 8
configurations x 2 mixes x 2 mirrored sweeps, one run per pair and sweep, log-normal run
noise ``--noise``). Two truths:

* ``effect``: one configuration (STCS, 64, 0.11) is ``--effect`` faster under the
  write-heavy mix, in both sweeps; nothing else matters;
* ``noise``: no setting matters, the same noise.

Each seed's observations are fitted by ``planner.calibrate.fit_observations``. For the
former selection (the lowest leave-one-configuration-out MAPE among interaction, additive
and mix-only, ``selected_by_heldout``), its design is refitted and its predicted effect read;
for the pooled model, the reported effect, interval and whether the interval excludes zero.
Prints one JSON line per (truth, seed) and a summary (run from the repository root)::

    nice -n 19 .venv/bin/python bench/pooling.py            # ~2 min on one core
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from typing import Any

import numpy as np
import pandas as pd

from planner.calibrate import MIX_ONLY, fit_observations
from planner.model.performance import fit_design

STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"
RH = {"read": 0.9, "update": 0.1, "insert": 0.0, "scan": 0.0}
WH = {"read": 0.1, "update": 0.9, "insert": 0.0, "scan": 0.0}
ORIGINAL = {"compaction": STCS, "concurrent_reads": 32, "memtable_cleanup_threshold": 0.333}
SPECIAL = {"compaction": STCS, "concurrent_reads": 64, "memtable_cleanup_threshold": 0.11}
WH_LABEL = "read=0.1, update=0.9"


def observations(seed: int, *, effect: float, noise: float) -> pd.DataFrame:
    """The grid (the original first), both mixes, two mirrored sweeps (SYNTHETIC)."""
    rng = np.random.default_rng(seed)
    grid = [dict(zip(ORIGINAL, v, strict=True)) for v in itertools.product(
        (STCS, LCS), (32, 64), (0.333, 0.11))]
    rows = []
    for config, mix in [(c, m) for c in grid for m in (RH, WH)] * 2:
        log_ops = mix["read"] * math.log(1000) + mix["update"] * math.log(1300)
        if config == SPECIAL and mix is WH:
            log_ops += math.log1p(effect)
        rows.append({**mix, **config, "ops_per_s": math.exp(log_ops + rng.normal(0, noise))})
    return pd.DataFrame(rows)


def one(seed: int, *, effect: float, noise: float) -> dict[str, Any]:
    df = observations(seed, effect=effect, noise=noise)
    model, report = fit_observations(df, engine="cassandra")
    assert model is not None
    old = report["selected_by_heldout"]
    if old == MIX_ONLY:
        old_effect = 0.0
    else:
        old_model = fit_design(df, engine="cassandra", design=old)
        old_effect = (old_model.predict(WH, SPECIAL).ops_per_s
                      / old_model.predict(WH, ORIGINAL).ops_per_s - 1)
    ours = next(e for e in report["effects"]
                if e["config"] == SPECIAL and e["mix"] == WH_LABEL)
    return {
        "seed": seed, "old_design": old, "old_effect": old_effect,
        "old_heldout": report["candidates"][old],
        "pooled_effect": ours["effect"], "pooled_interval": ours["interval"],
        "pooled_excludes_zero": ours["excludes_zero"],
        "pooled_heldout": report["heldout_mape"],
        "effects_excluding_zero": report["effects_excluding_zero"],
        "max_abs_effect": max(abs(e["effect"]) for e in report["effects"]),
        "tau": report["tau"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--effect", type=float, default=0.25)
    ap.add_argument("--noise", type=float, default=0.03)
    args = ap.parse_args()
    for truth, effect in (("effect", args.effect), ("noise", 0.0)):
        runs = [one(s, effect=effect, noise=args.noise) for s in range(args.seeds)]
        for r in runs:
            print(json.dumps({"truth": truth, **r}))
        kept_old = sum(abs(r["old_effect"]) > 0.05 for r in runs)
        chosen = {d: sum(r["old_design"] == d for r in runs)
                  for d in ("interaction", "additive", MIX_ONLY)}
        print(f"# {truth} (true effect {effect:+.0%}, noise {args.noise:.0%}, "
              f"{args.seeds} seeds): former selection chose "
              f"{chosen}, "
              f"predicted effect median {np.median([r['old_effect'] for r in runs]):+.1%} "
              f"(|effect| > 5 % in {kept_old}), held-out MAPE mean "
              f"{np.mean([r['old_heldout'] for r in runs]):.2%}; pooled: effect median "
              f"{np.median([r['pooled_effect'] for r in runs]):+.1%} "
              f"[{min(r['pooled_effect'] for r in runs):+.1%}, "
              f"{max(r['pooled_effect'] for r in runs):+.1%}], interval excludes zero in "
              f"{sum(r['pooled_excludes_zero'] for r in runs)}, any of the 14 effects "
              f"excludes zero in {sum(r['effects_excluding_zero'] > 0 for r in runs)}, "
              f"largest |effect| median {np.median([r['max_abs_effect'] for r in runs]):.1%}, "
              f"held-out MAPE mean {np.mean([r['pooled_heldout'] for r in runs]):.2%}",
              flush=True)


if __name__ == "__main__":
    main()
