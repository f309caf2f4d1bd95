"""planner.engines is the one definition of the engines (issue 39 part 4's first piece)."""

from __future__ import annotations

import ast
from pathlib import Path

from planner.engines import ENGINES

REPO = Path(__file__).resolve().parents[2]


def test_no_planner_module_defines_its_own_list_of_engines() -> None:
    found = []
    for file in sorted((REPO / "planner").rglob("*.py")):
        if file.name == "engines.py":
            continue
        for node in ast.parse(file.read_text(encoding="utf-8")).body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == "ENGINES" for t in targets):
                found.append(file.relative_to(REPO).as_posix())
    assert found == []


def test_the_modules_that_name_the_engines_share_the_definition() -> None:
    from planner import loadgen_workload, metrics_collect, plan, spaces
    from planner.commands import metrics

    assert ENGINES == ("cassandra", "redis")
    for module in (loadgen_workload, metrics_collect, plan, spaces, metrics):
        assert module.ENGINES is ENGINES
