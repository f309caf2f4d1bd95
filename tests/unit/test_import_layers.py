"""The planner's layers (docs/architecture.md, "Layers"; issue 39 parts 2 and 3).

Three rules, read from the source with ``ast`` (nothing is imported):

1. Each package or top-level module of planner/ imports only from the layers below its
   own (:data:`LAYERS`), never from its own layer's other units or from above.
2. No planner module other than planner/cli.py and planner/commands/* imports the CLI
   (``planner.cli`` or ``planner.commands``): the layers below are called with values,
   never through command lines.
3. No module in library/ imports ``planner.cli``: a module runs the published ``kairos``
   command, not the planner's CLI module.

Imports inside functions count as much as those at the top of a file; those under
``if TYPE_CHECKING:`` do not (they name a type for the checker and never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = ("planner.cli", "planner.commands")


#: planner/'s units from the bottom layer up: a package (a folder) or a top-level module.
#: A unit imports only from the layers below its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("inputs", "engines", "_module_utils"),
    ("workload", "topology"),
    ("model", "forecast"),
    ("plan",),
    ("executor",),
    ("planning",),
    ("autopilot",),
    ("report", "loadgen"),
    ("calibrate", "lab"),
    ("cli", "commands"),
)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in (
                    "TYPE_CHECKING", "typing.TYPE_CHECKING"):
                todo.extend(child.orelse)
                continue
            todo.append(child)
    return out


def imported(source: str, *, package: str = "") -> set[str]:
    """Every module name an import in ``source`` names: ``import a.b`` gives ``a.b``;
    ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a module); a relative import
    is resolved against ``package``."""
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
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


def unit_of(module: str) -> str | None:
    """The layer unit of a planner module name (``planner.model.spaces`` -> ``model``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "planner" and len(parts) > 1 else None


def layer_breaks(root: Path = REPO) -> list[str]:
    """``file: imports unit (layer i) from unit (layer j)`` for every import that is not
    from a lower layer; also every unit of planner/ that no layer names."""
    layer = {unit: i for i, units in enumerate(LAYERS) for unit in units}
    planner = root / "planner"
    breaks = [f"planner/{p.name}: in no layer of LAYERS" for p in sorted(planner.iterdir())
              if ((p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and
                  (p / "__init__.py").exists())) and p.name.removesuffix(".py") not in layer]
    for file in sorted(planner.rglob("*.py")):
        rel = file.relative_to(root)
        own = rel.parts[1].removesuffix(".py")
        if own == "__init__" or own not in layer:
            continue
        package = ".".join(rel.with_suffix("").parts[:-1])
        for name in sorted(imported(file.read_text(encoding="utf-8"), package=package)):
            other = unit_of(name)
            if other is None or other == own or other not in layer:
                continue
            if layer[other] >= layer[own]:
                breaks.append(f"{rel.as_posix()}: {own} (layer {layer[own]}) imports {name} "
                              f"({other}, layer {layer[other]})")
    return breaks


def test_each_unit_imports_only_from_the_layers_below() -> None:
    breaks = layer_breaks()
    assert not breaks, "imports against the layers (docs/architecture.md):\n" + "\n".join(breaks)


def test_the_layer_rule_catches_an_import_from_above(tmp_path: Path) -> None:
    (tmp_path / "planner" / "model").mkdir(parents=True)
    (tmp_path / "planner" / "plan.py").write_text("from planner.model.spaces import x\n")
    (tmp_path / "planner" / "model" / "__init__.py").write_text("")
    (tmp_path / "planner" / "model" / "spaces.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planner.plan import P\n"
        "def f():\n    from planner.plan import load_plan\n")
    (tmp_path / "planner" / "model" / "tuner.py").write_text("import planner.forecast.models\n")
    (tmp_path / "planner" / "gadgets.py").write_text("")
    assert layer_breaks(tmp_path) == [
        "planner/gadgets.py: in no layer of LAYERS",
        "planner/model/spaces.py: model (layer 3) imports planner.plan (plan, layer 4)",
        "planner/model/spaces.py: model (layer 3) imports planner.plan.load_plan (plan, layer 4)",
        "planner/model/tuner.py: model (layer 3) imports planner.forecast.models "
        "(forecast, layer 3)",
    ]


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
