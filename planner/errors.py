"""Errors the planner raises for bad input; the CLI prints them without a traceback."""

from __future__ import annotations

import contextlib
import math
import numbers
import signal
from collections.abc import Iterator
from typing import Any


class KairosError(Exception):
    """Base class: a problem a person can fix, with a message that names it."""


class ValidationError(KairosError, ValueError):
    """Input (a trace, a configuration, a plan) that breaks a rule; names the field and why."""


def at_least(owner: object, **minimums: float) -> None:
    """Raise ValidationError naming the first attribute of ``owner`` below its minimum.

    ``at_least(self, seed=0)`` checks ``self.seed >= 0``; an optional attribute left unset
    (None) passes.
    """
    for name, minimum in minimums.items():
        value = getattr(owner, name)
        if value is not None and value < minimum:
            raise ValidationError(f"{name}: must be >= {minimum}, got {value}")


def finite_at_least(name: str, value: Any, low: float = 0.0) -> None:
    """Raise ValidationError naming ``name`` unless ``value`` is a finite real number (not a
    bool) ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value < low:
        raise ValidationError(f"{name}: must be a finite number >= {low:g}, got {value!r}")


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM unwinds like Ctrl-C (KeyboardInterrupt).

    A long command that `kill` or a service manager stops then stops the load it started and
    restores what it changed, as on Ctrl-C; unhandled, SIGTERM ends the process at once and
    leaves its load workers running. A background job of a non-interactive shell ignores
    SIGINT, so SIGTERM is what stops it.
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
