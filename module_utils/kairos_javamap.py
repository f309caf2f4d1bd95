"""Read the maps Cassandra prints with Java's toString(): the one parser, both sides of the seam.

``system_views.settings`` shows a map-valued setting as java.util.Map.toString(), e.g. the
row ``memtable.configurations`` of Cassandra 5.0.6: ``{default=trie+, skiplist=SkipListMemtable,
trie=TrieMemtable}``; ``nodetool describecluster`` prints a keyspace's replication as
``SimpleStrategy {replication_factor=3}``. Each memtable configuration is an InheritingClass,
``[<inherits>+][<class_name>][<parameters map>]``.

Plain Python with no Ansible import: the modules import it as
``ansible.module_utils.kairos_javamap`` (module_utils/kairos_settings.py, the read-back on
the nodes) and the planner through planner/_module_utils.py (planner/model/spaces.py, the running
memtable), so both read the same text the same way.
"""

from __future__ import annotations

import re

# InheritingClass.toString() (Cassandra 5.0.6): ``trie+``, ``TrieMemtable``,
# ``trie+SkipListMemtable``, ``org.apache.cassandra.db.memtable.TrieMemtable{shards=4}``.
_INHERITING_CLASS = re.compile(
    r"^(?:(?P<inherits>[^{}+=]+)\+)?(?P<class_name>[^{}+=]*)(?P<parameters>\{.*\})?$"
)


def java_map(text: str) -> dict[str, str]:
    """``{a=b, c=d{e=f}}`` (java.util.Map.toString) -> ``{"a": "b", "c": "d{e=f}"}``.

    Entries are split on the commas outside braces, so a nested map stays one value (its
    text, for the caller to read with this function again); keys and values are stripped,
    and an empty entry (``{}``, a trailing comma) is skipped.

    Raises
    ------
    ValueError
        The text is not in braces, or an entry has no ``=``.
    """
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not a map: {text!r}")
    parts, depth, start, body = [], 0, 0, text[1:-1]
    for i, char in enumerate(body):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    entries: dict[str, str] = {}
    for part in (p.strip() for p in parts):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"not a map entry: {part!r}")
        entries[key.strip()] = value.strip()
    return entries


def memtable_configuration(text: str) -> dict[str, str | None]:
    """One memtable configuration (InheritingClass.toString) -> its three parts, as text.

    ``{"inherits": ..., "class_name": ..., "parameters": ...}``: ``inherits`` and
    ``parameters`` are None when absent, ``class_name`` is ``""``; ``parameters`` is the
    map's text (:func:`java_map` reads it).

    Raises
    ------
    ValueError
        The text is not one configuration (e.g. a bare map, or ``a=b``).
    """
    match = _INHERITING_CLASS.match(text)
    if not match:
        raise ValueError(f"not a memtable configuration: {text!r}")
    return match.groupdict()
