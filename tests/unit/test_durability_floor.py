"""The durability floor (issue 41 part 4): candidates below it are outside the search space,
the plan records it, `kairos explain` says so, and a plan whose step runs below it is
refused before any node is touched, naming the file, the field and the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.errors import ValidationError
from planner.plan import load_plan
from planner.planning.pipeline import OptimiserOptions, PlanRequest, make_plan
from planner.workload.series import WorkloadSeries, save_trace

HOSTS = ("redis1", "redis2", "redis3")
AOF = {"appendonly": True, "appendfsync": "everysec"}


@pytest.fixture(scope="module")
def forecast(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A write-heavy Redis workload, 16 steps of 20 s, forecast with `naive`."""
    tmp = tmp_path_factory.mktemp("floor")
    n = 16
    save_trace(
        WorkloadSeries(
            engine="redis", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, 5e4),
            mix={"read": np.full(n, 0.2), "write": np.full(n, 0.8), "other": np.zeros(n)},
            step_seconds=20.0,
        ),
        tmp / "trace.csv",
    )  # fmt: skip
    out = tmp / "forecast.json"
    assert main(["forecast", "--trace", str(tmp / "trace.csv"), "--horizon", "16", "--model",
                 "naive", "--out", str(out)]) == 0  # fmt: skip
    return out


def _request(forecast: Path, **kw: Any) -> PlanRequest:
    base: dict[str, Any] = {
        "forecast": forecast, "engine": "redis", "hosts": HOSTS, "horizon": 16,
        "restart_seconds": 20.0, "served": "capacity", "confidence": 0.0, "scenarios": 0,
        "optimiser": OptimiserOptions(method="dp"),
    }
    return PlanRequest(**(base | kw))


def _configs(plan: Any) -> list[dict[str, Any]]:
    """Every configuration the plan runs, step by step."""
    config, out = dict(plan.current_config), []
    for s in plan.steps:
        config.update(s.target)
        out.append(dict(config))
    return out


def test_the_default_floor_is_the_running_aof_and_excludes_fsync_no(forecast: Path) -> None:
    lines: list[str] = []
    result = make_plan(_request(forecast, current=AOF), progress=lines.append)
    floor = result.plan.provenance["durability_floor"]
    assert floor["floor"] == {"appendonly": "yes", "appendfsync": "everysec"}
    assert floor["source"] == "the running configuration (no floor declared)"
    # the grid varies appendfsync over everysec and no: half of it is below the floor
    assert floor["excluded"] == floor["candidates"] // 2 > 0
    assert floor["excluded_by"] == {"appendfsync": floor["excluded"]}
    assert all(c["appendfsync"] == "everysec" for c in _configs(result.plan))
    assert any("durability floor appendonly yes, appendfsync >= everysec" in x for x in lines)


def test_without_the_aof_the_default_floor_excludes_nothing(forecast: Path) -> None:
    floor = make_plan(_request(forecast)).plan.provenance["durability_floor"]
    assert floor["floor"] == {"appendonly": "no"} and floor["excluded"] == 0


def test_a_declared_floor_refuses_the_candidates_below_it(forecast: Path) -> None:
    current = {"appendonly": True, "appendfsync": "always"}
    free = make_plan(_request(forecast, current=current,
                              durability_floor={"appendonly": "no"})).plan
    floored = make_plan(_request(forecast, current=current, durability_floor=AOF)).plan
    assert free.provenance["durability_floor"]["excluded"] == 0
    prov = floored.provenance["durability_floor"]
    assert prov["source"] == "declared (--durability-floor)"
    assert prov["excluded"] > 0 and prov["excluded_by"] == {"appendfsync": prov["excluded"]}
    assert all(c["appendfsync"] in ("always", "everysec") for c in _configs(floored))


def test_a_running_configuration_below_the_floor_is_refused(forecast: Path) -> None:
    with pytest.raises(ValidationError, match=(
            r"^--durability-floor: the running configuration is below the floor: appendonly: "
            r"'no' is below the durability floor 'yes'")):
        make_plan(_request(forecast, durability_floor=AOF))


def test_a_bad_floor_is_refused_before_planning(forecast: Path) -> None:
    with pytest.raises(ValidationError,
                       match=r"^--durability-floor\.appendfsync: 'sometimes' is not one of"):
        make_plan(_request(forecast, current=AOF,
                           durability_floor={"appendonly": "yes", "appendfsync": "sometimes"}))
    with pytest.raises(ValidationError, match=r"^--durability-floor: names Redis settings"):
        make_plan(PlanRequest(forecast=forecast, durability_floor=AOF))


def test_kairos_plan_reads_the_floor_inline_or_from_a_file(
    forecast: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "current.yml").write_text("appendonly: 'yes'\nappendfsync: always\n")
    (tmp_path / "floor.yml").write_text("appendonly: yes\nappendfsync: everysec\n")
    common = ["plan", "--forecast", str(forecast), "--engine", "redis", "--hosts",
              ",".join(HOSTS), "--horizon", "16", "--method", "dp", "--confidence", "0",
              "--scenarios", "0", "--current", str(tmp_path / "current.yml")]
    for i, floor in enumerate(('{"appendonly": "yes", "appendfsync": "everysec"}',
                               str(tmp_path / "floor.yml"))):
        out = tmp_path / f"plan{i}.yml"
        assert main([*common, "--durability-floor", floor, "-o", str(out)]) == 0
        prov = yaml.safe_load(out.read_text())["provenance"]["durability_floor"]
        assert prov["floor"] == {"appendonly": "yes", "appendfsync": "everysec"}
    assert main(["explain", str(tmp_path / "plan0.yml")]) == 0
    text = capsys.readouterr().out
    assert ("Durability floor: appendonly yes, appendfsync >= everysec (declared "
            "(--durability-floor)); " in text)
    assert main([*common, "--durability-floor", "[1, 2]", "-o", str(tmp_path / "x.yml")]) == 2
    assert "--durability-floor: '[1, 2]' is neither a mapping" in capsys.readouterr().err


# ------------------------------------------------------------ a plan file below the floor
T0 = "2026-11-21T12:00:00+00:00"


def _at(minute: int) -> str:
    return f"2026-11-21T12:{minute:02d}:00+00:00"


def _redis_plan(target: dict[str, Any], *, current: dict[str, Any],
                floor: dict[str, Any] | None = None, per_node: Any = None) -> dict[str, Any]:
    """A hand-written Redis plan: one live step at minute 5 until the end (minute 30)."""
    doc: dict[str, Any] = {
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "redis",
        "created_at": T0, "horizon": {"start": T0, "step_seconds": 60, "steps": 30},
        "availability": {"consistency_level": "ONE"}, "current_config": current,
        "provenance": {},
        "steps": [{"id": "s1", "due": _at(5), "until": _at(30), "target": target,
                   "per_node": per_node or {}, "live": sorted(target), "restart": [],
                   "batches": [],
                   "expected": {"benefit_ops": 1.0, "cost_ops": 0.0, "net_ops": 1.0}}],
    }
    if floor is not None:
        doc["provenance"]["durability_floor"] = {"floor": floor, "source": "declared"}
    return doc


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "bad-plan.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_validate_plan_refuses_a_target_below_the_running_durability(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _redis_plan({"appendfsync": "no"}, current=AOF))
    assert main(["validate-plan", str(path)]) == 2
    assert (f"{path}: steps[0].target.appendfsync: 'no' is below the durability floor "
            "'everysec' (the durability of current_config; always > everysec > no)"
            in capsys.readouterr().err)
    # the same step above the floor is a valid plan
    ok = _write(tmp_path, _redis_plan({"appendfsync": "always"}, current=AOF))
    assert main(["validate-plan", str(ok)]) == 0


def test_the_plans_recorded_floor_holds_its_steps(tmp_path: Path) -> None:
    current = {"appendonly": True, "appendfsync": "always"}
    doc = _redis_plan({"appendfsync": "no"}, current=current, floor={"appendonly": "no"})
    assert main(["validate-plan", str(_write(tmp_path, doc))]) == 0  # declared: no floor
    doc = _redis_plan({"appendonly": False}, current=current,
                      floor={"appendonly": "yes", "appendfsync": "everysec"})
    with pytest.raises(ValidationError, match=(
            r"bad-plan\.yml: steps\[0\]\.target\.appendonly: 'no' is below the durability "
            r"floor 'yes' \(provenance\.durability_floor: declared\)$")):
        load_plan(_write(tmp_path, doc))


def test_a_node_override_below_the_floor_is_refused(tmp_path: Path) -> None:
    doc = _redis_plan({"hz": 50}, current=AOF, per_node={"redis2": {"appendfsync": "no"}})
    doc["steps"][0]["live"] = ["appendfsync", "hz"]
    with pytest.raises(ValidationError,
                       match=r"steps\[0\]\.per_node\.redis2\.appendfsync: 'no' is below"):
        load_plan(_write(tmp_path, doc))


def test_a_bad_recorded_floor_is_refused_naming_the_field(tmp_path: Path) -> None:
    doc = _redis_plan({"hz": 50}, current=AOF, floor={"appendonly": "yes", "fsync": "always"})
    with pytest.raises(ValidationError, match=(
            r"bad-plan\.yml: provenance\.durability_floor\.floor\.fsync: not a durability "
            r"setting")):
        load_plan(_write(tmp_path, doc))


def test_the_pre_flight_refuses_it_before_any_node_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kairos rollout prepare` is the executor's first task (playbooks/tasks/
    rollout_prepare.yml): it fails, no rollout file is written, the play releases the lock."""
    path = _write(tmp_path, _redis_plan({"appendfsync": "no"}, current=AOF))
    out = tmp_path / "rollout.json"
    assert main(["rollout", "prepare", str(path), "--hosts", ",".join(HOSTS),
                 "--now", _at(6), "--out", str(out)]) == 2
    assert "steps[0].target.appendfsync: 'no' is below the durability floor" in \
        capsys.readouterr().err
    assert not out.exists()
    assert main(["explain", str(path)]) == 2


# ------------------------------------------------------------ the inventory -> the tick
REPO = Path(__file__).resolve().parents[2]


def _redis_plan_options(inventory: dict[str, Any]) -> dict[str, Any]:
    """The Redis plan options the autopilot role's default renders into the tick's inputs."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    defaults = yaml.safe_load((REPO / "roles/kairos_autopilot/defaults/main.yml").read_text())
    expr = defaults["kairos_autopilot_engine_settings"]["redis"]["plan_options"]
    templar = Templar(loader=DataLoader(),
                      variables={"kairos_autopilot_redis_plan_options": {}, **inventory})
    return dict(templar.template(trust_as_template(expr)))


def test_the_inventory_floor_reaches_the_autopilots_plan(forecast: Path, tmp_path: Path) -> None:
    import json

    from planner.autopilot.tick import plan_request
    from planner.autopilot.tick_inputs import load_tick_inputs
    from tests.unit.test_tick_inputs import DOCUMENT

    declared = {"appendonly": "yes", "appendfsync": "everysec"}
    for inventory, floor in (({"kairos_redis_durability_floor": declared}, declared),
                             ({}, None)):  # not declared: what the nodes run
        doc = json.loads(json.dumps(DOCUMENT))
        doc["engine"] = "redis"
        doc["plan"] |= {"tables": [], "engine_options": _redis_plan_options(inventory)}
        path = tmp_path / "tick.inputs.json"
        path.write_text(json.dumps(doc))
        inp = load_tick_inputs(path)
        request = plan_request(inp, forecast=None, forecast_path=str(forecast), ring=None,
                               first={}, base=tmp_path / "p")
        assert request.durability_floor == floor
    bad = {**doc, "plan": {**doc["plan"], "engine_options": {
        "durability_floor": {"appendfsync": "sometimes"}}}}
    path.write_text(json.dumps(bad))
    with pytest.raises(ValidationError, match=r"plan.engine_options.durability_floor"):
        load_tick_inputs(path)
    lab = yaml.safe_load((REPO / "inventories/local/group_vars/all.yml").read_text())
    assert lab["kairos_redis_durability_floor"] == {}


def test_the_pre_flight_holds_a_plan_to_the_floor_the_inventory_declares_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan searched above an older, lower floor is refused once the operator raised it:
    apply_plan_redis.yml passes the inventory's floor to `kairos rollout prepare`."""
    path = _write(tmp_path, _redis_plan({"appendfsync": "no"}, current=AOF,
                                        floor={"appendonly": "no"}))
    out = tmp_path / "rollout.json"
    prepare = ["rollout", "prepare", str(path), "--hosts", ",".join(HOSTS), "--now", _at(6),
               "--out", str(out)]
    assert main(prepare) == 0 and out.exists()  # valid against its own recorded floor
    out.unlink()
    assert main([*prepare, "--durability-floor", "{appendonly: yes, appendfsync: everysec}"]) == 2
    assert (f"{path}: steps[0].target.appendfsync: 'no' is below the durability floor "
            "'everysec' (the inventory's kairos_redis_durability_floor; always > everysec > "
            "no); make a new plan above the floor" in capsys.readouterr().err)
    assert not out.exists()
    assert main([*prepare, "--durability-floor", "{fsync: always}"]) == 2
    assert "--durability-floor.fsync: not a durability setting" in capsys.readouterr().err


def _prepare_argv(variables: dict[str, Any]) -> list[str]:
    """The argv playbooks/tasks/rollout_prepare.yml renders for `kairos rollout prepare`."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = yaml.safe_load((REPO / "playbooks/tasks/rollout_prepare.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Validate the plan and pick the step")
    task = next(t for t in block["block"] if t["name"] == "Ask the planner which step is due")
    templar = Templar(loader=DataLoader(), variables={
        "kairos_cli": "kairos", "plan": "/p.yml", "kairos_rollout_group": "redis",
        "groups": {"redis": ["redis1", "redis2"]}, "kairos_rollout_file": "/r.json",
        **variables})
    rendered = {name: [templar.template(trust_as_template(a)) for a in expr]
                if isinstance(expr, list) else templar.template(trust_as_template(expr))
                for name, expr in task["vars"].items()}
    templar.available_variables = {**templar.available_variables, **rendered}
    return list(templar.template(trust_as_template(task["ansible.builtin.command"]["argv"])))


def test_the_executor_passes_the_inventorys_floor_to_the_pre_flight() -> None:
    import json

    floor = {"appendonly": "yes", "appendfsync": "everysec"}
    argv = _prepare_argv({"kairos_engine": "redis", "kairos_redis_durability_floor": floor})
    assert argv[-2] == "--durability-floor" and json.loads(argv[-1]) == floor
    for variables in ({"kairos_engine": "redis", "kairos_redis_durability_floor": {}},
                      {"kairos_engine": "redis"}):
        assert "--durability-floor" not in _prepare_argv(variables)
    assert _prepare_argv({"kairos_engine": "redis", "step": "s2", "retry_failed": True,
                          "kairos_redis_durability_floor": floor})[:13] == [
        "kairos", "rollout", "prepare", "/p.yml", "--engine", "redis", "--hosts",
        "redis1,redis2", "--out", "/r.json", "--step", "s2", "--retry-failed"]


def test_an_engine_without_a_floor_has_none_to_check(tmp_path: Path) -> None:
    """The playbook passes a floor the inventory sets for every group; a Cassandra plan has
    no durability floor (the registry), so the planner has nothing to refuse."""
    from planner.executor.rollout import prepare

    plan = tmp_path / "cassandra.yml"
    plan.write_text(yaml.safe_dump({
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "cassandra",
        "created_at": "2026-11-28T10:00:00+00:00",
        "horizon": {"start": "2026-11-28T10:00:00+00:00", "step_seconds": 600, "steps": 6},
        "availability": {"consistency_level": "QUORUM", "tolerated_failures": 0},
        "current_config": {}, "steps": []}))
    got = prepare(plan, hosts=["cass1"], engine="cassandra",
                  durability_floor={"appendonly": "yes", "appendfsync": "everysec"})
    assert got.status == "nothing-due" and got.engine == "cassandra"


def test_a_change_without_a_plan_is_held_to_the_inventorys_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """change_settings_redis.yml's `kairos rollout adhoc`: a setting below the floor is
    refused before any node is touched; what it leaves alone is not judged, so a change of
    another directive passes whatever the nodes run."""
    out = tmp_path / "rollout.json"
    adhoc = ["rollout", "adhoc", "--engine", "redis", "--hosts", ",".join(HOSTS), "--state",
             str(tmp_path / "s.json"), "--out", str(out),
             "--durability-floor", "{appendonly: yes, appendfsync: everysec, save: 900 1}"]
    for setting, field in (("appendfsync=no", "appendfsync"), ("appendonly=no", "appendonly")):
        assert main([*adhoc, f"--set={setting}"]) == 2, setting
        err = capsys.readouterr().err
        assert f"settings.{field}: " in err and "below the durability floor" in err, err
        assert "Traceback" not in err and not out.exists()
    assert main([*adhoc, "--set=hz=20", "--set=appendfsync=always"]) == 0 and out.exists()
    assert main([*adhoc[:-2], "--set=appendfsync=no"]) == 0  # no floor declared


def test_change_settings_redis_passes_the_inventorys_floor() -> None:
    import json

    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    play = yaml.safe_load((REPO / "playbooks/change_settings_redis.yml").read_text())
    tasks = [t for p in play for t in p.get("tasks", [])]
    block = next(t for t in tasks if t.get("name") == "Validate the settings")
    task = next(t for t in block["block"] if t["name"] == "Ask the planner for a one-step rollout")
    floor = {"appendonly": "yes", "appendfsync": "everysec"}
    for declared, want in ((floor, ["--durability-floor", json.dumps(floor)]), ({}, [])):
        templar = Templar(loader=DataLoader(), variables={
            "kairos_redis_durability_floor": declared, "settings": {"hz": 20}})
        expr = task["vars"]["__floor_argv"]
        assert [str(a) for a in templar.template(trust_as_template(expr))] == [
            w if i == 0 else str(templar.template(trust_as_template(
                "{{ kairos_redis_durability_floor | to_json }}"))) for i, w in enumerate(want)]
