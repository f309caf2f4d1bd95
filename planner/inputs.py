"""The one safe way the planner reads a file, checks its shape, and bounds a CLI number.

Every file the planner reads (plan, performance model, ring description, current
configuration, trace, forecast, calibration and autopilot state) goes through
:func:`read_text` and one of :func:`load_yaml`, :func:`load_json`, :func:`load_csv`:

1. **size**: the file must be a regular file no larger than its :class:`FileKind`'s
   ``max_bytes`` (checked before reading, so a huge file costs no memory);
2. **encoding**: UTF-8 (a leading byte-order mark is dropped); a NUL byte or bytes that
   are not UTF-8 are refused as "not a text file";
3. **parse**: YAML, JSON or CSV, the error naming the file, the line and what is wrong;
   a document nested too deeply or holding an absurdly long integer is refused too.

Then the shape helpers (:func:`mapping`, :func:`sequence`, :func:`closed_keys`,
:func:`string`, :func:`number`, :func:`integer`, :func:`number_array`) check what was
parsed; each raises :class:`planner.errors.ValidationError` naming the field (a path such
as ``token_ranges[3].replicas``) and the problem. Wrap field checks in :func:`in_file`
so the message names the file as well.

Domain bounds where a physical bound exists: a load is at most :data:`MAX_LOAD_OPS`
operations per second, and timestamps are epoch **seconds**: :func:`check_epoch_seconds`
refuses (does not convert) values above :data:`MAX_EPOCH_SECONDS` and steps longer than
:data:`MAX_STEP_SECONDS`, which is what millisecond (or finer) timestamps look like.
Refusing keeps one meaning per column; the message says how to convert.

CLI numbers use the argparse types :func:`bounded_int` and :func:`bounded_float`: a value
outside the range is a usage error (exit status 2) naming the option, the range and why.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import ValidationError

if TYPE_CHECKING:  # numpy and pandas load on first use: `kairos --help` stays fast
    import numpy as np
    import pandas as pd

__all__ = [
    "CONFIG",
    "FORECAST",
    "MAX_EPOCH_SECONDS",
    "MAX_LOAD_OPS",
    "MAX_STEP_SECONDS",
    "MODEL",
    "OBSERVATIONS",
    "PLAN",
    "RING",
    "STATE",
    "TRACE",
    "FileKind",
    "bounded_float",
    "bounded_int",
    "check_epoch_seconds",
    "check_loads",
    "closed_keys",
    "in_file",
    "integer",
    "load_csv",
    "load_json",
    "load_yaml",
    "mapping",
    "number",
    "number_array",
    "read_text",
    "sequence",
    "string",
]

MiB = 1024 * 1024


@dataclass(frozen=True)
class FileKind:
    """What a file is (for messages) and how large it may be.

    Parameters
    ----------
    what : str
        Named in every message, e.g. ``"performance model"``.
    max_bytes : int
        Larger files are refused before they are read.
    """

    what: str
    max_bytes: int


# Limits: a generous multiple of the largest real file of each kind, small enough that
# parsing it cannot exhaust a 2-GiB machine (YAML objects take ~10-50x the text).
#: A plan of 10,000 steps on 1,000 hosts is ~5 MiB of YAML.
PLAN = FileKind(what="plan", max_bytes=16 * MiB)
#: The shipped priors are ~20 KiB; a fitted model with hundreds of features stays < 1 MiB.
MODEL = FileKind(what="performance model", max_bytes=16 * MiB)
#: 1,000 nodes x 256 vnodes of tokens with replicas is ~30 MiB.
RING = FileKind(what="ring description", max_bytes=64 * MiB)
#: A mapping of a dozen parameters.
CONFIG = FileKind(what="current configuration", max_bytes=1 * MiB)
#: A year of one-minute rows for a few scopes (~100 bytes a row).
TRACE = FileKind(what="trace", max_bytes=256 * MiB)
#: A forecast of the maximum horizon with backtests is < 5 MiB.
FORECAST = FileKind(what="forecast", max_bytes=64 * MiB)
#: Calibration measurements, performance-model observations.
OBSERVATIONS = FileKind(what="observations", max_bytes=64 * MiB)
#: Calibration / autopilot state files.
STATE = FileKind(what="state", max_bytes=64 * MiB)

#: Largest load (ops/s) accepted: ~1000x the biggest published Cassandra deployments
#: (millions of ops/s); anything above is a unit error, and ~1e300 overflows the maths.
MAX_LOAD_OPS = 1e12
#: Epoch seconds above this (year 5138) are milliseconds (1.7e12 today) or finer.
MAX_EPOCH_SECONDS = 1e11
#: The longest plausible step (a week); millisecond timestamps of a one-minute trace
#: read as seconds give 60,000-s steps only when they start near 0, so this catches
#: the coarse cases the epoch bound cannot.
MAX_STEP_SECONDS = 7 * 86400.0
#: Deepest nesting accepted in a YAML/JSON document (real files nest < 10 levels).
MAX_DEPTH = 64


# ----------------------------------------------------------------- messages
def _fail(where: str, problem: str) -> ValidationError:
    return ValidationError(f"{where}: {problem}")


@contextmanager
def in_file(path: str | Path) -> Iterator[None]:
    """Prefix the message of a ValidationError raised inside with ``path``.

    A message that already names the file (``<path>:``) is left alone, so nesting is
    harmless; a short path that merely occurs in the text does not count.
    """
    try:
        yield
    except ValidationError as exc:
        msg = str(exc)
        if f"{path}:" in msg:
            raise
        raise ValidationError(f"{path}: {msg}") from None


# -------------------------------------------------------------------- reading
def read_text(path: str | Path, *, kind: FileKind) -> str:
    """The UTF-8 text of ``path`` after the size and encoding checks.

    Raises
    ------
    ValidationError
        ``<what> <path>: <problem>`` for a missing, unreadable, non-regular, too large,
        binary or non-UTF-8 file.
    """
    p = Path(path)
    where = f"{kind.what} {p}"
    try:
        st = p.stat()
    except FileNotFoundError:
        raise _fail(where, "no such file") from None
    except OSError as exc:
        raise _fail(where, f"cannot read it ({exc.strerror or exc})") from None
    if p.is_dir():
        raise _fail(where, "is a directory, not a file")
    # Only regular files have a size to check up front; a FIFO or device is refused
    # rather than read without a bound.
    if not p.is_file():
        raise _fail(where, "is not a regular file")
    if st.st_size > kind.max_bytes:
        raise _fail(
            where,
            f"file is too large: {st.st_size:,} bytes, the limit for a {kind.what} is "
            f"{kind.max_bytes:,} bytes",
        )
    try:
        with p.open("rb") as handle:
            # Read one byte past the limit: the file may have grown since stat().
            raw = handle.read(kind.max_bytes + 1)
    except OSError as exc:
        raise _fail(where, f"cannot read it ({exc.strerror or exc})") from None
    if len(raw) > kind.max_bytes:
        raise _fail(where, f"file is too large: over {kind.max_bytes:,} bytes")
    return _decode(raw, where)


def _decode(raw: bytes, where: str) -> str:
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise _fail(where, f"not a text file (NUL byte at offset {nul}); is it binary?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _fail(
            where,
            f"not a text file: byte 0x{raw[exc.start]:02x} at offset {exc.start} (line {line}) "
            "is not UTF-8; save the file as UTF-8",
        ) from None
    return text.removeprefix("\ufeff")


def _empty(text: str, where: str, allow_empty: bool) -> bool:
    if text.strip():
        return False
    if not allow_empty:
        raise _fail(where, "the file is empty")
    return True


def _parse(text: str, where: str, what: str, loads: Callable[[str], Any],
           syntax_error: type[Exception], problem: Callable[[Any], str]) -> Any:
    """``loads(text)``, every failure named "not valid <what>", then the depth check.

    ``problem(exc)`` says where and what a ``syntax_error`` is: ``" at line 3, column 5: ..."``.
    """
    try:
        data = loads(text)
    except syntax_error as exc:
        raise _fail(where, f"not valid {what}{problem(exc)}") from None
    except RecursionError:
        raise _fail(where, f"not valid {what}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise _fail(where, f"not valid {what}: {exc}") from None
    _check_depth(data, where, budget=len(text) + 1)
    return data


def _yaml_problem(exc: Any) -> str:
    import yaml

    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{at}: {exc.problem or exc}"
    return f": {exc}"


def load_yaml(path: str | Path, *, kind: FileKind, allow_empty: bool = False) -> Any:
    """Read and parse a YAML file (JSON is YAML too); ``None`` for an allowed empty file."""
    import yaml

    text = read_text(path, kind=kind)
    where = f"{kind.what} {path}"
    if _empty(text, where, allow_empty):
        return None
    return _parse(text, where, "YAML", yaml.safe_load, yaml.YAMLError, _yaml_problem)


def load_json(path: str | Path, *, kind: FileKind) -> Any:
    """Read and parse a JSON file."""
    text = read_text(path, kind=kind)
    where = f"{kind.what} {path}"
    _empty(text, where, False)
    return _parse(text, where, "JSON", json.loads, json.JSONDecodeError,
                  lambda exc: f" at line {exc.lineno}, column {exc.colno}: {exc.msg}")


def json_argument(flag: str, text: str, kind: type[dict[str, Any]] | type[list[Any]]) -> Any:
    """A command-line option's JSON value, which must be an object (``dict``) or a list."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{flag}: not JSON: {exc}") from None
    if not isinstance(value, kind):
        want = "object" if kind is dict else "list"
        raise ValidationError(f"{flag}: expected a JSON {want}, got {type(value).__name__}")
    return value


def _check_depth(data: Any, where: str, budget: int) -> None:
    """Refuse a document nested deeper than MAX_DEPTH or holding more than ``budget`` values.

    Written out, a document holds fewer values than its text has characters; more means
    YAML aliases expand it (a "billion laughs"), which every later check would walk.
    The walk stops at ``budget``, so it is linear in the file's size.
    """
    stack: list[tuple[Any, int]] = [(data, 1)]  # iterative: no stack overflow here
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > budget:
            raise _fail(where, "expands to more values than its text holds (YAML aliases?); "
                        "write the document out in full")
        if depth > MAX_DEPTH:
            raise _fail(where, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def load_csv(path: str | Path, *, kind: FileKind) -> pd.DataFrame:
    """Read a CSV file with a header row (leading spaces after commas are ignored).

    Ragged rows are refused: a row with more fields than the header is a parse error,
    and a short row leaves missing values that the field checks report by row.
    """
    import pandas as pd

    text = read_text(path, kind=kind)
    where = f"{kind.what} {path}"
    _empty(text, where, False)
    try:
        df = pd.read_csv(io.StringIO(text), skipinitialspace=True)
    except pd.errors.ParserError as exc:
        detail = str(exc).strip().splitlines()[-1]
        raise _fail(where, f"not a readable CSV (ragged rows?): {detail}") from None
    except (pd.errors.EmptyDataError, ValueError) as exc:
        raise _fail(where, f"not a readable CSV: {exc}") from None
    # pandas renames a repeated column ("load" -> "load.1"), hiding which value counts.
    header = [h.strip() for h in next(csv.reader(io.StringIO(text)), [])]
    dup = next((h for i, h in enumerate(header) if h in header[:i]), None)
    if dup is not None:
        raise _fail(where, f"column {dup!r} appears twice in the header")
    return df


# --------------------------------------------------------------------- shapes
def mapping(value: Any, field: str) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else a ValidationError naming ``field``."""
    if not isinstance(value, Mapping):
        raise _fail(field, f"expected a mapping, got {_type(value)}")
    return value


def sequence(
    value: Any, field: str, *, min_len: int = 0, max_len: int | None = None
) -> list[Any]:
    """``value`` as a list if it is one (a YAML/JSON array) of an allowed length."""
    if not isinstance(value, list | tuple):
        raise _fail(field, f"expected a list, got {_type(value)}")
    if len(value) < min_len:
        raise _fail(field, f"expected at least {min_len} item(s), got {len(value)}")
    if max_len is not None and len(value) > max_len:
        raise _fail(field, f"expected at most {max_len} item(s), got {len(value)}")
    return list(value)


def closed_keys(
    value: Mapping[str, Any],
    field: str,
    *,
    allowed: Iterable[str],
    required: Iterable[str] = (),
) -> None:
    """Refuse keys of a closed schema outside ``allowed`` and missing ``required`` keys.

    A misspelt key (``sigam``) would otherwise be ignored silently.
    """
    allowed_set = set(allowed)
    prefix = f"{field}." if field else ""
    for key in value:
        if key not in allowed_set:
            raise _fail(
                f"{prefix}{key}", f"unknown key; expected one of {', '.join(sorted(allowed_set))}"
            )
    for key in required:
        if key not in value:
            raise _fail(f"{prefix}{key}", "missing")


def string(value: Any, field: str, *, empty: bool = False) -> str:
    """``value`` if it is a string (non-empty unless ``empty``)."""
    if not isinstance(value, str):
        raise _fail(field, f"expected a string, got {_type(value)}")
    if not value and not empty:
        raise _fail(field, "expected a non-empty string")
    return value


def _is_number(value: Any) -> bool:
    # numpy scalars register as numbers.Real; bool is an int subclass but not a number here
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _type(value: Any) -> str:
    names = {type(None): "nothing (null)", bool: "true/false", dict: "a mapping",
             list: "a list", str: "a string", int: "an integer", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _range(lo: float | None, hi: float | None) -> str:
    def fmt(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"  # integers exactly (tokens)

    if lo is not None and hi is not None:
        return f"in [{fmt(lo)}, {fmt(hi)}]"
    if lo is not None:
        return f">= {fmt(lo)}"
    return f"<= {fmt(hi) if hi is not None else ''}"


def number(
    value: Any, field: str, *, lo: float | None = None, hi: float | None = None
) -> float:
    """``value`` as a finite float within ``[lo, hi]`` (``true``/``false`` are not numbers)."""
    if not _is_number(value):
        raise _fail(field, f"expected a number, got {_type(value)} {value!r}")
    try:
        x = float(value)
    except OverflowError:
        raise _fail(field, f"{value} is too large") from None
    if not math.isfinite(x):
        raise _fail(field, f"expected a finite number, got {x}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise _fail(field, f"{x:g} is out of range: must be {_range(lo, hi)}")
    return x


def integer(value: Any, field: str, *, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int within ``[lo, hi]``; a float with a fraction is refused."""
    if not _is_number(value):
        raise _fail(field, f"expected an integer, got {_type(value)} {value!r}")
    if not isinstance(value, numbers.Integral) and (
        not math.isfinite(value) or value != int(value)
    ):
        raise _fail(field, f"expected an integer, got {value!r}")
    n = int(value)
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise _fail(field, f"{n} is out of range: must be {_range(lo, hi)}")
    return n


def number_array(
    values: Any,
    field: str,
    *,
    ndim: int = 1,
    lo: float | None = None,
    hi: float | None = None,
) -> np.ndarray:
    """A finite float array of ``ndim`` dimensions from nested lists.

    Ragged nesting (rows of different lengths), non-numbers (``null``, strings,
    booleans), NaN/inf and values outside ``[lo, hi]`` are refused with the first
    offending index.
    """
    import numpy as np

    flat: list[float] = []
    _collect(values, field, ndim, flat, [])
    shape = _shape(values, ndim)
    if len(flat) != math.prod(shape):
        raise _fail(field, f"ragged array: expected a {' x '.join(map(str, shape))} array")
    arr = np.asarray(flat, dtype=float).reshape(shape)
    mask = np.zeros(arr.shape, dtype=bool)
    if lo is not None:
        mask |= arr < lo
    if hi is not None:
        mask |= arr > hi
    if mask.any():
        idx = tuple(int(i) for i in np.argwhere(mask)[0])
        at = "".join(f"[{i}]" for i in idx)
        raise _fail(f"{field}{at}", f"{arr[idx]:g} is out of range: must be {_range(lo, hi)}")
    return arr


def _collect(values: Any, field: str, depth: int, out: list[float], at: list[int]) -> None:
    where = field + "".join(f"[{i}]" for i in at)
    if depth == 0:
        if not _is_number(values):
            raise _fail(where, f"expected a number, got {_type(values)} {values!r}")
        x = float(values)
        if not math.isfinite(x):
            raise _fail(where, f"expected a finite number, got {x}")
        out.append(x)
        return
    rows = list(values) if hasattr(values, "__array__") else sequence(values, where)
    if depth > 1 and rows:
        lengths = [len(r) if isinstance(r, list | tuple) or hasattr(r, "__array__") else -1
                   for r in rows]
        for i, n in enumerate(lengths):
            if n >= 0 and n != lengths[0] and lengths[0] >= 0:
                raise _fail(
                    f"{where}[{i}]",
                    f"ragged array: row {i} has {n} values, row 0 has {lengths[0]}",
                )
    for i, v in enumerate(rows):
        _collect(v, field, depth - 1, out, [*at, i])


def _shape(values: Any, ndim: int) -> tuple[int, ...]:
    shape: list[int] = []
    cur = values
    for _ in range(ndim):
        shape.append(len(cur))
        cur = cur[0] if len(cur) else []
    return tuple(shape)


# ------------------------------------------------------------- domain bounds
def check_loads(load: np.ndarray, field: str) -> None:
    """Loads (ops/s) must lie in ``[0, MAX_LOAD_OPS]``."""
    import numpy as np

    arr = np.asarray(load, dtype=float)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0) | (arr > MAX_LOAD_OPS))
    if bad.size:
        i = int(bad[0])
        raise _fail(
            f"{field}: row {i}",
            f"load {arr[i]:g} ops/s is out of range: must be in [0, {MAX_LOAD_OPS:g}] "
            "(wrong unit?)",
        )


def check_epoch_seconds(timestamps: np.ndarray, field: str) -> None:
    """Refuse timestamps that are not epoch seconds (milliseconds, microseconds...).

    Two signs: a value above :data:`MAX_EPOCH_SECONDS` (epoch milliseconds of today are
    ~1.7e12), or a median step above :data:`MAX_STEP_SECONDS`. Both are refused rather
    than converted: a guessed unit silently mis-scales every step if the guess is wrong.
    """
    import numpy as np

    ts = np.asarray(timestamps, dtype=float)
    big = np.flatnonzero(np.abs(ts) > MAX_EPOCH_SECONDS)
    if big.size:
        i = int(big[0])
        unit = _unit_of(abs(float(ts[i])))
        raise _fail(
            f"{field}: row {i}",
            f"{ts[i]:.0f} is not epoch seconds (beyond the year 5000): the timestamps look "
            f"like {unit}; convert them to seconds (Kairos reads epoch seconds or ISO 8601)",
        )
    if ts.size >= 2:
        step = float(np.median(np.diff(ts)))
        if step > MAX_STEP_SECONDS:
            raise _fail(
                field,
                f"median step of {step:g}s is over {MAX_STEP_SECONDS:g}s (a week): are the "
                "timestamps in milliseconds? Kairos reads epoch seconds or ISO 8601",
            )


def _unit_of(value: float) -> str:
    if value < 1e14:
        return "milliseconds (divide by 1000)"
    if value < 1e17:
        return "microseconds (divide by 1e6)"
    return "nanoseconds (divide by 1e9)"


# ---------------------------------------------------------------- CLI numbers
def bounded_int(lo: int, hi: int, *, why: str = "") -> Callable[[str], int]:
    """An argparse ``type`` accepting integers in ``[lo, hi]``.

    ``why`` explains the bound in the message (e.g. the memory a larger value needs).
    """

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: must be an integer in [{lo}, {hi}]{reason}"
            )
        return value

    parse.__name__ = f"integer in [{lo}, {hi}]"
    return parse


def bounded_float(
    lo: float, hi: float, *, why: str = "", lo_open: bool = False
) -> Callable[[str], float]:
    """An argparse ``type`` accepting finite numbers in ``[lo, hi]`` (``(lo, hi]`` if open)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        left = "(" if lo_open else "["
        if (
            not math.isfinite(value)
            or value > hi
            or value < lo
            or (lo_open and value == lo)
        ):
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(
                f"{text.strip()} is out of range: must be a number in {left}{lo:g}, {hi:g}]"
                f"{reason}"
            )
        return value

    parse.__name__ = "number"
    return parse


# The bounds shared by several commands. Each says why; a command with its own reason
# builds its own bounded_int/bounded_float.
#: Seeds: numpy's generators take any non-negative integer; 32 bits keeps a seed
#: printable and portable (random.Random, numpy and DEAP agree on it).
SEED = bounded_int(0, 2**32 - 1, why="a 32-bit seed")
#: Why horizons stop at 10,000: 35 days of 5-minute steps; the optimiser's memory and
#: time grow linearly with it (1,000,000 exhausted memory).
HORIZON_WHY = "decision intervals; memory and time grow with it"
MAX_HORIZON = 10_000
HORIZON = bounded_int(1, MAX_HORIZON, why=HORIZON_WHY)
#: Season lengths in steps: at least 2, at most a horizon.
SEASON = bounded_int(2, 10_000, why="steps per season")
#: Step lengths in seconds: a positive value up to a week (see MAX_STEP_SECONDS).
STEP_SECONDS = bounded_float(0.0, MAX_STEP_SECONDS, lo_open=True, why="at most a week")
#: A duration in seconds (restart, compaction, warm-up, back-off): up to a day.
DURATION = bounded_float(0.0, 86400.0, why="seconds, at most a day")
#: A positive duration in seconds, up to a day (timeouts, intervals).
POSITIVE_DURATION = bounded_float(0.0, 86400.0, lo_open=True, why="seconds, at most a day")
#: Capacity the up nodes lose while a batch is down: 1 would mean they serve nothing.
SURVIVOR_PENALTY = bounded_float(0.0, 0.99, why="share of capacity lost; below 1")
#: A fraction in [0, 1].
FRACTION = bounded_float(0.0, 1.0, why="a fraction")
#: Replication factor: Cassandra caps nothing, but no deployment replicates > 32 times.
RF = bounded_int(1, 32, why="replication factor")
#: Extra node failures to survive: below the largest RF.
TOLERATE = bounded_int(0, 31, why="extra failures; must be below the RF")
#: GA population: DEAP needs 4 for its tournament and elite; 10,000 is already slow.
POPULATION = bounded_int(4, 10_000, why="GA population; time grows with it")
#: GA generations.
GENERATIONS = bounded_int(0, 10_000, why="GA generations; time grows with it")
#: Independent GA searches.
SEARCHES = bounded_int(1, 64, why="independent searches; time grows with it")
#: Worker processes: more than 256 only adds start-up cost on any one machine.
PROCESSES = bounded_int(1, 256, why="processes on one machine")
#: A TCP port.
PORT = bounded_int(1, 65535, why="a TCP port")
#: Rows or runs to show.
COUNT = bounded_int(1, 1_000_000, why="a count")

