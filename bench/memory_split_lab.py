"""What the lab's memory-split benches share (bench/memory_split_redis.py,
bench/memory_split_cassandra.py): the meter's settle rule over a running load, the executor
they apply through, the curve fitted over their windows, the before-and-after of the advised
split, and how a run ends (the load's count of failures and lost writes, the JSON document,
the exit code). Imported once a bench has put the repository and module_utils/ on sys.path."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kairos_cgroup

from planner.calibrate.bench import ExecutorBench
from planner.errors import KairosError, ValidationError
from planner.loadgen import LoadConfig
from planner.loadgen.run import LoadError
from planner.model import memory_curve
from planner.model import memory_split as ms
from planner.model.memory_split import MIB

REPO = Path(__file__).resolve().parent.parent

#: The settle rule: the last SETTLE_WINDOWS windows of SETTLE_STEP_SECONDS each, whose hit
#: ratios span less than SETTLE_TOLERANCE and whose cache holds as many entries (within
#: FILL_TOLERANCE of the most). Two windows' hit ratios alone passed a cache still filling
#: slowly (a key cache grown from 1 to 16 MiB read 83 % where 4 MiB read 92 %).
SETTLE_STEP_SECONDS = 5.0
SETTLE_WINDOWS = 3
SETTLE_TOLERANCE = 0.02
FILL_TOLERANCE = 0.02


def add_split_arguments(p: argparse.ArgumentParser, *, parameter: str, start: str, grid: str,
                        unit_mib: int, settle_max: float) -> None:
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
    p.add_argument("--settle-max", type=float, default=settle_max,
                   help="most seconds to wait for the cache to settle after a change "
                   f"(default {settle_max:g})")
    p.add_argument("--keep", action="store_true",
                   help="leave the nodes at the split (default: back to what they ran)")
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

    def settled(self, seconds_max: float) -> dict[str, Any]:
        """Wait until the cache has settled (the rule above) or ``seconds_max`` has passed.

        A window reports its ``hit_ratio`` and ``fill``, the entries the cache holds (keys,
        or key-cache entries) summed over the nodes. Returns the seconds waited, whether it
        settled, and over the last windows how far the hit ratio and the fill moved."""
        start = time.monotonic()
        recent: list[dict[str, Any]] = []
        while True:
            recent = [*recent, self.window(SETTLE_STEP_SECONDS)][-SETTLE_WINDOWS:]
            hits = [float(w["hit_ratio"]) for w in recent]
            fills = [float(w["fill"]) for w in recent]
            moved = {"hit_ratio_span": round(max(hits) - min(hits), 4),
                     "fill_span": round((max(fills) - min(fills)) / max(max(fills), 1.0), 4)}
            done = (len(recent) == SETTLE_WINDOWS and moved["hit_ratio_span"] < SETTLE_TOLERANCE
                    and moved["fill_span"] <= FILL_TOLERANCE)
            waited = time.monotonic() - start
            if done or waited >= seconds_max:
                return {"settled_seconds": round(waited), "settled": done, **moved}

    def settled_window(self, args: argparse.Namespace) -> dict[str, Any]:
        """Once the cache has settled (at most ``--settle-max``), a ``--window``. One that did
        not settle is measured all the same, said, and marked ``settled: false``."""
        settle = self.settled(args.settle_max)
        if not settle["settled"]:
            say(f"not settled after {settle['settled_seconds']} s (the last "
                f"{SETTLE_WINDOWS} windows: hit ratio within {settle['hit_ratio_span']:.1%}, "
                f"entries within {settle['fill_span']:.1%}); measuring as it is")
        return {**self.window(args.window), **settle}


def settle_note(w: Mapping[str, Any]) -> str:
    """How a window's settle ended, for its line: "settled after 25 s" or "not settled
    after 60 s"."""
    return f"{'' if w['settled'] else 'not '}settled after {w['settled_seconds']} s"


def stop_load(load: Any, result: dict[str, Any], **kw: Any) -> Any:
    """``load.stop(**kw)``; None when the load itself failed (workers that did not finish,
    or failed), which ``result`` then records as its error: said, not a traceback."""
    try:
        return load.stop(**kw)
    except LoadError as exc:
        say(f"the load did not stop cleanly: {exc}")
        result.setdefault("error", f"the load: {exc}")
        return None


def finish(result: dict[str, Any], outcome: Any, out: Path | None,
           report: Callable[[dict[str, Any]], None]) -> int:
    """Record the load's outcome in ``result`` (None: :func:`stop_load` could not read it),
    report, print and write (``out``) the document; 0 only when the run decided and applied,
    nothing failed and nothing acknowledged was lost."""
    result["load"] = None if outcome is None else {
        "ops": outcome.ops, "failed": outcome.failed, "failures": dict(outcome.failures),
        "acknowledged_writes": outcome.acknowledged_writes,
        "lost_acknowledged_writes": outcome.lost_acknowledged_writes,
        "verified": outcome.verified}
    load = result["load"]
    if load is not None:
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
    ok = ("error" not in result and outcome is not None and outcome.failed == 0
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


def run_document(script: str, argv: list[str] | None) -> dict[str, Any]:
    """The head of a run's JSON document: the command line and when it started."""
    return {"command": f"bench/{script} " + " ".join(argv or sys.argv[1:]),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds")}


def lab_executor(load: LoadConfig, *, playbook: str, rollout_cl: str,
                 log_name: str) -> ExecutorBench:
    """The executor a run applies its settings through: ``playbooks/<playbook>`` on the
    local lab's inventory, its output in ``.kairos/<log_name>``. It only applies (no
    warm-up, no measurement): the benches measure under their own running load."""
    return ExecutorBench(load=load, warmup_seconds=0.0, measure_seconds=0.0,
                         playbook=REPO / "playbooks" / playbook,
                         inventory=REPO / "inventories" / "local" / "hosts.yml",
                         rollout_cl=rollout_cl, log_path=REPO / ".kairos" / log_name, log=say)


def curve_document(windows: list[dict[str, Any]], *, script: str, engine: str, parameter: str,
                   size_key: str, share: float, miss: str, **budget: Any) -> dict[str, Any]:
    """The memory curve file of the windows (planner.model.memory_curve): what ``miss``
    costs, fitted over them (reads a ``share`` of the mix), said, and the engine's
    ``budget`` figures; each window's size is its ``size_key``."""
    cost = ms.fit_miss_cost(hit_ratios=[w["hit_ratio"] for w in windows],
                            ops_per_second=[w["reads_per_s"] for w in windows], share=share)
    say(f"{miss} costs {cost.miss_seconds * 1e6:.0f} us of the cluster's time per read "
        f"(1/reads = {cost.base_seconds * 1e6:.0f} us + {cost.slope_seconds * 1e6:.0f} us x "
        f"miss ratio, R2 {cost.r_squared if cost.r_squared is not None else float('nan'):.2f})")
    return memory_curve.curve_document(
        engine=engine, parameter=parameter,
        points=[{"size_mib": w[size_key], **w} for w in windows], cost=cost, **budget,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=f"bench/{script} " + " ".join(sys.argv[1:]))


class LiveChange:
    """The advised split applied live through ``executor``, with a window before and one
    after; :attr:`applied` tells the run's ending whether the nodes still run a probe's
    size (set by hand, so to be put back) or the split."""

    def __init__(self, executor: ExecutorBench, parameter: str) -> None:
        self.executor = executor
        self.parameter = parameter
        self.applied = False

    def before_and_after(self, meter: SettlingMeter, args: argparse.Namespace, chosen: str, *,
                         back_to_start: Callable[[], None],
                         before_line: Callable[[dict[str, Any]], str],
                         after_line: Callable[[dict[str, Any]], str],
                         ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The settled window at ``--start`` (``back_to_start`` probes it) and, once
        ``chosen`` is applied, the settled window after; each said as its ``*_line``."""
        say(f"before: the nodes back at {args.start}")
        back_to_start()
        before = meter.settled_window(args)
        say(f"before: {before_line(before)}")
        say(f"applying {self.parameter} {chosen} through the executor, under load")
        self.executor.apply({self.parameter: chosen})
        self.applied = True
        after = meter.settled_window(args)
        say(f"after: {after_line(after)}")
        return before, after


def findings(*, windows: list[dict[str, Any]], refinement: ms.Refinement,
             figures: Mapping[str, Any], doc: dict[str, Any], curve: memory_curve.MeasuredCurve,
             advice: dict[str, Any], start: str, before: dict[str, Any],
             after: dict[str, Any], nodes: Iterable[str]) -> dict[str, Any]:
    """What a run found, for its document: the windows, the curve and its advice, the
    windows before and after beside the prediction, and the nodes' envelopes."""
    predicted = advice["predicted"]
    return {
        "windows": windows, "refinement_sizes_mib": [s / MIB for s in refinement.sizes_bytes],
        "figures": figures, "curve": doc, "advice": advice, "start": start,
        "chosen": advice["advised"], "before": before, "after": after,
        "predicted": {"hit_ratio": predicted["hit_ratio"],
                      "reads_per_s": predicted["reads_per_s"],
                      "reads_per_s_before": curve.cost.ops_per_second(before["hit_ratio"])},
        "environment": kairos_cgroup.held([f"lab-{n}" for n in nodes]),
    }


def conclude(change: LiveChange, meter: SettlingMeter, args: argparse.Namespace, *,
             doc: dict[str, Any], mix: dict[str, float], measured: Mapping[str, Any],
             nodes: Iterable[str], back_to_start: Callable[[], None],
             before_line: Callable[[dict[str, Any]], str],
             after_line: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """From the measured curve ``doc`` to the run's :func:`findings`: the split it advises
    (:func:`decide`) applied live between a window before and one after
    (:meth:`LiveChange.before_and_after`). ``measured``: the run's windows, refinement and
    figures."""
    curve, advice = decide(doc, args, mix)
    before, after = change.before_and_after(meter, args, advice["advised"],
                                            back_to_start=back_to_start,
                                            before_line=before_line, after_line=after_line)
    return findings(windows=measured["windows"], refinement=measured["refinement"],
                    figures=measured["figures"], doc=doc, curve=curve, advice=advice,
                    start=args.start, before=before, after=after, nodes=nodes)


def run_under_load(script: str, argv: list[str] | None, load: Any,
                   measure: Callable[[dict[str, Any]], None], *, out: Path | None,
                   report: Callable[[dict[str, Any]], None], restore: Callable[[], None],
                   **stop: Any) -> int:
    """A whole run, its exit code (:func:`finish`): ``load`` started, ``measure`` fills the
    run's document (:func:`run_document`); a KairosError or ValidationError it raises is
    said and recorded as the run's error, not a traceback. Then the load stops (``stop``:
    its ``stop`` arguments) and, even when that fails, ``restore`` puts the nodes back."""
    result = run_document(script, argv)
    outcome = None
    try:
        load.start()
        measure(result)
    except (KairosError, ValidationError) as exc:
        say(f"stopped: {exc}")
        result["error"] = str(exc)
    finally:
        try:
            outcome = stop_load(load, result, **stop)
        finally:
            restore()
    return finish(result, outcome, out, report)


def served_change(result: Mapping[str, Any]) -> str:
    """The hit ratio and reads served before -> after, each beside the prediction."""
    b, a, p = result["before"], result["after"], result["predicted"]
    return (f"{b['hit_ratio']:.1%} -> {a['hit_ratio']:.1%} (predicted {p['hit_ratio']:.1%}); "
            f"reads served {b['reads_per_s']:.0f} -> {a['reads_per_s']:.0f}/s, "
            f"{a['reads_per_s'] / b['reads_per_s'] - 1:+.0%} (predicted "
            f"{p['reads_per_s_before']:.0f} -> {p['reads_per_s']:.0f}, "
            f"{p['reads_per_s'] / p['reads_per_s_before'] - 1:+.0%})")
