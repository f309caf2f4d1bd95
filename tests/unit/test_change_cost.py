"""planner/model/change_cost.py: a compaction switch's measured cost under load, from a load's
served-operations series (synthetic series with known answers), its file, and how the plan
prices each direction with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.model.change_cost import ChangeCost, change_cost, load_change_costs, merge_entry
from planner.planning.costbenefit import ReconfigModel, transition_costs
from planner.planning.pipeline import (
    PlanRequest,
    _compaction_source,
    change_seconds_matrix,
    change_span_matrix,
)
from tests.unit.test_restart_impact import series

STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"


def entry(before: str, after: str, seconds: float) -> ChangeCost:
    return ChangeCost(parameter="compaction", before=before, after=after,
                      change_seconds=seconds, rewrite_seconds=2 * seconds, apply_seconds=5.0,
                      baseline_ops_per_s=400.0, steady_ops_per_s=450.0,
                      environment={"command": "bench/change_cost.py"})


def test_a_rewrite_at_half_the_new_rate_costs_half_its_length() -> None:
    # 400 ops/s before; the change at 100 s; 80 s of rewrite at 250 of the new 500 ops/s.
    def rate(t: float) -> float:
        return 400.0 if t < 100 else 250.0 if t < 180 else 500.0

    cost = change_cost(series(rate, 300), baseline=(30, 90), changed=(100, 108), settled=180,
                       end=300, parameter="compaction", before=STCS, after=LCS)
    assert cost.change_seconds == pytest.approx(40.0, abs=0.5)
    assert (cost.rewrite_seconds, cost.apply_seconds) == (80.0, 8.0)
    assert (cost.baseline_ops_per_s, cost.steady_ops_per_s) == (400.0, 500.0)


def test_noise_alone_is_not_charged() -> None:
    cost = change_cost(series(lambda t: 500.0, 300, jitter=0.05), baseline=(30, 90),
                       changed=(100, 104), settled=160, end=300, parameter="compaction",
                       before=LCS, after=STCS)
    assert cost.change_seconds < 2.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"baseline": (30, 35)}, "baseline: at least 10 s"),
    ({"changed": (80, 90)}, "changed: the change must start after the baseline"),
    ({"end": 190}, "end: at least 20 s"),
])
def test_bad_measurements_are_refused(kwargs: dict, message: str) -> None:
    args = {"baseline": (30, 90), "changed": (100, 108), "settled": 180, "end": 300,
            "parameter": "compaction", "before": STCS, "after": LCS, **kwargs}
    with pytest.raises(ValidationError, match=message):
        change_cost(series(lambda t: 500.0, 300), **args)


def test_each_direction_is_priced_from_its_own_measurement(tmp_path: Path) -> None:
    path = tmp_path / "change-costs.json"
    merge_entry(path, entry(STCS, LCS, 70.0))
    merge_entry(path, entry(LCS, STCS, 4.0))
    merge_entry(path, entry(STCS, LCS, 50.0))  # a new measurement replaces the old one
    costs = load_change_costs(path)
    assert [e.change_seconds for e in costs.entries] == [4.0, 50.0]
    assert costs.seconds_for("compaction", STCS, LCS) == 50.0
    assert costs.seconds_for("compaction", LCS, STCS) == 4.0
    assert costs.seconds_for("compaction", STCS, "UnifiedCompactionStrategy") is None
    candidates = [{"compaction": STCS}, {"compaction": LCS},
                  {"compaction": "UnifiedCompactionStrategy"}]
    matrix = change_seconds_matrix("cassandra", candidates, {"compaction": 120.0},
                                   measured=costs)
    assert matrix[0, 1] == 50.0 and matrix[1, 0] == 4.0
    assert matrix[0, 2] == 120.0  # not measured: the given price
    assert np.all(np.diag(matrix) == 0)
    source = _compaction_source(PlanRequest(change_costs=path, compaction_seconds=120.0), costs)
    assert source.startswith(f"measured: {path} (")
    assert "compaction SizeTiered -> Leveled 50 s over a 100-s rewrite" in source
    assert "compaction Leveled -> SizeTiered 4 s over a 8-s rewrite" in source
    assert source.endswith("given: --compaction-seconds 120 for a switch not measured")
    assert _compaction_source(PlanRequest(), None) == "given: --compaction-seconds 120"


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "not a JSON file"),
    ('{"schema": 2, "changes": []}', "schema: expected 1"),
    ('{"schema": 1, "changes": []}', "changes: expected a non-empty list"),
    ('{"schema": 1, "changes": [{"parameter": "compaction"}]}',
     r"changes\[0\]: missing field\(s\) before, after, change_seconds"),
    (json.dumps({"schema": 1, "changes": [{**entry(STCS, LCS, 1.0).to_json(),
                                             "change_seconds": -3}]}),
     r"changes\[0\]\.change_seconds: must be a finite number >= 0"),
])
def test_a_bad_file_is_refused_naming_it_and_the_field(tmp_path: Path, content: str,
                                                       message: str) -> None:
    path = tmp_path / "costs.json"
    path.write_text(content)
    with pytest.raises(ValidationError, match=message) as refused:
        load_change_costs(path)
    assert str(path) in str(refused.value)


def test_a_missing_file_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"--change-costs: .*: no such file"):
        load_change_costs(tmp_path / "absent.json")


def test_a_measured_rewrite_costs_at_saturation_what_it_measured_and_little_in_a_quiet_hour(
        tmp_path: Path) -> None:
    """The span: 24.7 s of full throughput over an 84.8-s rewrite takes 29 % of the
    capacity for 84.8 s. Saturated, that is the 24.7 s measured; at a fifth of the
    capacity offered, the spare capacity absorbs it and nothing served is lost."""
    path = tmp_path / "change-costs.json"
    merge_entry(path, ChangeCost(
        parameter="compaction", before=STCS, after=LCS, change_seconds=24.7,
        rewrite_seconds=84.8, apply_seconds=58.0, baseline_ops_per_s=409.4,
        steady_ops_per_s=565.1))
    costs = load_change_costs(path)
    assert costs.span_for("compaction", STCS, LCS) == 84.8
    assert costs.span_for("compaction", LCS, STCS) is None
    candidates = [{"compaction": STCS}, {"compaction": LCS}]
    change = change_seconds_matrix("cassandra", candidates, measured=costs)
    span = change_span_matrix("cassandra", candidates, costs)
    assert span is not None and span[0, 1] == 84.8 and span[1, 0] == 0.0
    assert change_span_matrix("cassandra", candidates, None) is None
    cap = np.full((30, 2), 500.0)  # 5-s steps: the rewrite spans 17 of them
    model = ReconfigModel(restart_seconds=60.0, batch_fractions=(1 / 3,) * 3)
    never = np.zeros((2, 2), dtype=bool)

    def cost(load: float, with_span: bool) -> float:
        return float(transition_costs(
            cap, restart=never, model=model, step_seconds=5.0, load=np.full(30, load),
            served="offered", change_seconds=change,
            change_span=span if with_span else None)[0, 0, 1])

    assert cost(1000.0, True) == pytest.approx(24.7 * 500.0)
    assert cost(1000.0, False) == pytest.approx(24.7 * 500.0)
    assert cost(100.0, True) == 0.0  # 71 % of 500 ops/s still serves the 100 offered
    assert cost(100.0, False) == pytest.approx(24.7 * 100.0)  # no span: all capacity
    assert cost(400.0, True) == pytest.approx(84.8 * (400.0 - (1 - 24.7 / 84.8) * 500.0))
