"""No decision in playbooks/ or roles/ is a long Jinja expression (issue 39, "Done when").

Decisions are made in Python (planner/, module_utils/) and the playbooks carry them out: a
condition (``when``, ``that``, ``failed_when``, ``changed_when``, ``until``) or a templated
value that branches (``if``, ``and``, ``or``) stays under 200 characters, whitespace
collapsed. Messages (``msg``, ``fail_msg``, ``success_msg``) only word what was decided and
are not held to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MAX_CHARS = 200
CONDITIONS = {"when", "that", "failed_when", "changed_when", "until"}
MESSAGES = {"msg", "fail_msg", "success_msg"}
BRANCH = re.compile(r"\s(if|and|or)\s")
TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.S)


def decisions(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(where, expression)`` for every condition and branching template under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{where}.{key}"
            if key in CONDITIONS:
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, str):
                        yield path, item
            elif key not in MESSAGES:
                yield from decisions(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from decisions(value, f"{where}[{i}]")
    elif isinstance(node, str):
        for expr in TEMPLATE.findall(node):
            if BRANCH.search(expr):
                yield where, expr


def long_decisions(root: Path = REPO) -> list[str]:
    found = []
    for folder in ("playbooks", "roles"):
        for file in sorted((root / folder).rglob("*.yml")):
            doc = yaml.safe_load(file.read_text(encoding="utf-8"))
            for where, expr in decisions(doc):
                size = len(" ".join(expr.split()))
                if size > MAX_CHARS:
                    found.append(f"{file.relative_to(root)}{where}: {size} characters")
    return found


def test_no_decision_expression_is_over_200_characters() -> None:
    found = long_decisions()
    assert not found, ("decide in Python and pass the verdict (docs/architecture.md, "
                       "'Layers'): " + "; ".join(found))


@pytest.mark.parametrize(
    ("doc", "caught"),
    [
        ({"when": "a " * 120}, [".when"]),
        ({"that": ["x", "b " * 120]}, [".that"]),
        ([{"vars": {"v": "{{ 'a' if " + "c and " * 40 + "d else 'b' }}"}}], ["[0].vars.v"]),
        ({"argv": "{{ [" + "'x', " * 60 + "] }}"}, []),  # long, but it decides nothing
        ({"msg": "{{ 'a' if " + "c and " * 40 + "d else 'b' }}"}, []),  # a message
    ],
)
def test_the_rule_finds_conditions_and_branching_templates(doc: Any, caught: list[str]) -> None:
    found = [where for where, expr in decisions(doc) if len(" ".join(expr.split())) > MAX_CHARS]
    assert found == caught
