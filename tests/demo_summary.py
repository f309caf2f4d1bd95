"""The end of `make demo` and `make demo-redis`: each load's operations, failures and lost
acknowledged writes; the autopilot's judgements of the model; each step's gain, expected
against observed. Written to <demo>/summary.json as well. Exit 1 when a load failed an
operation, lost or could not verify an acknowledged write, or no window was judged.

    python tests/demo_summary.py ENGINE DEMO_DIR PLAN --loads a,b --show param,param
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from planner.autopilot.learning import learnt_paths, load_track
from planner.plan import load_plan
from planner.report.page import step_gain


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.0%}"


def loads_lines(demo: Path, names: list[str]) -> tuple[dict[str, Any], bool]:
    """Each load's result, printed; and whether any failed, lost or left unverified."""
    results, bad = {}, False
    for name in names:
        r = results[name] = json.loads((demo / f"load-{name}.json").read_text())
        evicted = (f" (missing and put down to eviction {r['missing_evicted']})"
                   if r.get("missing_evicted") is not None else "")
        print(f"  load {name}: {r['ops']} ops in {r['seconds']:.0f} s ({r['ops_per_s']:.0f} "
              f"ops/s), failures {r['failed']} {r['failures'] or ''}, acknowledged writes "
              f"{r['acknowledged_writes']}, lost acknowledged writes "
              f"{r['lost_acknowledged_writes']}{evicted}, verified {r['verified']}")
        for kind, messages in (r.get("failure_messages") or {}).items():
            for message in messages:  # what the first failures said: the cause to look at
                print(f"    {kind}: {message}")
        bad |= bool(r["failed"] or r["lost_acknowledged_writes"] or not r["verified"])
    return results, bad


def step_line(step: Any, plan: Any, track: list[dict[str, Any]]) -> dict[str, Any]:
    """A step's gain: expected (the plan's) against observed in saturated windows
    (:func:`step_gain`), and the served work of the same closed loop before and after it
    whatever the windows' kind: where the nodes' CPU is not what bounds the loop, served is
    a lower bound of capacity, yet the same loop before and after it."""
    since = max(step.due.timestamp(), plan.created_at.timestamp())
    judged = [j for j in track if j["step_id"] == step.id and j["kind"] == "capacity"]
    served = ({"served": sum(j["served_ops_per_s"] for j in judged) / len(judged)}
              if judged else None)
    gain = step_gain(track, step.expected, served, since)
    before = [j for j in track if float(j["end"]) <= since]
    after = [j for j in track if j["step_id"] == step.id]
    loop = (after[-1]["served_ops_per_s"] / before[-1]["served_ops_per_s"] - 1.0
            if before and after else None)
    changed = ", ".join(f"{k} -> {step.target[k]}" for k in (*step.live, *step.restart))
    text = (f"  step {step.id} ({changed}): capacity gain expected {pct(gain['expected'])}, "
            f"observed {pct(gain['observed'])}")
    if gain["served_before"] and served:
        text += (f" (served {gain['served_before']:.0f} ops/s in the saturated window "
                 f"before it, {served['served']:.0f} after)")
    if loop is not None:
        text += (f"; served by the same closed loop {before[-1]['served_ops_per_s']:.0f} -> "
                 f"{after[-1]['served_ops_per_s']:.0f} ops/s, {pct(loop)} (windows: "
                 f"{before[-1]['kind']}, {after[-1]['kind']})")
    print(text)
    return {"id": step.id, "target": dict(step.target), **gain, "served_gain": loop}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("engine")
    p.add_argument("demo", type=Path)
    p.add_argument("plan")
    p.add_argument("--loads", required=True, help="the loads' names, comma-separated")
    p.add_argument("--show", required=True, help="the parameters to show per judgement")
    args = p.parse_args(argv)
    plan = load_plan(args.plan)
    loads, bad = loads_lines(args.demo, args.loads.split(","))
    track = load_track(learnt_paths(args.demo, "lab", args.engine)["track"])
    print("  the model against production (the autopilot's judgements):")
    for j in track:
        mix = ", ".join(f"{c} {v:.0%}" for c, v in j["mix"].items() if v >= 0.005)
        conf = ", ".join(f"{k} {j['config'].get(k, '?')}" for k in args.show.split(","))
        print(f"    {j['step_id']}: {j['kind']}, {conf} ({mix}): served "
              f"{j['served_ops_per_s']:.0f} ops/s, predicted {j['predicted_ops_per_s']:.0f}, "
              f"error {j['error']:+.0%}")
    steps = [step_line(step, plan, track) for step in plan.steps]
    summary = {"loads": loads, "track": track, "steps": steps}
    (args.demo / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    if bad or not track:
        print("demo: FAILED (failures, lost or unverified writes, or no window judged)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
