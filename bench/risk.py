"""Risk objectives compared: mean vs lower quantile vs ENDURE worst case (docs/planning.md).

For each synthetic trace shape (SOPHIA's three, planner/workload/traces.py) and trace seed, the
history up to a cut point is forecast (the shape's forecaster) and planned with the shipped
prior model exactly as ``kairos plan`` does (make_plan, DP, confidence rule at 0.9), once
per ``--risk`` objective. Each plan is then valued out of sample:

* on 500 *fresh* joint scenarios (forecast path x model draw, another seed): the mean net
  gain over staying put, its 10% quantile, and the share of scenarios where the plan loses;
* on the *truth*: the trace's real continuation, valued with a "true" model drawn once
  from the prior (the planner never sees it).

``endure-kl`` rows also print the KL radius the forecast's backtest learnt.

Prints one JSON line per (case, risk) and a summary table (run from the repository root)::

    .venv/bin/python bench/risk.py            # ~1-2 min on 2 busy cores
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from planner.model.performance import load_default_model
from planner.planning import risk as rk
from planner.planning.costbenefit import evaluate
from planner.planning.pipeline import (
    OptimiserOptions,
    PlanRequest,
    _candidates,
    _current,
    _switch_costs,
    make_plan,
)
from planner.topology.batching import safe_batches
from planner.topology.ring import Ring
from planner.workload import traces

CASES = (
    # shape, generator kwargs, cut (history length), horizon, forecaster
    ("mgrast", {"steps": 900, "step_seconds": 30.0}, 720, 30, "markov1"),
    ("bus", {"steps": 288 * 5, "step_seconds": 300.0}, 288 * 4 + 60, 48, "seasonal_naive"),
    ("hpc", {"steps": 600, "step_seconds": 60.0}, 400, 120, "markov1"),
)
RISKS = ("mean", "quantile", "endure", "endure-kl")


def _truth_value(req: PlanRequest, result, series, cut: int, horizon: int, rng) -> float:  # type: ignore[no-untyped-def]
    """Net gain of the plan's schedule on the real continuation with a drawn 'true' model."""
    perf = load_default_model("cassandra")
    candidates = _candidates("cassandra", _current(req), req.tables, lambda _m: None)
    mix = series.mix_matrix()[cut : cut + horizon]
    load = series.load[cut : cut + horizon]
    cap = perf.sample_capacity(mix, candidates, n=1, rng=rng)[0]
    batches = safe_batches(Ring.simple(["cass1", "cass2", "cass3"], rf=3),
                           consistency_level="QUORUM").batches
    costs = _switch_costs(req, candidates, batches, float(series.step_seconds))
    truth = costs.problem(cap, load=load)
    return evaluate(truth, result.evaluation.schedule).net_ops


def run_case(name: str, kwargs: dict, cut: int, horizon: int, fmodel: str, seed: int,
             true_models: int) -> list[dict]:
    series = traces.GENERATORS[name](seed=seed, **kwargs)
    history = series.slice(0, cut)
    fc = None
    rows = []
    for risk in RISKS:
        req = PlanRequest(
            forecast=fc, trace=None if fc is not None else history, forecast_model=fmodel,
            horizon=horizon, restart_seconds=60.0, risk=risk,  # type: ignore[arg-type]
            optimiser=OptimiserOptions(method="dp", seed=0),
            served="capacity",  # SOPHIA's traces: saturated clients (the docs' figures)
        )
        res = make_plan(req)
        fc = res.forecast
        # out of sample: fresh scenarios, priced like the plan
        perf = load_default_model("cassandra")
        candidates = _candidates("cassandra", _current(req), (), lambda _m: None)
        batches = safe_batches(Ring.simple(["cass1", "cass2", "cass3"], rf=3),
                               consistency_level="QUORUM").batches
        costs = _switch_costs(req, candidates, batches, float(fc.step_seconds))
        h = min(horizon, fc.horizon)
        wcap, wload = rk.sample_world(forecast=fc, model=perf, candidates=candidates,
                                      horizon=h, n=500, rng=np.random.default_rng(1000 + seed))
        sc = rk.make_scenarios(wcap, wload, costs)
        stay = sc.values(np.zeros(h, dtype=np.int64))
        gain = sc.values(res.evaluation.schedule) - stay
        truth = [_truth_value(req, res, series, cut, h, np.random.default_rng(7000 + i))
                 for i in range(true_models)]
        rows.append({
            "case": name, "trace_seed": seed, "risk": risk, "steps": len(res.plan.steps),
            "restarts": sum(1 for s in res.plan.steps if s.restart),
            "planned_net": round(res.evaluation.net_ops),
            "oos_mean_net": round(float(gain.mean())),
            "oos_q10_net": round(float(np.quantile(gain, 0.1))),
            "oos_p_loss": round(float(np.mean(gain < 0)), 3),
            "truth_mean_net": round(float(np.mean(truth))),
            "truth_worst_net": round(float(np.min(truth))),
            "kl_radius": res.plan.provenance["uncertainty"].get("kl_radius"),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-seeds", default="1,2", help="comma-separated trace seeds")
    parser.add_argument("--true-models", type=int, default=20,
                        help="true models drawn from the prior to value each plan on")
    args = parser.parse_args()
    rows = []
    for seed in (int(s) for s in args.trace_seeds.split(",")):
        for name, kwargs, cut, horizon, fmodel in CASES:
            for row in run_case(name, kwargs, cut, horizon, fmodel, seed, args.true_models):
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| case | seed | risk | steps (restarts) | out-of-sample mean | 10% quantile "
          "| P(loss) | truth mean | truth worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['trace_seed']} | {r['risk']} | {r['steps']} ({r['restarts']}) "
              f"| {r['oos_mean_net'] / 1e6:.2f}M | {r['oos_q10_net'] / 1e6:.2f}M "
              f"| {r['oos_p_loss']:.3f} | {r['truth_mean_net'] / 1e6:.2f}M "
              f"| {r['truth_worst_net'] / 1e6:.2f}M |"
              + (f" KL radius {r['kl_radius']:.3f}" if r["kl_radius"] is not None else ""))


if __name__ == "__main__":
    main()
