"""planner.engines is the one definition of the engines and the registry of what each is
(issue 39 part 4)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from planner.engines import ENGINES, REGISTRY, Engine, Ref, get_engine
from planner.errors import ValidationError

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
    from planner import plan
    from planner.commands import metrics
    from planner.loadgen import workload as loadgen_workload
    from planner.report import metrics as metrics_collect

    assert ENGINES == ("cassandra", "redis")
    for module in (loadgen_workload, metrics_collect, plan, metrics):
        assert module.ENGINES is ENGINES


def test_the_registry_names_every_engine_once_in_the_cli_s_order() -> None:
    assert tuple(REGISTRY) == ENGINES
    assert all(REGISTRY[name].name == name for name in ENGINES)


@pytest.mark.parametrize("name", ENGINES)
def test_every_field_of_the_registry_is_set_for_every_engine(name: str) -> None:
    engine = get_engine(name)
    for f in fields(Engine):
        value = getattr(engine, f.name)
        assert value is not None and value != "" and value != (), f"{name}.{f.name}"
        if isinstance(value, Ref):
            assert value.get() is not None, f"{name}.{f.name}: {value.path} does not resolve"


@pytest.mark.parametrize("name", ENGINES)
def test_the_registry_s_executor_exists(name: str) -> None:
    engine = get_engine(name)
    assert (REPO / engine.executor_playbook).is_file()
    for entry in ("rollout_preflight", "rollout_live", "rollout_batch", "rollout_rescue"):
        assert (REPO / "roles" / engine.role / "tasks" / f"{entry}.yml").is_file()


@pytest.mark.parametrize("name", ENGINES)
def test_the_registry_s_pieces_are_the_engine_s(name: str) -> None:
    from planner.model.spaces import get_space
    from planner.workload.series import classes_for

    engine = get_engine(name)
    assert get_space(name) is engine.space.get()
    assert engine.space.get().engine == name
    assert classes_for(name) == engine.classes
    assert engine.memory_models.get().__name__.lower().startswith(name)


@pytest.mark.parametrize(
    ("module", "table"),
    [
        ("planner.workload.collect", "DEFAULT_PORTS"),
        ("planner.loadgen.config", "DEFAULT_HOSTS"),
        ("planner.loadgen.workload", "CLASSES"),
        ("planner.loadgen.workload", "DEFAULT_MIX"),
        ("planner.model.memory_split", "AFFECTS"),
        ("planner.model.memory_split", "PARAMETERS"),
        ("planner.model.memory_split", "REMAINDER"),
        ("planner.model.performance", "_ASSUMED_BASE"),
        ("planner.workload.store", "GAUGES"),
        ("planner.workload.store", "RAW_COUNTERS"),
        ("planner.workload.prometheus", "METRICS"),
        ("planner.workload.prometheus", "EXPORTER_HINT"),
        ("planner.workload.prometheus", "_SAMPLERS"),
        ("planner.lab.payoff", "ENGINE_SHAPES"),
        ("planner.lab.payoff", "PLAN_HOSTS"),
    ],
)
def test_a_module_s_table_per_engine_has_every_engine_of_the_registry(
    module: str, table: str
) -> None:
    """Values only one module reads stay there, keyed by the engine's name: a new engine in
    the registry must add its row (no engine falls through to another's)."""
    assert tuple(Ref(f"{module}:{table}").get()) == ENGINES


def test_an_unknown_engine_is_refused_naming_it_and_the_known_ones() -> None:
    with pytest.raises(ValidationError, match=r"^engine: unknown engine 'mysql'; known: "
                                              r"cassandra, redis$"):
        get_engine("mysql")


def test_a_ref_names_a_module_and_an_attribute() -> None:
    assert Ref("planner.engines:get_engine").get() is get_engine
    with pytest.raises(ValueError, match=r"package\.module:attribute"):
        Ref("planner.engines.get_engine")


def _names_an_engine(node: ast.expr) -> bool:
    """A literal engine name, or a tuple, list or set of literals holding one."""
    if isinstance(node, ast.Constant):
        return node.value in ENGINES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_an_engine(e) for e in node.elts)
    return False


def literal_engine_branches(source: str) -> list[int]:
    """The lines of ``source`` that compare something to a literal engine name
    (``engine == "redis"``, ``"cassandra" != e``, ``e in ("redis",)``, ``case "redis":``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(_names_an_engine(side) for side in (node.left, *node.comparators)):
                lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and _names_an_engine(node.value):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('if engine == "cassandra":\n    pass', [1]),
        ('x = 1 if "redis" != plan.engine else 2', [1]),
        ('ok = engine in ("cassandra", "mysql")', [1]),
        ('match engine:\n    case "redis":\n        pass', [2]),
        ("if plan.engine != engine:\n    pass", []),
        ('space = get_space("cassandra")', []),
        ('classes = {"redis": ("read",)}', []),
    ],
)
def test_the_branch_finder_finds_comparisons_with_a_literal_engine(
    source: str, found: list[int]
) -> None:
    assert literal_engine_branches(source) == found


def test_no_planner_module_branches_on_a_literal_engine_name() -> None:
    """Issue 39 part 4's criterion: what differs between engines is asked of the registry
    (planner.engines), never found by comparing an engine to ``"cassandra"`` or ``"redis"``."""
    found = {}
    for file in sorted((REPO / "planner").rglob("*.py")):
        if file.name == "engines.py":
            continue
        lines = literal_engine_branches(file.read_text(encoding="utf-8"))
        if lines:
            found[file.relative_to(REPO).as_posix()] = lines
    assert found == {}, f"ask planner.engines.get_engine(...) instead: {found}"
