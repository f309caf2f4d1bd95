"""A plan as people read it: what ``kairos explain`` prints and the autopilot tick logs.

:func:`explain_text` summarises a validated plan (horizon, availability, provenance, each
step's changes, batches and expected gain) with, given a ring, each batch's safety
(:func:`planner.topology.batch_safety.batch_safety`).
"""

from __future__ import annotations

from typing import Any

from planner.engines import get_engine
from planner.model.spaces import get_space
from planner.topology.batch_safety import NO_RING

__all__ = ["RING_HINT", "explain_text"]

#: How to give a ring to check the batches on (the ring options of validate-plan and explain).
RING_HINT = "--ring FILE, --hosts H1,H2,... --rf N, or --inventory DIR --rf N"


def _ops(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def explain_text(plan: Any, *, safety: Any = None, ring_source: str | None = None) -> str:
    """The summary ``kairos explain`` prints, as text.

    ``safety`` is the :func:`planner.topology.batch_safety.batch_safety` result on the ring
    ``ring_source`` describes; None when no ring was given (Cassandra plans then say so).
    """
    by_step: dict[str, list[Any]] = {}
    for verdict in safety or []:
        by_step.setdefault(verdict.step, []).append(verdict)
    lines = _header_lines(plan, safety=safety, ring_source=ring_source)
    if not plan.steps:
        lines.append("No steps: staying in the current configuration pays best.")
        return "\n".join(lines)
    config = dict(plan.current_config)
    space = get_space(plan.engine)
    reencode = frozenset(space.reencode_params(space.parameters))
    lines.append(f"{len(plan.steps)} step(s):")
    for s in plan.steps:
        lines += _step_lines(s, config, by_step.get(s.id, []), plan.availability, reencode)
        config.update(s.target)
    lines.append(_total_line(plan))
    return "\n".join(lines)


def _availability_line(av: Any, engine: Any) -> str:
    """The consistency level batches are found at, on a ring; else how the executor restarts
    (no consistency level to batch on: one node at a time)."""
    if engine.ring:
        return (f"Availability: {av.consistency_level}, {av.tolerated_failures} tolerated "
                "failure(s)" + (", AGGRESSIVE (availability may drop)" if av.aggressive else ""))
    return "Availability: restarts one node at a time" + (
        ", replicas first, a coordinated failover before each primary"
        if engine.replica_roles else "")


def _header_lines(plan: Any, *, safety: Any, ring_source: str | None) -> list[str]:
    """Cluster, horizon, availability, batch safety on the ring, and the provenance."""
    hz = plan.horizon
    av = plan.availability
    engine = get_engine(plan.engine)
    lines = [
        f"Plan for {plan.engine} cluster {plan.cluster!r} (made {plan.created_at})",
        f"Horizon: {hz.steps} x {hz.step_seconds:g}s from {hz.start.isoformat()} "
        f"to {hz.end.isoformat()}",
        _availability_line(av, engine),
    ]
    if engine.ring:
        if safety is None:
            lines.append(f"{NO_RING} (give {RING_HINT})")
            lines += _planned_batching_lines(plan.provenance)
        elif av.aggressive:
            lines.append(f"Batch safety on {ring_source}: not checked, the plan is AGGRESSIVE")
        else:
            bad = sum(1 for v in safety if v.problem)
            lines.append(
                f"Batch safety on {ring_source}: "
                + (f"{bad} of {len(safety)} batch(es) UNSAFE" if bad
                   else f"{len(safety)} batch(es) checked, all safe")
            )
    for key in ("forecast", "performance_model", "optimiser"):
        if key in plan.provenance:
            desc = ", ".join(f"{k}={v}" for k, v in dict(plan.provenance[key]).items())
            lines.append(f"{key.replace('_', ' ').capitalize()}: {desc}")
    return (lines + _floor_lines(plan) + _decision_lines(plan.provenance)
            + _node_group_lines(plan.provenance))


def _node_group_lines(prov: Any) -> list[str]:
    """The node groups the per-node choices formed (``provenance.per_node.groups``, MeT's
    R / W / RW / Scan), e.g. ``node groups: R: cass1; W: cass2, cass3``."""
    groups = (prov.get("per_node") or {}).get("groups") or []
    if not groups:
        return []
    return ["node groups: " + "; ".join(f"{g['name']}: {', '.join(g['hosts'])}"
                                        for g in groups)]


def _floor_lines(plan: Any) -> list[str]:
    """Redis: the durability floor the plan was searched above and what it excluded
    (``provenance.durability_floor``); an older plan's steps are held to its current
    configuration's durability (planner.plan checks them)."""
    from planner.model.durability import floor_of, parse_floor

    if not get_engine(plan.engine).durability_floor:
        return []
    rec = plan.provenance.get("durability_floor")
    if not isinstance(rec, dict):
        held = floor_of(plan.current_config)
        return [f"Durability floor: not recorded in the plan; its steps are held to the "
                f"current configuration's durability ({held.describe()})"]
    floor = parse_floor(rec.get("floor"), where="provenance.durability_floor.floor")
    by = ", ".join(f"{k}: {n}" for k, n in dict(rec.get("excluded_by") or {}).items())
    return [f"Durability floor: {floor.describe()} ({rec.get('source')}); "
            f"{rec.get('excluded')} of {rec.get('candidates')} candidate configuration(s) "
            f"below it were outside the search" + (f" ({by})" if by else "")]


def _planned_batching_lines(prov: Any) -> list[str]:
    """Why the batches were safe on the ring the plan was made for (``provenance.batching``,
    written since issue 17; older plans have none)."""
    batching = prov.get("batching")
    if not isinstance(batching, dict):
        return []
    proof = "minimal" if batching.get("exact") else "not proved minimal"
    lines = [f"Batches when planned: {batching.get('batches')}, lower bound "
             f"{batching.get('lower_bound')} ({proof})"]
    lines += [f"  batch {i}: {why}" for i, why in enumerate(batching.get("reasons", []), 1)]
    return lines


def _decision_lines(prov: Any) -> list[str]:
    """The objective, the confidence rule (and the steps it dropped), and T_r's source."""
    lines = []
    obj = prov.get("objective")
    if isinstance(obj, dict):
        served = obj.get("served", "capacity")
        what = {"capacity": "predicted capacity (SOPHIA: clients saturate the cluster)",
                "offered": "served work min(offered, capacity)",
                "work": f"served work min(offered, capacity) + {obj.get('headroom_weight')} "
                        "x offered x (1 - utilisation)"}.get(served, str(served))
        if served == "work" and obj.get("latency_weight"):
            what += (f" + {obj['latency_weight']} x offered x ln(p99 running / p99) where "
                     "below saturation")
        lines.append(f"Objective: credit {what}; headroom measured as "
                     f"{obj.get('headroom_measure')}")
        util = obj.get("running_utilisation")
        if isinstance(util, dict):
            sat = int(obj.get("saturated_intervals", 0))
            lines.append(
                f"Load: the running configuration is at {util.get('mean', 0):.0%} of its "
                f"predicted capacity on average (max {util.get('max', 0):.0%}); "
                + (f"saturated in {sat} interval(s): a faster configuration serves more work"
                   if sat else "never saturated: a change can gain latency and headroom, "
                   "not served work")
            )
        p99 = obj.get("running_p99_ms")
        if isinstance(p99, dict):
            lines.append(f"Latency: the running configuration's predicted p99 is "
                         f"{p99.get('mean', 0):.0f} ms on average (max {p99.get('max', 0):.0f}"
                         f" ms); {obj.get('latency_measure')}")
    unc = prov.get("uncertainty")
    if isinstance(unc, dict):
        lines.append(
            f"Uncertainty: optimiser maximises the {unc.get('risk')} objective"
            + (f" (quantile {unc['quantile']:g})" if "quantile" in unc else "")
            + (f" (the worst mix within KL {unc['kl_radius']:.3g} nats of the forecast's, the"
               " radius its backtest errors stayed in)" if "kl_radius" in unc else "")
            + f"; a step is kept when P(gain > cost) >= {unc.get('confidence')} over "
            f"{unc.get('scenarios')} scenarios ({unc.get('model_uncertainty')})"
        )
        for d in unc.get("dropped", []):
            lines.append(f"  dropped: {d.get('change')} due {d.get('due')}: "
                         f"P(gain > cost) {d.get('p_gain'):.2f}")
    cost = prov.get("cost_model")
    if isinstance(cost, dict) and "restart_seconds_source" in cost:
        lines.append(f"T_r: {cost.get('restart_seconds'):g} s per node, "
                     f"{cost['restart_seconds_source']}")
    advice = prov.get("capacity_advice")
    if isinstance(advice, dict):  # plans made since issue 43
        from planner.planning.capacity import advice_line

        lines.append(advice_line(advice))
    split = prov.get("memory_split")
    if isinstance(split, dict):  # a plan made with --memory-curve
        from planner.model.memory_curve import advice_line as split_line

        lines.append(split_line(split))
    return lines


def _step_lines(
    s: Any, config: dict[str, Any], verdicts: list[Any], av: Any, reencode: frozenset[str]
) -> list[str]:
    """One step: its changes from ``config``, how it is applied, batch safety, expected gain."""
    dur = (s.until - s.due).total_seconds()
    lines = [f"  {s.id}  {s.due.isoformat()}  (holds {dur:g}s)"]
    for key, value in s.target.items():
        kind = "restart" if key in s.restart else "live"
        lines.append(f"      {key}: {config.get(key)!r} -> {value!r}  [{kind}]")
    for host, over in s.per_node.items():
        lines.append(f"      on {host}: {dict(over)}")
    if s.tables:
        lines.append(f"      tables: {', '.join(s.tables)}")
    for table, over in s.per_table.items():
        lines.append(f"      table {table}: {dict(over)}")
    if s.batches:
        order = " | ".join(" ".join(b) for b in s.batches)
        lines.append(f"      rolling restart in {len(s.batches)} batch(es): {order}")
        unsafe = [v for v in verdicts if v.problem]
        if verdicts and not unsafe:
            lines.append(f"      batch safety: all {len(verdicts)} batch(es) safe for "
                         f"{av.consistency_level}")
        for v in verdicts:
            if v.problem:
                lines.append(f"      batch safety: UNSAFE {v.describe()}")
            elif v.reason:
                lines.append(f"        batch {v.index}: {v.reason}")
        lines += _reencode_lines(s, config, reencode)
    else:
        lines.append("      applied live, no restart")
    e = s.expected
    lines.append(
        f"      expected until the next step, vs the previous configuration: "
        f"+{_ops(e.benefit_ops)} ops benefit, -{_ops(e.cost_ops)} ops cost, "
        f"net {_ops(e.net_ops)}"
    )
    return lines + _gain_lines(e)


def _reencode_lines(s: Any, config: dict[str, Any], reencode: frozenset[str]) -> list[str]:
    """Why a step that changes an encoding threshold restarts the nodes: a reload."""
    changed = sorted(k for k in reencode if k in s.target and config.get(k) != s.target[k])
    if not changed:
        return []
    return [f"      {', '.join(changed)}: a reload; each node restarts and encodes the data "
            "it holds under the new value (set live, only what is written after the change "
            "would be; docs/redis-executor.md, \"A reload re-encodes\")"]


def _gain_lines(e: Any) -> list[str]:
    """What the step gains (throughput at saturation, or headroom below it) and its P."""
    out = []
    util = ""
    if e.utilisation_before is not None and e.utilisation_after is not None:
        util = (f"utilisation at the offered load {e.utilisation_before:.0%} -> "
                f"{e.utilisation_after:.0%}")
    if e.gains == "throughput":
        out.append(f"      gains: throughput at saturation, +{_ops(e.served_ops or 0.0)} ops "
                   f"served ({util})")
    elif e.gains == "headroom":
        out.append(f"      gains: latency/headroom below saturation, {util}; served work "
                   f"+{_ops(e.served_ops or 0.0)} ops")
    if e.p_gain is not None:
        out.append(f"      P(gain > cost) = {e.p_gain:.2f}")
    return out


def _total_line(plan: Any) -> str:
    """The plan's expected total vs staying put (or the sum of the steps' net gains)."""
    exp = plan.provenance.get("expected")
    if isinstance(exp, dict) and exp.get("stay_ops"):
        gain = float(exp["total_ops"]) - float(exp["stay_ops"])
        return (
            f"Expected over the horizon: {_ops(float(exp['total_ops']))} ops, "
            f"{'+' if gain >= 0 else ''}{_ops(gain)} ({gain / float(exp['stay_ops']):+.1%}) vs "
            "staying in the current configuration"
        )
    return f"Sum of the steps' expected net gains: {_ops(plan.expected_net_ops)} ops"
