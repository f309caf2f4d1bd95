"""The CLI is the top layer (docs/architecture.md, "Layers"; issue 39 part 2).

Two rules, read from the source with ``ast`` (nothing is imported):

1. No planner module other than planner/cli.py and planner/commands/* imports the CLI
   (``planner.cli`` or ``planner.commands``): the layers below are called with values,
   never through command lines.
2. No module in library/ imports ``planner.cli``: a module runs the published ``kairos``
   command, not the planner's CLI module.

Imports inside functions count as much as those at the top of a file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = ("planner.cli", "planner.commands")


def imported(source: str, *, package: str = "") -> set[str]:
    """Every module name an import in ``source`` names: ``import a.b`` gives ``a.b``;
    ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a module); a relative import
    is resolved against ``package``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def names_any(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(f"{p}.") for p in prefixes))


def offenders(folder: str, prefixes: tuple[str, ...], *, allowed: tuple[str, ...] = ()
              ) -> dict[str, list[str]]:
    """``path -> the forbidden names it imports`` for the .py files under ``folder``."""
    found = {}
    for file in sorted((REPO / folder).rglob("*.py")):
        path = file.relative_to(REPO).as_posix()
        if path in allowed or any(path.startswith(a) for a in allowed if a.endswith("/")):
            continue
        package = ".".join(file.relative_to(REPO).with_suffix("").parts[:-1])
        bad = names_any(imported(file.read_text(encoding="utf-8"), package=package), prefixes)
        if bad:
            found[path] = bad
    return found


def test_only_the_cli_imports_the_cli() -> None:
    bad = offenders("planner", CLI, allowed=("planner/cli.py", "planner/commands/"))
    assert not bad, f"planner modules importing the CLI (call the layer below instead): {bad}"


def test_no_custom_module_imports_the_planner_s_cli() -> None:
    bad = offenders("library", ("planner.cli",))
    assert not bad, f"library/ modules importing planner.cli: {bad}"


@pytest.mark.parametrize(
    ("source", "package", "caught"),
    [
        ("import planner.cli", "planner", ["planner.cli"]),
        ("from planner.cli import main", "planner", ["planner.cli", "planner.cli.main"]),
        ("from planner import cli", "planner", ["planner.cli"]),
        ("from planner.commands.plan import run", "planner",
         ["planner.commands.plan", "planner.commands.plan.run"]),
        ("def f():\n    from .commands import collect", "planner",
         ["planner.commands", "planner.commands.collect"]),
        ("from . import cli", "planner", ["planner.cli"]),
        ("from planner import planning, client", "planner", []),
        ("import planner.clients", "planner", []),
    ],
)
def test_the_rule_sees_every_spelling_of_an_import(
    source: str, package: str, caught: list[str]
) -> None:
    assert names_any(imported(source, package=package), CLI) == caught
