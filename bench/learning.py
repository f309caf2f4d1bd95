"""The production offset vs the former "append the window to the calibration and refit".

SYNTHETIC production shaped like the lab's measurement (issue 15): the lab's calibrated
model (inventories/local/calibration/cassandra-model.json, 32 bench rows, 64 requests in
flight) predicts 1,024 ops/s for a read-heavy mix; the closed loop of 256 served 1,436,
x1.40. Here production serves ``--factor`` x the model's prediction, with log-normal
window noise ``--noise``, under the lab's running configuration, window after window.

Before each window, each approach's model predicts it; the window is then learnt:

* ``refit``: the window appended to a copy of the calibration's observations and the
  model refitted (``fit_model(design="pooled")``), what planner/autopilot/learning.py did before;
* ``offset``: the lab model plus the production offset learnt from the windows so far
  (:func:`planner.autopilot.learning.learn`).

Prints, per window, the mean over seeds of each approach's absolute error (|served /
predicted - 1|) and of the offset's standard error at the mix (log scale), run from the
repository root::

    nice -n 19 .venv/bin/python bench/learning.py            # ~10 s on one core
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.autopilot.learning import learn
from planner.model.performance import PerformanceModel, fit_model, load_model

CALIBRATION = Path("inventories/local/calibration")
MIX = {"read": 0.9, "update": 0.1, "insert": 0.0, "scan": 0.0}
CONFIG = {"compaction": "SizeTieredCompactionStrategy", "concurrent_reads": 32,
          "memtable_cleanup_threshold": 0.33333334}


def window(served: float) -> dict[str, Any]:
    """A capacity judgement of one production window, as the track keeps it."""
    return {"kind": "capacity", "mix": MIX, "config": CONFIG, "served_ops_per_s": served}


def run(seed: int, *, windows: int, factor: float, noise: float) -> list[dict[str, float]]:
    """Each approach's error on each window, before learning it (one seed)."""
    rng = np.random.default_rng(seed)
    base = load_model(CALIBRATION / "cassandra-model.json")
    table = pd.read_csv(CALIBRATION / "cassandra-observations.csv")
    truth = base.predict(MIX, CONFIG).ops_per_s * factor
    refit: PerformanceModel = base
    offset: PerformanceModel = base
    seen: list[dict[str, Any]] = []
    out = []
    for _ in range(windows):
        served = truth * math.exp(rng.normal(0.0, noise))
        row: dict[str, float] = {
            "refit": abs(served / refit.predict(MIX, CONFIG).ops_per_s - 1),
            "offset": abs(served / offset.predict(MIX, CONFIG).ops_per_s - 1)}
        table = pd.concat([table, pd.DataFrame([{**MIX, **CONFIG, "ops_per_s": served}])],
                          ignore_index=True)
        refit = fit_model(table, engine="cassandra", design="pooled")[0]
        seen.append(window(served))
        learnt = learn(base, seen)
        assert learnt is not None
        offset, estimate = learnt
        row["offset_se"] = estimate.at(base.mix_matrix([MIX])[0])[1]
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--factor", type=float, default=1436 / 1024)
    parser.add_argument("--noise", type=float, default=0.05)
    args = parser.parse_args(argv)
    runs = [run(s, windows=args.windows, factor=args.factor, noise=args.noise)
            for s in range(args.seeds)]
    for k in range(args.windows):
        rows = [r[k] for r in runs]
        print(json.dumps({"window": k + 1, **{key: round(float(np.mean([r[key] for r in rows])),
                                                          4) for key in rows[0]}}))


if __name__ == "__main__":
    main()
