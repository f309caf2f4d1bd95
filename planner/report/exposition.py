"""Kairos' own metrics in the Prometheus text exposition format (docs/metrics.md).

A :class:`Family` is one metric: its name, HELP text, TYPE and samples. :func:`render`
writes families in the text format (version 0.0.4): a ``# HELP`` and a ``# TYPE`` line,
then one line per sample, label values escaped. :func:`write_textfile` writes the text for
node-exporter's textfile collector: a temporary file in the same directory, readable by
the collector's user, then a rename, so the collector never reads half a file.

Samples carry no timestamp: the textfile collector refuses them; times are gauges named
``*_timestamp_seconds`` (Unix time), which PromQL compares with ``time()``.

What the metrics are, and where they come from, is :mod:`planner.report.metrics`.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import ValidationError

__all__ = ["Family", "Sample", "render", "stateset", "write_textfile"]

#: Metric and label names of the exposition format (no colons: those are for rules).
NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = ("gauge", "counter")


@dataclass(frozen=True)
class Sample:
    """One sample: its labels (name -> value) and its value."""

    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass
class Family:
    """One metric: every sample of a name, with its HELP text and TYPE.

    Samples are added with :meth:`add`; a second sample with the same labels is refused
    (a scrape with duplicate series is rejected whole by node-exporter).
    """

    name: str
    help: str
    type: str = "gauge"
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValidationError(f"metric name {self.name!r}: letters, digits and _ only")
        if self.type not in TYPES:
            raise ValidationError(f"{self.name}: type must be one of {', '.join(TYPES)}")
        if self.type == "counter" and not self.name.endswith("_total"):
            raise ValidationError(f"{self.name}: a counter's name ends with _total")

    def add(self, value: float | bool, **labels: str) -> None:
        """Add a sample with string labels (a bool value is 1 or 0)."""
        for name in labels:
            if not NAME.match(name) or name.startswith("__"):
                raise ValidationError(f"{self.name}: bad label name {name!r}")
        key = tuple(sorted((k, str(v)) for k, v in labels.items()))
        if any(s.labels == key for s in self.samples):
            raise ValidationError(f"{self.name}: duplicate series {dict(key)}")
        self.samples.append(Sample(key, float(value)))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    """A sample value as the format spells it (``+Inf``, ``-Inf``, ``NaN``, else repr)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def render(families: Iterable[Family]) -> str:
    """The families in the text exposition format; a family without samples is left out
    (HELP and TYPE alone would only announce a metric that has no data)."""
    lines: list[str] = []
    seen: set[str] = set()
    for fam in families:
        if fam.name in seen:
            raise ValidationError(f"{fam.name}: metric family given twice")
        seen.add(fam.name)
        if not fam.samples:
            continue
        lines.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.type}")
        for s in fam.samples:
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels)
            lines.append(f"{fam.name}{{{labels}}} {format_value(s.value)}" if labels
                         else f"{fam.name} {format_value(s.value)}")
    return "\n".join(lines) + "\n" if lines else ""


def write_textfile(text: str, path: str | Path, *, mode: int = 0o644) -> Path:
    """Write ``text`` to ``path`` atomically for node-exporter's textfile collector.

    The temporary file is made in ``path``'s directory (a rename is atomic only within one
    file system) with a name the collector ignores (it reads ``*.prom`` only), given
    ``mode`` (the collector runs as another user), flushed to disk, then renamed over
    ``path``. On any error the temporary file is removed and ``path`` is left as it was.
    """
    p = Path(path)
    if p.suffix != ".prom":
        raise ValidationError(
            f"--textfile {p}: node-exporter's textfile collector reads *.prom files only")
    if not p.parent.is_dir():
        raise ValidationError(f"--textfile {p}: directory {p.parent} does not exist")
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


def stateset(family: Family, states: Iterable[str], current: str | None,
             label: str, **labels: str) -> None:
    """One sample per state, 1 for ``current`` and 0 for the others (an unknown
    ``current`` is added): an alert on a state sees 0, not a vanished series, after it."""
    names = list(dict.fromkeys(states))
    if current is not None and current not in names:
        names.append(current)
    for state in names:
        family.add(1.0 if state == current else 0.0, **labels, **{label: state})
