"""Bad inputs end in a clear refusal: exit status 2, no traceback, the file and field named.

Every case runs ``planner.cli.main`` in-process on a file written into ``tmp_path`` (or on
bad command-line numbers). For each one: the exit status is 2 (0 would mean the input was
accepted silently), stderr holds no traceback, names the file (or the option) and the
field, and says what is wrong in a phrase specific to the case. A few good inputs are run
as controls, so the checks are not refusing everything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner import inputs
from planner.cli import main
from planner.model.performance import default_model_path

MiB = 1024 * 1024
#: 2026-01-05T00:00:00Z in epoch seconds.
T0 = 1767571200
HEADER = "timestamp,load,read,update,insert,scan\n"

Content = str | bytes | Callable[[], str | bytes] | None


@dataclass(frozen=True)
class Case:
    """One bad input.

    Parameters
    ----------
    id : str
        The pytest id.
    argv : tuple of str
        The command line; ``{f}`` is the input file, ``{d}`` a scratch directory.
    expect : tuple of str
        Substrings stderr must hold: the file (``{f}``) or option, the field, and a
        phrase specific to the problem.
    content : str, bytes, callable or None
        What to write into the input file (``None``: write nothing).
    suffix : str
        The input file's suffix (it chooses the format for traces).
    name : str
        Where to write the file under ``tmp_path`` when a command finds it by name
        (default ``input<suffix>``); ``{t}`` in ``argv`` is ``tmp_path``.
    """

    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]
    content: Content = None
    suffix: str = ".yml"
    name: str = ""


# ------------------------------------------------------------------- builders
def _prior() -> dict:
    return json.loads(default_model_path("cassandra").read_text())


def _edited(doc: dict, changes: dict[str, object]) -> str:
    """``doc`` with ``changes`` (a value of ... deletes the key), as JSON."""
    for key, value in changes.items():
        if value is ...:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc)


def _model(**changes: object) -> Callable[[], str]:
    """A copy of the shipped prior with ``changes`` (a value of ... deletes the key)."""

    def build() -> str:
        return _edited(_prior(), changes)

    return build


def _ragged_coef() -> str:
    doc = _prior()
    doc["coef"][1] = doc["coef"][1][:-1]
    return json.dumps(doc)


def _coef00(value: float) -> Callable[[], str]:
    def build() -> str:
        doc = _prior()
        doc["coef"][0][0] = value  # json.dumps writes inf as Infinity
        return json.dumps(doc)

    return build


def _feature(**changes: object) -> Callable[[], str]:
    def build() -> str:
        doc = _prior()
        doc["features"][0].update(changes)
        return json.dumps(doc)

    return build


def _csv(*rows: str) -> str:
    return HEADER + "".join(f"{r}\n" for r in rows)


def _good_rows(n: int = 24, step: int = 60) -> list[str]:
    return [f"{T0 + i * step},{1000 + 10 * (i % 5)},0.5,0.3,0.1,0.1" for i in range(n)]


def _json_trace(**changes: object) -> Callable[[], str]:
    def build() -> str:
        doc: dict = {
            "kind": "kairos-trace", "schema_version": 1, "engine": "cassandra",
            "scope": "cluster", "step_seconds": 60,
            "timestamps": [T0, T0 + 60, T0 + 120], "load": [1, 2, 3],
            "mix": {"read": [1, 1, 1], "update": [0, 0, 0], "insert": [0, 0, 0],
                    "scan": [0, 0, 0]},
        }
        doc.update(changes)
        return json.dumps(doc)

    return build


def _forecast(**changes: object) -> Callable[[], str]:
    def build() -> str:
        h = 4
        band = {"mean": [0.25] * h, "lower": [0.2] * h, "upper": [0.3] * h}
        doc: dict = {
            "kind": "kairos-forecast", "schema_version": 1, "engine": "cassandra",
            "scope": "cluster", "model": "naive", "level": 0.9, "step_seconds": 60.0,
            "season_length": None, "timestamps": [T0 + 60 * i for i in range(h)],
            "load": {"mean": [100.0] * h, "lower": [90.0] * h, "upper": [110.0] * h},
            "mix": {c: band for c in ("read", "update", "insert", "scan")},
            "backtest": None, "info": {},
        }
        return _edited(doc, changes)

    return build


RING_OK = (
    "nodes:\n"
    "  - {host: a, tokens: [-6000000000000000000]}\n"
    "  - {host: b, tokens: [0]}\n"
    "  - {host: c, tokens: [6000000000000000000]}\n"
    "keyspaces: {ks: {replication: {datacenter1: 3}}}\n"
)


def _ring(nodes: str = "", keyspaces: str = "{ks: {replication: {datacenter1: 3}}}",
          extra: str = "") -> str:
    nodes = nodes or RING_OK.split("keyspaces")[0].removeprefix("nodes:\n")
    return f"nodes:\n{nodes}keyspaces: {keyspaces}\n{extra}"


def _plan_head(horizon: str) -> str:
    """The fields a plan's horizon is checked after, then the given horizon."""
    return (
        "schema_version: 1\nkind: kairos-plan\nengine: cassandra\ncluster: lab\n"
        "created_at: '2026-01-05T00:00:00+00:00'\n"
        f"horizon: {{start: '2026-01-05T00:00:00+00:00', {horizon}}}\n"
    )


def _deep_yaml() -> str:
    return "nodes: " + "[" * 100 + "]" * 100 + "\n"


def _billion_laughs() -> str:
    """Nine levels of ten aliases each: 10**9 values from a few hundred bytes."""
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\nnodes: *a9\n"


# --------------------------------------------------------------- the commands
TUNE = ("tune", "--engine", "cassandra", "--mix", "read=0.8,update=0.2")
EXPLAIN = ("explain", "{f}")
BATCHES = ("batches", "--cl", "QUORUM", "--ring", "{f}")
FORECAST = ("forecast", "--trace", "{f}", "--horizon", "2", "--model", "naive",
            "--out", "{d}/fc.json")
PLAN = ("plan", "--method", "dp", "-o", "{d}/plan.yml")
PLAN_FC = (*PLAN, "--forecast", "{f}")
PLAN_TRACE = (*PLAN, "--trace", "{d}/none.csv")

# The phrases each file-level problem must print.
BINARY = "not a text file (NUL byte"
NOT_UTF8 = "is not UTF-8"

FILE_CASES: list[Case] = [
    # ---- plan files (kairos explain reads them with load_plan)
    Case("plan-binary", EXPLAIN, ("{f}", "plan", BINARY), b"\x89PNG\r\n\x1a\n\x00\x00"),
    Case("plan-latin1", EXPLAIN, ("{f}", "plan", NOT_UTF8, "0xe9"),
         "cluster: caf\xe9\n".encode("latin-1")),
    Case("plan-nul-inside", EXPLAIN, ("{f}", "plan", BINARY), b"kind: kairos-plan\n\x00\n"),
    Case("plan-empty", EXPLAIN, ("{f}", "plan", "the file is empty"), ""),
    Case("plan-whitespace-only", EXPLAIN, ("{f}", "plan", "the file is empty"), " \n\n"),
    Case("plan-huge", EXPLAIN, ("{f}", "plan", "file is too large"),
         b"#" * (inputs.PLAN.max_bytes + 1)),
    Case("plan-not-yaml", EXPLAIN, ("{f}", "plan", "not valid YAML at line"),
         "kind: [kairos-plan\n"),
    Case("plan-two-documents", EXPLAIN, ("{f}", "plan", "not valid YAML"),
         "kind: a\n---\nkind: b\n"),
    Case("plan-top-level-list", EXPLAIN, ("{f}", "plan", "expected a mapping"), "- 1\n- 2\n"),
    Case("plan-top-level-scalar", EXPLAIN, ("{f}", "plan", "expected a mapping"), "42\n"),
    Case("plan-missing-fields", EXPLAIN, ("{f}", "schema_version", "missing"),
         "kind: kairos-plan\n"),
    Case("plan-step-1e300", EXPLAIN, ("{f}", "horizon.step_seconds", "(a week)"),
         _plan_head("step_seconds: 1.0e+300, steps: 4")),
    Case("plan-steps-huge", EXPLAIN, ("{f}", "horizon.steps", "is over 10000"),
         _plan_head("step_seconds: 60, steps: 1000000000000")),
    Case("plan-missing-file", ("explain", "{d}/nope.yml"), ("nope.yml", "plan", "no such file")),
    Case("plan-is-directory", ("explain", "{d}"), ("plan", "is a directory")),
    # ---- performance model files (kairos tune --model)
    Case("model-binary", (*TUNE, "--model", "{f}"), ("{f}", "performance model", BINARY),
         b"\x00\x01\x02\x03", ".json"),
    Case("model-latin1", (*TUNE, "--model", "{f}"), ("{f}", "performance model", NOT_UTF8),
         '{"name": "mod\xe8le"}'.encode("latin-1"), ".json"),
    Case("model-empty", (*TUNE, "--model", "{f}"),
         ("{f}", "performance model", "the file is empty"), "", ".json"),
    Case("model-truncated", (*TUNE, "--model", "{f}"),
         ("{f}", "performance model", "not valid JSON at line 1"),
         '{"kind": "kairos-perfmodel", "coef": [[1, 2', ".json"),
    Case("model-top-level-list", (*TUNE, "--model", "{f}"),
         ("{f}", "kind", "not a kairos-perfmodel document"), "[1, 2]", ".json"),
    Case("model-ragged-coef", (*TUNE, "--model", "{f}"),
         ("{f}", "coef[1]", "ragged array"), _ragged_coef, ".json"),
    Case("model-nan-sigma", (*TUNE, "--model", "{f}"),
         ("{f}", "sigma", "expected a finite number, got nan"), _model(sigma=float("nan")),
         ".json"),
    Case("model-infinite-coef", (*TUNE, "--model", "{f}"),
         ("{f}", "coef[0][0]", "expected a finite number, got inf"), _coef00(math.inf),
         ".json"),
    Case("model-1e300-coef", (*TUNE, "--model", "{f}"),
         ("{f}", "coef[0][0]", "out of range"), _coef00(1e300), ".json"),
    Case("model-negative-sigma", (*TUNE, "--model", "{f}"), ("{f}", "sigma", "out of range"),
         _model(sigma=-0.5), ".json"),
    Case("model-unknown-key", (*TUNE, "--model", "{f}"), ("{f}", "sigam", "unknown key"),
         _model(sigam=0.1), ".json"),
    Case("model-missing-coef", (*TUNE, "--model", "{f}"), ("{f}", "coef", "missing"),
         _model(coef=...), ".json"),
    Case("model-version-string", (*TUNE, "--model", "{f}"),
         ("{f}", "version", "expected an integer"), _model(version="one"), ".json"),
    Case("model-features-not-list", (*TUNE, "--model", "{f}"),
         ("{f}", "features", "expected a list"), _model(features={"a": 1}), ".json"),
    Case("model-feature-unknown-key", (*TUNE, "--model", "{f}"),
         ("{f}", "features[0].colour", "unknown key"), _feature(colour="red"), ".json"),
    Case("model-feature-bound-string", (*TUNE, "--model", "{f}"),
         ("{f}", "features[0].lo", "expected a number"),
         _feature(kind="linear", lo="low"), ".json"),
    Case("model-wrong-classes", (*TUNE, "--model", "{f}"), ("{f}", "classes", "do not match"),
         _model(classes=["read", "write"]), ".json"),
    Case("model-deeply-nested", (*TUNE, "--model", "{f}"),
         ("{f}", "performance model", "nested deeper"), "[" * 100_000 + "]" * 100_000, ".json"),
    Case("model-giant-integer", (*TUNE, "--model", "{f}"),
         ("{f}", "performance model", "not valid JSON", "digits"),
         '{"version": ' + "9" * 5000 + "}", ".json"),
    # ---- ring descriptions (kairos batches --ring)
    Case("ring-duplicate-host", BATCHES, ("{f}", "nodes[2].host", "duplicate host 'a'"),
         _ring("  - {host: a, tokens: [1]}\n  - {host: b, tokens: [2]}\n"
               "  - {host: a, tokens: [3]}\n", "{ks: {replication: {datacenter1: 2}}}")),
    Case("ring-duplicate-address", BATCHES, ("{f}", "nodes[1].address", "duplicate address"),
         _ring("  - {host: a, address: 10.0.0.1, tokens: [1]}\n"
               "  - {host: b, address: 10.0.0.1, tokens: [2]}\n",
               "{ks: {replication: {datacenter1: 1}}}")),
    Case("ring-rf-above-hosts", BATCHES,
         ("{f}", "keyspaces.ks.replication.datacenter1", "RF 5 is more than the 3 host(s)"),
         _ring(keyspaces="{ks: {replication: {datacenter1: 5}}}")),
    Case("ring-negative-rf", BATCHES,
         ("{f}", "keyspaces.ks.replication.datacenter1", "negative RF"),
         _ring(keyspaces="{ks: {replication: {datacenter1: -1}}}")),
    Case("ring-rf-not-integer", BATCHES,
         ("{f}", "keyspaces.ks.replication.datacenter1", "expected an integer"),
         _ring(keyspaces="{ks: {replication: {datacenter1: three}}}")),
    Case("ring-unknown-top-key", BATCHES, ("{f}", "replicas", "unknown key"),
         _ring(extra="replicas: 3\n")),
    Case("ring-unknown-node-key", BATCHES, ("{f}", "nodes[0].hots", "unknown key"),
         _ring("  - {host: a, hots: x, tokens: [1]}\n",
               "{ks: {replication: {datacenter1: 1}}}")),
    Case("ring-token-infinite", BATCHES, ("{f}", "nodes[0].tokens[0]", "expected an integer"),
         _ring("  - {host: a, tokens: [.inf]}\n", "{ks: {replication: {datacenter1: 1}}}")),
    Case("ring-token-out-of-range", BATCHES, ("{f}", "nodes[0].tokens[0]", "out of range"),
         _ring(f"  - {{host: a, tokens: [{2**70}]}}\n",
               "{ks: {replication: {datacenter1: 1}}}")),
    Case("ring-tokens-not-list", BATCHES, ("{f}", "nodes[0].tokens", "expected a list"),
         _ring("  - {host: a, tokens: 5}\n", "{ks: {replication: {datacenter1: 1}}}")),
    Case("ring-missing-tokens", BATCHES, ("{f}", "token_ranges", "node 'b' lists no tokens"),
         _ring("  - {host: a, tokens: [1]}\n  - {host: b}\n",
               "{ks: {replication: {datacenter1: 1}}}")),
    Case("ring-range-start-string", BATCHES, ("{f}", "token_ranges[0].start", "expected an"),
         _ring("  - {host: a}\n", "{ks: {replication: {datacenter1: 1}}}",
               "token_ranges:\n  - {start: low, end: 1, replicas: {ks: [a]}}\n")),
    Case("ring-empty-nodes", BATCHES, ("{f}", "nodes", "expected a non-empty list"),
         "nodes: []\nkeyspaces: {ks: {replication: {datacenter1: 1}}}\n"),
    Case("ring-top-level-list", BATCHES, ("{f}", "ring", "expected a mapping"), "- a\n- b\n"),
    Case("ring-binary", BATCHES, ("{f}", "ring description", BINARY), b"\x00" * 16),
    Case("ring-deeply-nested", BATCHES, ("{f}", "ring description", "nested deeper than"),
         _deep_yaml),
    Case("ring-alias-bomb", BATCHES, ("{f}", "ring description", "YAML aliases"),
         _billion_laughs),
    # ---- current-configuration files (tune --current, plan --current)
    Case("current-list", (*TUNE, "--current", "{f}"),
         ("{f}", "current configuration", "expected a mapping, got a list"), "- a\n- b\n"),
    Case("current-unknown-parameter", (*TUNE, "--current", "{f}"),
         ("{f}", "concurent_reads", "unknown cassandra parameter"), "concurent_reads: 32\n"),
    Case("current-value-1e300", (*TUNE, "--current", "{f}"),
         ("{f}", "concurrent_reads", "above the maximum"), "concurrent_reads: 1.0e+300\n"),
    Case("current-value-nan", (*TUNE, "--current", "{f}"),
         ("{f}", "concurrent_reads", "not an integer"), "concurrent_reads: .nan\n"),
    Case("current-value-list", (*TUNE, "--current", "{f}"),
         ("{f}", "concurrent_reads", "not an integer"), "concurrent_reads: [1, 2]\n"),
    Case("current-huge", (*TUNE, "--current", "{f}"),
         ("{f}", "current configuration", "file is too large"),
         "concurrent_reads: 32\n" + "#" * inputs.CONFIG.max_bytes),
    Case("current-binary-for-plan", (*PLAN_TRACE, "--current", "{f}"),
         ("{f}", "current configuration", BINARY), b"\x7fELF\x02\x01\x00"),
    Case("current-latin1-for-plan", (*PLAN_TRACE, "--current", "{f}"),
         ("{f}", "current configuration", NOT_UTF8), "compaction: d\xe9faut\n".encode("latin-1")),
    # ---- CSV traces (kairos forecast --trace)
    Case("trace-milliseconds", FORECAST,
         ("{f}", "timestamp: row 0", "look like milliseconds"),
         _csv(*[f"{(T0 + 60 * i) * 1000},1,1,0,0,0" for i in range(5)]), ".csv"),
    Case("trace-microseconds", FORECAST,
         ("{f}", "timestamp: row 0", "look like microseconds"),
         _csv(*[f"{(T0 + 60 * i) * 1_000_000},1,1,0,0,0" for i in range(5)]), ".csv"),
    Case("trace-step-over-a-week", FORECAST,
         ("{f}", "timestamp", "median step of 6e+07s"),
         _csv(*[f"{60_000_000 * i},1,1,0,0,0" for i in range(5)]), ".csv"),
    Case("trace-load-1e300", FORECAST, ("{f}", "load: row 1", "out of range"),
         _csv(f"{T0},1,1,0,0,0", f"{T0 + 60},1e300,1,0,0,0"), ".csv"),
    Case("trace-negative-load", FORECAST, ("{f}", "load: row 1", "negative load"),
         _csv(f"{T0},1,1,0,0,0", f"{T0 + 60},-5,1,0,0,0"), ".csv"),
    Case("trace-nan-load", FORECAST, ("{f}", "load: row 1", "not finite"),
         _csv(f"{T0},1,1,0,0,0", f"{T0 + 60},nan,1,0,0,0"), ".csv"),
    Case("trace-ragged-long-row", FORECAST, ("{f}", "line 3", "ragged rows"),
         _csv(f"{T0},1,1,0,0,0", f"{T0 + 60},1,1,0,0,0,9"), ".csv"),
    Case("trace-ragged-short-row", FORECAST,
         ("{f}", "mix[scan]: row 1", "missing or not finite"),
         _csv(f"{T0},1,1,0,0,0", f"{T0 + 60},1,1,0,0"), ".csv"),
    Case("trace-header-only", FORECAST, ("{f}", "trace", "no rows"), HEADER, ".csv"),
    Case("trace-empty", FORECAST, ("{f}", "trace", "the file is empty"), "", ".csv"),
    Case("trace-binary", FORECAST, ("{f}", "trace", BINARY), b"PK\x03\x04\x00\x00", ".csv"),
    Case("trace-latin1", FORECAST, ("{f}", "trace", NOT_UTF8),
         (HEADER + f"{T0},1,1,0,0,0 # r\xe9sum\xe9\n").encode("latin-1"), ".csv"),
    Case("trace-duplicate-column", FORECAST, ("{f}", "'load'", "appears twice"),
         "timestamp,load,load,read,update,insert,scan\n", ".csv"),
    Case("trace-mix-over-one", FORECAST, ("{f}", "mix[read]: row 0", "outside [0, 1]"),
         _csv(f"{T0},1,1.5,0,0,0", f"{T0 + 60},1,1,0,0,0"), ".csv"),
    # ---- JSON traces
    Case("json-trace-string-number", FORECAST, ("{f}", "load: row 0", "is not a number"),
         _json_trace(load=["1.5", 2, 3]), ".json"),
    Case("json-trace-boolean", FORECAST, ("{f}", "load: row 1", "is not a number"),
         _json_trace(load=[1, True, 3]), ".json"),
    Case("json-trace-nan", FORECAST, ("{f}", "load: row 2", "not finite"),
         lambda: _json_trace()().replace('"load": [1, 2, 3]', '"load": [1, 2, NaN]'), ".json"),
    Case("json-trace-milliseconds", FORECAST, ("{f}", "timestamp: row 0", "milliseconds"),
         _json_trace(timestamps=[T0 * 1000, T0 * 1000 + 60_000, T0 * 1000 + 120_000],
                     step_seconds=60_000), ".json"),
    Case("json-trace-unknown-key", FORECAST, ("{f}", "lod", "unknown key"),
         _json_trace(lod=[1, 2, 3]), ".json"),
    Case("json-trace-empty-list", FORECAST, ("{f}", "trace", "holds no series"), "[]", ".json"),
    Case("json-trace-engine-list", FORECAST, ("{f}", "engine", "expected a string"),
         _json_trace(engine=["cassandra"]), ".json"),
    Case("json-trace-step-string", FORECAST, ("{f}", "step_seconds", "expected a number"),
         _json_trace(step_seconds="60s"), ".json"),
    # ---- forecast files (kairos plan --forecast)
    Case("forecast-unknown-key", PLAN_FC, ("{f}", "horizon", "unknown key"),
         _forecast(horizon=4), ".json"),
    Case("forecast-missing-mix", PLAN_FC, ("{f}", "mix", "missing"), _forecast(mix=...),
         ".json"),
    Case("forecast-ragged-load", PLAN_FC, ("{f}", "load_mean", "must be 4 finite numbers"),
         _forecast(load={"mean": [1.0, 2.0], "lower": [0.0] * 4, "upper": [9.0] * 4}),
         ".json"),
    Case("forecast-load-1e300", PLAN_FC, ("{f}", "load.mean: row 0", "out of range"),
         _forecast(load={"mean": [1e300] * 4, "lower": [0.0] * 4, "upper": [1e300] * 4}),
         ".json"),
    Case("forecast-milliseconds", PLAN_FC, ("{f}", "timestamps: row 0", "milliseconds"),
         _forecast(timestamps=[(T0 + 60 * i) * 1000 for i in range(4)]), ".json"),
    Case("forecast-level-string", PLAN_FC, ("{f}", "level", "expected a number"),
         _forecast(level="90%"), ".json"),
    Case("forecast-mix-not-mapping", PLAN_FC, ("{f}", "mix.read", "expected a mapping"),
         _forecast(mix={"read": [0.25], "update": [], "insert": [], "scan": []}), ".json"),
    Case("forecast-binary", PLAN_FC, ("{f}", "forecast", BINARY), b"\x1f\x8b\x08\x00", ".json"),
    # ---- workload store (kairos collect --export)
    Case("store-text-file",
         ("collect", "--engine", "redis", "--store", "{f}", "--export", "{d}/x.csv"),
         ("{f}", "store", "not a usable SQLite database"), "timestamp,load\n1,2\n", ".db"),
    # ---- state files found by name
    Case("calibration-state-binary", ("calibrate", "--dir", "{t}/cal", "--fit-only"),
         ("{f}", "calibration state", BINARY), b"\x00\x00\x00\x01", name="cal/state.json"),
    Case("calibration-state-not-json", ("calibrate", "--dir", "{t}/cal", "--fit-only"),
         ("{f}", "calibration state", "not valid JSON at line 1"), "{runs: 3}",
         name="cal/state.json"),
    Case("autopilot-state-latin1", ("autopilot", "status", "--state-dir", "{t}/ap"),
         ("{f}", "autopilot state", NOT_UTF8), '{"paused": "d\xe9j\xe0"}'.encode("latin-1"),
         name="ap/lab-cassandra-autopilot.json"),
    Case("autopilot-lock-binary", ("autopilot", "status", "--state-dir", "{t}/ap"),
         ("{f}", "autopilot run lock", BINARY), b"pid\x00\x01", name="ap/lab-autopilot.lock"),
    Case("store-directory",
         ("collect", "--engine", "redis", "--store", "{d}", "--export", "{d}/x.csv"),
         ("store", "not a regular file")),
]


def _opt(command: tuple[str, ...], option: str, value: str, phrase: str) -> Case:
    return Case(f"{command[0]}{option}={value}", (*command, option, value),
                (f"argument {option}", phrase))


#: (command, option, value) that argparse refuses as out of the option's range.
OUT_OF_RANGE = [
    *((PLAN_TRACE, option, value) for option, value in [
        ("--samples", "100000"), ("--generations", "-1"), ("--searches", "0"),
        ("--workers", "0"), ("--workers", "100000"), ("--rf", "0"), ("--tolerate", "-1"),
        ("--restart-seconds", "nan"), ("--restart-seconds", "inf"),
        ("--survivor-penalty", "1.5"), ("--compaction-seconds", "-1"),
        ("--season-length", "1")]),
    *((FORECAST, option, value) for option, value in [
        ("--level", "1.5"), ("--folds", "0"), ("--step", "-5"), ("--max-fill", "-1")]),
    (("batches", "--cl", "ONE", "--hosts", "a,b,c"), "--rf", "99"),
    (("load", "--engine", "redis"), "--value-size", "10"),
    (("load", "--engine", "redis"), "--rate", "0"),
    (("simulate",), "--deviation", "2"),
    (("collect", "--engine", "redis"), "--count", "0"),
    (("autopilot", "decide"), "--stale-fraction", "2"),
    (("tune", "--engine", "redis", "--mix", "read=1"), "--top", "0"),
]  # fmt: skip
CLI_CASES: list[Case] = [
    _opt(PLAN_TRACE, "--horizon", "1000000", "integer in [2, 10000]"),
    _opt(PLAN_TRACE, "--horizon", "1", "integer in [2, 10000]"),
    _opt(PLAN_TRACE, "--horizon", "many", "expected an integer"),
    _opt(PLAN_TRACE, "--samples", "-3", "integer in [0, 1000]"),
    _opt(PLAN_TRACE, "--population", "2", "integer in [4, 10000]"),
    _opt(PLAN_TRACE, "--seed", "-1", "integer in [0, 4294967295]"),
    _opt(FORECAST, "--horizon", "0", "integer in [1, 10000]"),
    _opt(FORECAST, "--step", "1e9", "at most a week"),
    _opt(("load", "--engine", "redis"), "--port", "70000", "a TCP port"),
    *(_opt(command, option, value, "is out of range") for command, option, value in OUT_OF_RANGE),
    # checks the command makes itself (not argparse): still exit 2, option named
    Case("plan-samples-times-horizon",
         (*PLAN_TRACE, "--samples", "1000", "--horizon", "10000"),
         ("--samples", "--horizon", "would not fit in memory")),
    Case("plan-rf-above-hosts", (*PLAN_TRACE[:-2], "--forecast", "{f}", "--rf", "5"),
         ("--rf", "replication factor 5 is more than the 3 host(s)"), _forecast(), ".json"),
    Case("batches-rf-above-hosts", ("batches", "--cl", "ONE", "--hosts", "a,b,c", "--rf", "5"),
         ("--rf", "replication factor 5 is more than the 3 host(s)")),
    Case("batches-duplicate-hosts", ("batches", "--cl", "ONE", "--hosts", "a,b,a", "--rf", "2"),
         ("--hosts", "duplicate host 'a'")),
    Case("tune-current-not-json-is-a-file", (*TUNE, "--current", "[1, 2]"),
         ("current configuration", "[1, 2]", "no such file")),
    Case("tune-inline-current-bad-json", (*TUNE, "--current", "{concurrent_reads: 1}"),
         ("--current", "not valid JSON")),
]

CASES = FILE_CASES + CLI_CASES


def _materialise(case: Case, tmp_path: Path) -> tuple[list[str], tuple[str, ...]]:
    """Write the case's file; return its argv and expectations with paths filled in."""
    f = tmp_path / (case.name or f"input{case.suffix}")
    d = tmp_path / "scratch"
    d.mkdir()
    content = case.content() if callable(case.content) else case.content
    if content is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content if isinstance(content, bytes) else content.encode())
    fill = {"{f}": str(f), "{d}": str(d), "{t}": str(tmp_path)}

    def sub(text: str) -> str:
        for key, value in fill.items():
            text = text.replace(key, value)
        return text

    return [sub(a) for a in case.argv], tuple(sub(e) for e in case.expect)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``main(argv)`` in-process: its exit status (argparse exits) and stderr.

    Any other exception escapes and fails the test: that is the traceback a user
    would have seen.
    """
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    return rc, capsys.readouterr().err


def test_the_corpus_is_large_and_ids_are_unique() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_clearly(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, expect = _materialise(case, tmp_path)
    rc, err = _run(argv, capsys)
    assert rc != 0, f"accepted silently: {argv}"
    assert rc == 2, f"exit status {rc}, stderr: {err}"
    assert "Traceback" not in err
    for phrase in expect:
        assert phrase in err, f"{phrase!r} not in stderr: {err}"


# ------------------------------------------------------------------- controls
def test_good_inputs_still_succeed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.json"
    model.write_text(default_model_path("cassandra").read_text())
    current = tmp_path / "current.yml"
    current.write_text("\ufeffconcurrent_reads: 64  # a BOM and a comment are fine\n")
    empty_current = tmp_path / "empty.yml"
    empty_current.write_text("# defaults\n")
    ring = tmp_path / "ring.yml"
    ring.write_text(RING_OK)
    trace = tmp_path / "trace.csv"
    trace.write_text(_csv(*_good_rows()))
    json_trace = tmp_path / "trace.json"
    n = 24
    json_trace.write_text(_json_trace(
        timestamps=[T0 + 60 * i for i in range(n)], load=[100 + i % 3 for i in range(n)],
        mix={"read": [0.7] * n, "update": [0.3] * n, "insert": [0] * n, "scan": [0] * n},
    )())
    fc = tmp_path / "fc.json"
    runs = [
        [*TUNE, "--model", str(model), "--current", str(current)],
        [*TUNE, "--current", '{"concurrent_reads": 64}'],
        ["batches", "--cl", "QUORUM", "--ring", str(ring)],
        ["batches", "--cl", "ONE", "--hosts", "a,b,c", "--rf", "3"],
        ["forecast", "--trace", str(json_trace), "--horizon", "2", "--model", "naive",
         "--out", str(tmp_path / "fc-json.json")],
        ["forecast", "--trace", str(trace), "--horizon", "4", "--model", "naive",
         "--out", str(fc)],
        ["plan", "--forecast", str(fc), "--current", str(empty_current), "--method", "dp",
         "--horizon", "4", "-o", str(tmp_path / "plan.yml")],
        ["explain", str(tmp_path / "plan.yml")],
    ]
    for argv in runs:
        rc, err = _run(argv, capsys)
        assert rc == 0, f"{argv}: {err}"


def test_cli_number_types_accept_the_bounds_themselves() -> None:
    assert inputs.HORIZON("1") == 1 and inputs.HORIZON("10000") == 10_000
    assert inputs.FRACTION("0") == 0.0 and inputs.FRACTION("1") == 1.0
    assert inputs.STEP_SECONDS(str(inputs.MAX_STEP_SECONDS)) == inputs.MAX_STEP_SECONDS
    with pytest.raises(Exception, match="out of range"):
        inputs.STEP_SECONDS("0")
