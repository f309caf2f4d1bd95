"""No function in planner/, library/ or module_utils/ is over 80 lines (issue 39, "Done when").

A function's length runs from its ``def`` line to its last line, docstring, comments and
blank lines included (decorators not); a nested function counts in its parent and on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("planner", "library", "module_utils")
MAX_LINES = 80

#: Known offenders, none since issue 39: a function may not pass 80 lines, and one listed
#: here (should one ever have to be) may only shrink.
KNOWN_LONG: dict[str, int] = {}


def function_lengths(root: Path = REPO) -> dict[str, int]:
    """``path::qualified.name`` -> lines, for every function in ``root``'s FOLDERS."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                lengths[f"{path}::{name}"] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, path, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, path, f"{prefix}{child.name}.")
            else:
                visit(child, path, prefix)

    for folder in FOLDERS:
        for file in sorted((root / folder).rglob("*.py")):
            path = file.relative_to(root).as_posix()
            visit(ast.parse(file.read_text(encoding="utf-8"), filename=path), path, "")
    return lengths


def test_no_new_function_is_over_80_lines() -> None:
    lengths = function_lengths()
    offenders = {
        name: lines for name, lines in sorted(lengths.items())
        if lines > MAX_LINES and lines > KNOWN_LONG.get(name, 0)
    }
    assert not offenders, (
        f"functions over {MAX_LINES} lines (split them into named helpers): "
        + ", ".join(f"{name} ({lines})" for name, lines in offenders.items())
    )


def test_the_known_long_functions_only_shrink() -> None:
    lengths = function_lengths()
    stale = {
        name: lengths.get(name) for name in KNOWN_LONG
        if lengths.get(name, 0) <= MAX_LINES
    }
    assert not stale, (
        "no longer over the limit (or gone), delete from KNOWN_LONG: "
        + ", ".join(f"{name} ({lines})" for name, lines in stale.items())
    )
    assert all(name.startswith("planner/") for name in KNOWN_LONG)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n    return 1\n", {"m.py::f": 2}),
        ("class C:\n    def g(self):\n        def h():\n            pass\n        return h\n",
         {"m.py::C.g": 4, "m.py::C.g.h": 2}),
        ("@decorator\nasync def f():\n    '''doc'''\n\n    return 1\n", {"m.py::f": 4}),
    ],
)
def test_lengths_are_counted_from_def_to_the_last_line(
    tmp_path: Path, source: str, expected: dict[str, int]
) -> None:
    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "m.py").write_text(source)
    for folder in FOLDERS[1:]:
        (tmp_path / folder).mkdir()
    assert function_lengths(tmp_path) == {f"planner/{k}": v for k, v in expected.items()}
