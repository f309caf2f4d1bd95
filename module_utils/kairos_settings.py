"""Compare a setting as Kairos wrote it with what a node reports (read-back after a rollout).

cassandra.yaml says ``row_cache_size: 64MiB`` and ``memtable_cleanup_threshold: 0.33``;
``system_views.settings`` answers ``64MiB`` and ``0.33000001`` (a float), booleans as
``true``. Equal means equal after reading both as the same kind of value.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40}


def _as_number(value):
    """A number (sizes in bytes), or None when ``value`` is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = _SIZE.match(str(value))
    if not match:
        return None
    return float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def _as_bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return {"true": True, "false": False}.get(text)


def same_setting(expected, actual):
    """Whether a node's reported ``actual`` is the ``expected`` value Kairos wrote."""
    if actual is None:
        return expected is None
    if isinstance(expected, bool) or _as_bool(expected) is not None:
        return _as_bool(expected) == _as_bool(actual)
    want, got = _as_number(expected), _as_number(actual)
    if want is not None and got is not None:
        # float32 on the node: 0.33 reads back as 0.33000001
        return abs(want - got) <= 1e-4 * max(abs(want), 1e-9)
    return str(expected).strip().lower() == str(actual).strip().lower()


def mismatches(expected, actual):
    """``key: expected X, reads Y`` for every key whose read-back differs."""
    return [
        f"{key}: expected {want!r}, reads {actual.get(key)!r}"
        for key, want in sorted(expected.items())
        if not same_setting(want, actual.get(key))
    ]
