"""Planner benchmark: GA vs the DP optimum, and safe batching at scale.

Prints one JSON line per case (run from the repository root)::

    .venv/bin/python bench/planner_bench.py

* ``{"case": "mgrast"|"bus"|"hpc", "decision_points": N, "seconds": s, "gap_to_dp": g, ...}``
  for SOPHIA's three look-aheads (30, 48 and 180 decision points). The problem is built
  as ``kairos plan`` builds it: the synthetic trace of that shape, Cassandra's candidate
  grid (planner.model.spaces), the shipped performance model, the lab ring (3 nodes, RF 3,
  QUORUM -> 3 batches), T_r = 60 s, a 5% survivor penalty and 120 s for a compaction
  strategy change. ``gap_to_dp`` is the
  fraction by which the GA's plan falls short of the DP optimum (0.01 = 1%).
* ``{"case": "batching", "nodes": N, "racks": R, "seconds": s, "batches": B, ...}`` for
  safe_batches at RF 3, QUORUM (seconds for safe_batches alone; building the synthetic
  ring is reported separately): 10, 100 and 1000 nodes with 16 vnodes in 3 racks, and
  1000 nodes with one token each in 3 racks, where whole racks go together and
  ``expected`` is SOPHIA's RF / (RF - CL) = 3; then 24, 48 and 60 nodes with 16 vnodes in
  one rack at QUORUM and at ONE (``"cl"``), small enough for the exact branch and bound
  (``exact`` says whether it finished: the count is then proved minimal); then 1000 nodes
  with 16 vnodes in one rack, where ``before_search`` is first fit / DSATUR's count,
  ``batches`` the tabu search's (issue 17 asks for at most 15 in at most 2 s) and
  ``lower_bound`` the proven bound. ``--seed`` is also the search's seed; ``--repeat N``
  runs that last case N times (``"run"``: 1..N), the same seed, for the spread of its
  timing on a busy machine (the batches are the same every time).

* ``{"case": "scale", "candidates": 512, "decision_points": 720, "build_seconds": s,
  "dp_seconds": s, "ga_seconds": s, "peak_rss_mb": m, ...}`` (issue 42): the problem
  ``kairos plan`` would build over a 512-candidate grid (9 two-valued Cassandra
  parameters, :data:`SCALE_KEYS`) and 720 decision points (12 h of the hpc trace at 60 s),
  with ``served`` ``capacity`` (as the cases above) and ``work`` (``kairos plan``'s
  default, headroom weight 0.5), then the DP and the GA (default options) on it.
  ``build_seconds`` covers the candidates, the restart and change matrices, the
  performance model's capacities, the batches and the problem; ``peak_rss_mb`` is this
  process's peak resident memory so far (``rss_before_mb`` before the build, the
  interpreter and its imports), so run ``--only-scale`` for the case alone. Each time is
  also given as ``*_cpu_seconds``. ``--scale-repeat N`` runs it N times.

Timings are wall clock on whatever else the machine is doing; re-run on a quiet machine.
The batching and scale cases also print ``cpu_seconds`` (this process's CPU time), which a
busy machine inflates less.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from planner.lab import simulator as sm
from planner.model.performance import load_default_model
from planner.model.spaces import get_space
from planner.planning import costbenefit as cb
from planner.planning import optimiser as op
from planner.topology.batching import safe_batches
from planner.topology.ring import Ring
from planner.workload import traces

CASES = (
    # name, generator kwargs, window start, decision points
    ("mgrast", {"steps": 400, "step_seconds": 30.0}, 100, 30),
    ("bus", {"steps": 288 * 2, "step_seconds": 300.0}, 288 + 60, 48),
    ("hpc", {"steps": 600, "step_seconds": 60.0}, 200, 180),
)


def problem_for(name: str, kwargs: dict, start: int, points: int, seed: int) -> cb.PlanningProblem:
    series = traces.GENERATORS[name](seed=seed, **kwargs)
    perf = load_default_model("cassandra")
    candidates = get_space("cassandra").candidates()
    restart = sm.restart_matrix("cassandra", candidates)
    mix = series.mix_matrix()[start : start + points]
    cap = sm.capacity_matrix(perf, mix, candidates)
    batches = safe_batches(
        Ring.simple(["cass1", "cass2", "cass3"], rf=3), consistency_level="QUORUM"
    ).batches
    reconfig = cb.ReconfigModel.from_batches(batches, restart_seconds=60.0, survivor_penalty=0.05)
    assert series.step_seconds is not None  # the generators always set it
    return sm.make_problem(
        cap, restart=restart, reconfig=reconfig, step_seconds=float(series.step_seconds),
        change_seconds=sm.change_seconds_matrix("cassandra", candidates),
    )


#: The scale case's grid: 2^9 = 512 candidates (4 live parameters, 5 restart ones).
SCALE_KEYS = (
    "compaction", "memtable_cleanup_threshold", "concurrent_writes", "concurrent_reads",
    "memtable_flush_writers", "trickle_fsync", "heap_size", "compaction_throughput",
    "row_cache_size",
)
SCALE_POINTS = 720


def _peak_rss_mb() -> float:
    """This process's peak resident set so far (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scale_case(served: cb.Served, seed: int, trace_seed: int) -> dict:
    """512 candidates x 720 decision points: build, DP, GA (see the module docstring)."""
    series = traces.GENERATORS["hpc"](seed=trace_seed, steps=200 + SCALE_POINTS,
                                      step_seconds=60.0)
    rss0 = _peak_rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    perf = load_default_model("cassandra")
    candidates = get_space("cassandra").candidates(keys=SCALE_KEYS, max_configs=512)
    restart = sm.restart_matrix("cassandra", candidates)
    change = sm.change_seconds_matrix("cassandra", candidates)
    mix = series.mix_matrix()[200 : 200 + SCALE_POINTS]
    load = series.load[200 : 200 + SCALE_POINTS]
    cap = sm.capacity_matrix(perf, mix, candidates)
    batches = safe_batches(
        Ring.simple(["cass1", "cass2", "cass3"], rf=3), consistency_level="QUORUM"
    ).batches
    reconfig = cb.ReconfigModel.from_batches(batches, restart_seconds=60.0, survivor_penalty=0.05)
    prob = sm.make_problem(
        cap, restart=restart, reconfig=reconfig, step_seconds=60.0, change_seconds=change,
        load=None if served == "capacity" else load, served=served,
        headroom_weight=0.5 if served == "work" else 0.0,
    )
    t1, c1 = time.perf_counter(), time.process_time()
    dp = op.solve_dp(prob)
    t2, c2 = time.perf_counter(), time.process_time()
    res = op.solve_ga(prob, options=op.GAOptions(seed=seed))
    t3, c3 = time.perf_counter(), time.process_time()
    return {
        "case": "scale", "served": served, "candidates": prob.n_candidates,
        "decision_points": prob.n_steps,
        "build_seconds": round(t1 - t0, 3), "build_cpu_seconds": round(c1 - c0, 3),
        "dp_seconds": round(t2 - t1, 3), "dp_cpu_seconds": round(c2 - c1, 3),
        "ga_seconds": round(t3 - t2, 3), "ga_cpu_seconds": round(c3 - c2, 3),
        "build_dp_ga_seconds": round(t3 - t0, 3), "build_dp_ga_cpu_seconds": round(c3 - c0, 3),
        "peak_rss_mb": round(_peak_rss_mb()), "rss_before_mb": round(rss0),
        "gap_to_dp": round(float((dp.total_ops - res.evaluation.total_ops) / dp.total_ops), 6),
        "dp_switches": len(dp.switches), "ga_switches": len(res.evaluation.switches),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="GA seed")
    parser.add_argument("--trace-seed", type=int, default=1)
    parser.add_argument("--skip-batching", action="store_true")
    parser.add_argument("--only-batching", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of the 1000-node one-rack batching case")
    parser.add_argument("--only-scale", action="store_true",
                        help="only the 512 candidates x 720 decision points case")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--scale-served", choices=("capacity", "work", "both"), default="both")
    parser.add_argument("--scale-repeat", type=int, default=1)
    args = parser.parse_args()
    if args.only_scale:
        run_scale(args)
        return
    for name, kwargs, start, points in () if args.only_batching else CASES:
        prob = problem_for(name, kwargs, start, points, args.trace_seed)
        t0 = time.perf_counter()
        dp = op.solve_dp(prob)
        dp_s = time.perf_counter() - t0
        res = op.solve_ga(prob, options=op.GAOptions(seed=args.seed))
        gap = (dp.total_ops - res.evaluation.total_ops) / dp.total_ops
        stay = op.baseline_default(prob).total_ops
        print(json.dumps({
            "case": name, "decision_points": points, "seconds": round(res.seconds, 3),
            "gap_to_dp": round(float(gap), 6), "dp_seconds": round(dp_s, 4),
            "candidates": prob.n_candidates, "ga_switches": len(res.evaluation.switches),
            "dp_switches": len(dp.switches), "dp_gain_vs_stay": round(dp.total_ops / stay - 1, 4),
            "evaluations": res.evaluations,
        }), flush=True)
    if not args.skip_batching:
        batching_cases(args.seed, args.repeat)
    if not (args.skip_scale or args.only_batching):
        run_scale(args)


def run_scale(args: argparse.Namespace) -> None:
    """The scale case, for each credit mode asked, ``--scale-repeat`` times."""
    modes: tuple[cb.Served, ...] = (
        ("capacity", "work") if args.scale_served == "both" else (args.scale_served,))
    for run in range(1, args.scale_repeat + 1):
        for served in modes:
            print(json.dumps({**scale_case(served, args.seed, args.trace_seed),
                              **({"run": run} if args.scale_repeat > 1 else {})}), flush=True)


def batching_cases(seed: int, repeat: int = 1) -> None:
    """safe_batches on synthetic rings: whole racks, then one rack and the tabu search."""
    rf, need = 3, 2  # QUORUM
    for nodes, vnodes in ((10, 16), (100, 16), (1000, 16), (1000, 1)):
        t0 = time.perf_counter()
        ring = Ring.synthetic(nodes, vnodes=vnodes, rf=rf, racks=3, seed=1)
        ring_s = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        plan = safe_batches(ring, consistency_level="QUORUM", seed=seed)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({
            "case": "batching", "nodes": nodes, "racks": 3, "vnodes": vnodes,
            "seconds": round(secs, 3), "cpu_seconds": round(cpu, 3),
            "batches": len(plan.batches), "expected": -(-rf // (rf - need)),
            "lower_bound": plan.lower_bound, "exact": plan.exact, "ring_seconds": round(ring_s, 3),
            "replica_sets": len(ring.replica_sets), "reason": plan.reasons[0],
        }), flush=True)
    # One rack, small: the branch and bound's proved optimum (or its fallback, exact false).
    for nodes in (24, 48, 60):
        ring = Ring.synthetic(nodes, vnodes=16, rf=rf, racks=1, seed=1)
        for cl in ("QUORUM", "ONE"):
            t0, c0 = time.perf_counter(), time.process_time()
            plan = safe_batches(ring, consistency_level=cl, seed=seed)
            print(json.dumps({
                "case": "batching", "nodes": nodes, "racks": 1, "vnodes": 16, "cl": cl,
                "seconds": round(time.perf_counter() - t0, 3),
                "cpu_seconds": round(time.process_time() - c0, 3), "batches": len(plan.batches),
                "lower_bound": plan.lower_bound, "exact": plan.exact,
            }), flush=True)
    # One rack: no rack structure to exploit; DSATUR's count, then the tabu search's.
    t0 = time.perf_counter()
    ring = Ring.synthetic(1000, vnodes=16, rf=rf, racks=1, seed=1)
    ring_s = time.perf_counter() - t0
    before = safe_batches(ring, consistency_level="QUORUM", search_moves=0)
    for run in range(1, repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = safe_batches(ring, consistency_level="QUORUM", seed=seed)
        print(json.dumps({
            "case": "batching", "nodes": 1000, "racks": 1, "vnodes": 16,
            "seconds": round(time.perf_counter() - t0, 3),
            "cpu_seconds": round(time.process_time() - c0, 3), "batches": len(plan.batches),
            "before_search": len(before.batches), "lower_bound": plan.lower_bound,
            "exact": plan.exact, "seed": seed, "ring_seconds": round(ring_s, 3),
            **({"run": run} if repeat > 1 else {}),
        }), flush=True)


if __name__ == "__main__":
    main()
