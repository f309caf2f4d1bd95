"""planner/model/restart_impact.py: a rolling restart's measured survivor penalty and warm-up,
from a load's served-operations series (synthetic series with known answers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.model.restart_impact import load_restart_impact, restart_impact
from planner.planning.pipeline import PlanRequest, _impact, _impact_provenance


def series(rate_at, seconds: int, jitter: float = 0.0, seed: int = 0) -> list[tuple[float, float]]:
    """(t, cumulative ops) every second for a rate function of t, with optional noise."""
    rng = np.random.default_rng(seed)
    total, points = 0.0, [(0.0, 0.0)]
    for t in range(seconds):
        total += rate_at(t) * (1 + jitter * rng.standard_normal())
        points.append((t + 1.0, total))
    return points


def test_three_batches_with_a_penalty_and_a_warm_up_are_measured() -> None:
    down = [(100, 120), (140, 160), (180, 200)]

    def rate(t: float) -> float:
        if any(lo <= t < hi for lo, hi in down):
            return 1000 * (2 / 3) * 0.85  # two of three nodes, each 15 % below full
        since = max((hi for _lo, hi in down if hi <= t), default=None)
        if since is not None and t - since < 10:
            return 500.0  # 10 s at half capacity after each return: 5 s lost each
        return 1000.0

    impact = restart_impact(series(rate, 300), baseline=(20, 90), down=down, end=300,
                            batch_share=1 / 3, environment={"envelopes": "test"})
    assert impact.baseline_ops_per_s == pytest.approx(1000)
    assert impact.down_share == pytest.approx(2 / 3 * 0.85, abs=1e-3)
    assert impact.survivor_penalty == pytest.approx(0.15, abs=1e-3)
    assert impact.warmup_seconds == pytest.approx(15.0, abs=0.5)
    # The first 10-s window whose mean is 95 %: one cold second and nine warm ones.
    assert impact.recovery_seconds == pytest.approx(9.0)
    assert impact.down_seconds == 60.0 and impact.environment == {"envelopes": "test"}


def test_noise_alone_is_not_charged_as_warm_up() -> None:
    points = series(lambda t: 1000.0 * (0.66 if 100 <= t < 120 else 1.0), 400, jitter=0.05)
    impact = restart_impact(points, baseline=(0, 90), down=[(100, 120)], end=400,
                            batch_share=1 / 3)
    assert impact.baseline_spread < 0.05
    assert impact.warmup_seconds < 3.0  # 280 s of 5 % noise: no systematic loss
    assert impact.survivor_penalty < 0.05


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"down": []}, "no node was seen down"),
    ({"baseline": (0, 5)}, "baseline: at least 10 s are needed"),
    ({"batch_share": 1.0}, r"batch_share: must be in \(0, 1\)"),
    ({"end": 110}, "must go on after the last node is back"),
])
def test_bad_measurements_are_refused(kwargs: dict, message: str) -> None:
    args = {"baseline": (0, 90), "down": [(100, 120)], "end": 200, "batch_share": 1 / 3}
    with pytest.raises(ValidationError, match=message):
        restart_impact(series(lambda t: 1000.0, 200), **{**args, **kwargs})


def test_the_file_round_trips_and_the_plan_says_where_its_figures_come_from(
    tmp_path: Path,
) -> None:
    impact = restart_impact(series(lambda t: 600.0 if 100 <= t < 120 else 1000.0, 200),
                            baseline=(0, 90), down=[(100, 120)], end=200, batch_share=1 / 3,
                            environment={"command": "bench/restart_cost.py",
                                         "measured_at": "2026-11-27T10:00:00+00:00"})
    path = tmp_path / "restart-costs.json"
    path.write_text(json.dumps(impact.to_json()))
    assert load_restart_impact(path) == impact
    request = PlanRequest(restart_costs=path)
    given = _impact_provenance(request, _impact(request))
    assert given["survivor_penalty"] == impact.survivor_penalty == pytest.approx(0.1, abs=1e-3)
    assert given["survivor_penalty_source"].startswith(f"measured: {path} (bench/restart_cost")
    assert _impact_provenance(PlanRequest(), None)["warmup_seconds_source"].startswith(
        "not measured")


def test_a_bad_file_is_refused_naming_it_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "costs.json"
    with pytest.raises(ValidationError, match=r"--restart-costs: .*costs.json: no such file"):
        load_restart_impact(path)
    path.write_text("{")
    with pytest.raises(ValidationError, match=r"costs.json: not a JSON file"):
        load_restart_impact(path)
    path.write_text(json.dumps({"schema": 1, "survivor_penalty": 0.1}))
    with pytest.raises(ValidationError, match=r"costs.json: missing field\(s\) baseline_ops"):
        load_restart_impact(path)
    good = restart_impact(series(lambda t: 600.0 if 100 <= t < 120 else 1000.0, 200),
                          baseline=(0, 90), down=[(100, 120)], end=200, batch_share=1 / 3)
    path.write_text(json.dumps({**good.to_json(), "survivor_penalty": 1.5}))
    with pytest.raises(ValidationError, match=r"costs.json: survivor_penalty: must be in \[0, 1\)"):
        load_restart_impact(path)
    path.write_text(json.dumps({**good.to_json(), "warmup_seconds": "ten"}))
    with pytest.raises(ValidationError, match=r"costs.json: warmup_seconds: expected a number"):
        load_restart_impact(path)
