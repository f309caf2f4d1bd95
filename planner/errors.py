"""Errors the planner raises for bad input; the CLI prints them without a traceback."""

from __future__ import annotations


class KairosError(Exception):
    """Base class: a problem a person can fix, with a message that names it."""


class ValidationError(KairosError, ValueError):
    """Input (a trace, a configuration, a plan) that breaks a rule; names the field and why."""
