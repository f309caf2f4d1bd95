"""Errors the planner raises for bad input; the CLI prints them without a traceback."""

from __future__ import annotations


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
