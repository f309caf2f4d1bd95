"""What the lab's memory-split benches share (bench/memory_split_redis.py,
bench/memory_split_cassandra.py): the meter's settle rule over a running load, and how a run
ends (the load's count of failures and lost writes, the JSON document, the exit code)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import KairosError
from planner.model import memory_curve
from planner.model.memory_split import MIB

#: A settle window: the hit ratio has settled when it moves less than this between two.
SETTLE_STEP_SECONDS = 5.0
SETTLE_TOLERANCE = 0.02


def add_split_arguments(p: argparse.ArgumentParser, *, parameter: str, start: str, grid: str,
                        unit_mib: int) -> None:
    """The options both benches take, with this engine's defaults."""
    p.add_argument("--start", default=start,
                   help=f"{parameter} the nodes run first (default {start})")
    p.add_argument("--grid-mib", default=grid,
                   help=f"the sizes that may be measured, LOW:HIGH:STEP MiB (default {grid})")
    p.add_argument("--unit-mib", type=int, default=unit_mib,
                   help=f"the split's grid (default {unit_mib} MiB)")
    p.add_argument("--measurements", type=int, default=5,
                   help="sizes the refinement measures (default 5)")
    p.add_argument("--window", type=float, default=20.0, help="seconds a window measures")
    p.add_argument("--settle-max", type=float, default=60.0,
                   help="most seconds to wait for the hit ratio to settle after a change")
    p.add_argument("--out", type=Path, help="also write the JSON result here")
    p.add_argument("--curve-out", type=Path,
                   help="write the measured curve here (kairos plan --memory-curve)")


def parse_split_arguments(p: argparse.ArgumentParser, argv: list[str] | None, *,
                          whole_mib: bool = False) -> argparse.Namespace:
    """Parse; ``args.grid`` is ``--grid-mib``'s sizes in bytes (whole MiB with
    ``whole_mib``)."""
    args = p.parse_args(argv)
    try:
        low, high, step = (float(v) for v in args.grid_mib.split(":"))
    except ValueError:
        p.error(f"--grid-mib: expected LOW:HIGH:STEP in MiB, got {args.grid_mib!r}")
    if not 0 < low < high or step <= 0:
        p.error(f"--grid-mib: need 0 < LOW < HIGH and STEP > 0, got {args.grid_mib!r}")
    if whole_mib and not all(v.is_integer() for v in (low, high, step)):
        p.error(f"--grid-mib: whole MiB only, got {args.grid_mib!r}")
    sizes, v = [], low
    while v <= high + 1e-9:
        sizes.append(int(v * MIB))
        v += step
    args.grid = sizes
    return args


def say(msg: str) -> None:
    print(f"[memory-split {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class SettlingMeter:
    """Windows of the running load. The load reports its served operations to
    :meth:`progress`; an engine's meter measures the cache in :meth:`window`."""

    def __init__(self) -> None:
        self.points: list[tuple[float, int]] = []

    def progress(self, _elapsed: float, ops: int, failures: int) -> None:
        self.points.append((time.monotonic(), ops - failures))

    def ops_per_s(self, t0: float, t1: float, seconds: float) -> float:
        """Operations served a second between two moments of a window of ``seconds``."""
        inside = [(t, n) for t, n in self.points if t0 <= t <= t1]
        if len(inside) < 2:
            raise KairosError(f"a {seconds:.0f}-s window saw no load (is it running?)")
        (ta, na), (tb, nb) = inside[0], inside[-1]
        return (nb - na) / (tb - ta)

    def window(self, seconds: float) -> dict[str, Any]:
        raise NotImplementedError

    def settled(self, seconds_max: float) -> float:
        """Wait until two settle windows' hit ratios agree; the seconds waited."""
        start = time.monotonic()
        last = self.window(SETTLE_STEP_SECONDS)["hit_ratio"]
        while time.monotonic() - start < seconds_max:
            now = self.window(SETTLE_STEP_SECONDS)["hit_ratio"]
            if abs(now - last) < SETTLE_TOLERANCE:
                break
            last = now
        return time.monotonic() - start

    def settled_window(self, args: argparse.Namespace) -> dict[str, Any]:
        """Once the hit ratio has settled (at most ``--settle-max``), a ``--window``."""
        waited = self.settled(args.settle_max)
        return {**self.window(args.window), "settled_seconds": round(waited)}


def finish(result: dict[str, Any], outcome: Any, out: Path | None,
           report: Callable[[dict[str, Any]], None]) -> int:
    """Record the load's outcome in ``result``, report, print and write (``out``) the
    document; 0 only when the run decided and applied, nothing failed and nothing
    acknowledged was lost."""
    result["load"] = {"ops": outcome.ops, "failed": outcome.failed,
                      "failures": dict(outcome.failures),
                      "acknowledged_writes": outcome.acknowledged_writes,
                      "lost_acknowledged_writes": outcome.lost_acknowledged_writes,
                      "verified": outcome.verified}
    load = result["load"]
    say(f"load: {load['ops']} operations, {load['failed']} failed, "
        f"{load['acknowledged_writes']} acknowledged writes, "
        f"{load['lost_acknowledged_writes']} lost")
    if "after" in result:
        report(result)
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    ok = ("error" not in result and outcome.failed == 0
          and outcome.lost_acknowledged_writes == 0 and outcome.verified)
    return 0 if ok else 1


def decide(doc: dict[str, Any], args: argparse.Namespace, mix: dict[str, float]
           ) -> tuple[memory_curve.MeasuredCurve, dict[str, Any]]:
    """The measured curve (written to ``--curve-out``) and the split it advises from
    ``--start``; refused unless it is a live change."""
    if args.curve_out:
        args.curve_out.parent.mkdir(parents=True, exist_ok=True)
        args.curve_out.write_text(json.dumps(doc, indent=1) + "\n")
        say(f"wrote {args.curve_out} (kairos plan --memory-curve)")
    curve = memory_curve.parse_curve(doc, "the measured windows")
    advice = memory_curve.advise(curve, current={curve.parameter: args.start}, mix=mix)
    say(memory_curve.advice_line(advice))
    if advice["change"] != "live" or not advice["changed"]:
        raise KairosError(f"the split advises {advice['advised']} [{advice['change']}]: not a "
                          f"live change from {args.start}")
    return curve, advice
