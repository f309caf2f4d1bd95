"""``kairos explain PLAN``: validate a plan and print a readable summary."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``explain`` sub-command."""
    p = subparsers.add_parser(
        "explain",
        help="validate a plan file and summarise it",
        description="Validate a plan (as validate-plan does) and print what it will do: "
        "each step's time, parameter changes, live vs restart, batches and expected gain.",
    )
    p.add_argument("plan", metavar="PLAN")
    p.add_argument("--hosts", help="comma-separated inventory hosts to check batches against")
    p.set_defaults(func=run)


def _ops(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def explain_text(plan: Any) -> str:
    """The summary ``kairos explain`` prints, as text."""
    lines = []
    hz = plan.horizon
    av = plan.availability
    prov = plan.provenance
    lines.append(f"Plan for {plan.engine} cluster {plan.cluster!r} (made {plan.created_at})")
    lines.append(
        f"Horizon: {hz.steps} x {hz.step_seconds:g}s from {hz.start.isoformat()} "
        f"to {hz.end.isoformat()}"
    )
    lines.append(
        f"Availability: {av.consistency_level}, {av.tolerated_failures} tolerated failure(s)"
        + (", AGGRESSIVE (availability may drop)" if av.aggressive else "")
    )
    for key in ("forecast", "performance_model", "optimiser"):
        if key in prov:
            desc = ", ".join(f"{k}={v}" for k, v in dict(prov[key]).items())
            lines.append(f"{key.replace('_', ' ').capitalize()}: {desc}")
    if not plan.steps:
        lines.append("No steps: staying in the current configuration pays best.")
        return "\n".join(lines)
    config = dict(plan.current_config)
    lines.append(f"{len(plan.steps)} step(s):")
    for s in plan.steps:
        dur = (s.until - s.due).total_seconds()
        lines.append(f"  {s.id}  {s.due.isoformat()}  (holds {dur:g}s)")
        for key, value in s.target.items():
            kind = "restart" if key in s.restart else "live"
            lines.append(f"      {key}: {config.get(key)!r} -> {value!r}  [{kind}]")
        config.update(s.target)
        for host, over in s.per_node.items():
            lines.append(f"      on {host}: {dict(over)}")
        if s.batches:
            order = " | ".join(" ".join(b) for b in s.batches)
            lines.append(f"      rolling restart in {len(s.batches)} batch(es): {order}")
        else:
            lines.append("      applied live, no restart")
        e = s.expected
        lines.append(
            f"      expected until the next step, vs the previous configuration: "
            f"+{_ops(e.benefit_ops)} ops benefit, -{_ops(e.cost_ops)} ops cost, "
            f"net {_ops(e.net_ops)}"
        )
    exp = prov.get("expected")
    if isinstance(exp, dict) and exp.get("stay_ops"):
        gain = float(exp["total_ops"]) - float(exp["stay_ops"])
        lines.append(
            f"Expected over the horizon: {_ops(float(exp['total_ops']))} ops, "
            f"{'+' if gain >= 0 else ''}{_ops(gain)} ({gain / float(exp['stay_ops']):+.1%}) vs "
            "staying in the current configuration"
        )
    else:
        lines.append(f"Sum of the steps' expected net gains: {_ops(plan.expected_net_ops)} ops")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the summary; a plan that fails validation raises (exit 2, field named)."""
    from planner.commands.validate_plan import parse_hosts
    from planner.plan import load_plan

    plan = load_plan(args.plan, known_hosts=parse_hosts(args.hosts))
    print(explain_text(plan))
    return 0
