"""How the p99 latency model meets the lab's windows, against two simpler designs.

For every committed calibration record with p99 (inventories/local/calibration/
*-observations.csv), leave one configuration out: fit on the others, predict the held-out
configuration's p99 per mix, score against the geometric mean of its runs' p99
(docs/calibration.md, "Latency"). Three designs:

* ``tail`` (the model's, :class:`planner.model.performance.LatencyTerms`): log(p99 x ops/s) on the
  configuration features, partially pooled; p99 = tail / predicted throughput;
* ``direct``: log p99 on the same features, partially pooled (effects shrunk towards "the
  same p99 everywhere");
* ``littles-law``: the tail per mix only (no configuration term); p99 = tail / predicted
  throughput, i.e. every configuration's p99 from its throughput alone.

Also printed: the throughput's own held-out error and, per record, the range of
p99 x ops/s (requests completed within one p99: in-flight x p99/mean by Little's law).
Run from the repository root::

    OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python bench/latency.py   # ~30 s
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from planner.calibrate import fit_observations
from planner.calibrate.fit import _p99_means, _row_keys
from planner.model.performance import (
    LATENCY_COLUMN,
    MEASURED_COLUMNS,
    POOLED,
    TARGET,
    fit_design,
)
from planner.workload.series import classes_for

CALIBRATION = Path("inventories/local/calibration")


def _mape(actual: list[float], predicted: list[float]) -> float:
    a, p = np.asarray(actual), np.asarray(predicted)
    return float(np.mean(np.abs(p - a) / a))


def _rows(frame: pd.DataFrame, params: list[str], engine: str
          ) -> tuple[list[dict[str, float]], list[dict[str, object]]]:
    classes = classes_for(engine)
    recs = frame.to_dict("records")
    mixes = [{c: float(r[c]) for c in classes} for r in recs]
    configs = [{p: (r[p].item() if isinstance(r[p], np.generic) else r[p]) for p in params}
               for r in recs]
    return mixes, configs


def heldout(df: pd.DataFrame, engine: str) -> dict[str, float]:
    """Leave-one-configuration-out p99 MAPE of the three designs."""
    classes = classes_for(engine)
    df = df.drop(columns=[c for c in MEASURED_COLUMNS if c != LATENCY_COLUMN and c in df])
    params = [c for c in df.columns if c not in (*classes, TARGET, LATENCY_COLUMN)]
    keys = _row_keys(df, params)
    means = _p99_means(df, engine=engine, params=params)
    mean_keys = _row_keys(means, params)
    direct_df = df.drop(columns=TARGET).rename(columns={LATENCY_COLUMN: TARGET})
    tail_df = df.assign(**{TARGET: df[LATENCY_COLUMN] / 1000 * df[TARGET]}).drop(
        columns=[LATENCY_COLUMN, *params])
    out: dict[str, tuple[list[float], list[float]]] = {
        d: ([], []) for d in ("tail", "direct", "littles-law")}
    for key in dict.fromkeys(keys):
        held = np.array([k == key for k in keys])
        test = means[np.array([k == key for k in mean_keys])]
        mixes, configs = _rows(test, params, engine)
        actual = test[LATENCY_COLUMN].to_numpy(dtype=float).tolist()
        model = fit_design(df[~held], engine=engine, design=POOLED)
        direct = fit_design(direct_df[~held], engine=engine, design=POOLED)
        tail = fit_design(tail_df[~held], engine=engine, design="interaction", params=[])
        preds = {
            "tail": [float(model.predict_p99_matrix([m], [c])[0, 0])
                     for m, c in zip(mixes, configs, strict=True)],
            "direct": [direct.predict(m, c).ops_per_s
                       for m, c in zip(mixes, configs, strict=True)],
            "littles-law": [1000 * tail.predict(m, {}).ops_per_s / model.predict(m, c).ops_per_s
                            for m, c in zip(mixes, configs, strict=True)],
        }
        for d, p in preds.items():
            out[d][0].extend(actual)
            out[d][1].extend(p)
    return {d: _mape(a, p) for d, (a, p) in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", nargs="*",
                    help="record names (default: every *-observations.csv with p99_ms)")
    args = ap.parse_args(argv)
    paths = ([CALIBRATION / f"{r}-observations.csv" for r in args.records] if args.records
             else sorted(CALIBRATION.glob("*-observations.csv")))
    print("| record | windows | p99 x ops/s | throughput held-out | p99 held-out: tail (model) "
          "| direct log p99 | Little's law only | p99 in-sample (model) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in paths:
        df = pd.read_csv(path)
        if LATENCY_COLUMN not in df or not df[LATENCY_COLUMN].notna().all():
            continue
        completed = df[LATENCY_COLUMN] / 1000 * df[TARGET]
        name = path.name.removesuffix("-observations.csv")
        engine = name.split("-")[0]  # the records are named <engine>-<what>
        _, report = fit_observations(df, engine=engine)
        scores = heldout(df, engine)
        print(f"| {name} | {len(df)} | {completed.min():.0f}-{completed.max():.0f} | "
              f"{report['heldout_mape']:.1%} | {scores['tail']:.1%} | {scores['direct']:.1%} | "
              f"{scores['littles-law']:.1%} | {report['latency']['in_sample_mape']:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
