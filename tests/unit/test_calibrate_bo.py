"""The Bayesian-optimisation design of ``kairos calibrate`` (issue 16 part 2, seeds/002).

The Gaussian process and its acquisition (planner/calibrate/bo.py), ``bo_next`` and
``choose_next(design=...)`` (planner/calibrate/design.py), the state file remembering the
design (planner/calibrate/state.py) and ``kairos calibrate --design``. The cluster is a
seeded synthetic function of the configuration (SYNTHETIC: not a measurement), as in
tests/unit/test_calibrate.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import optimize

from planner import calibrate as cal
from planner.calibrate import bo, design
from planner.calibrate import state as calibrate_state
from planner.cli import build_parser, main
from planner.commands import calibrate as command
from planner.errors import ValidationError

REPO = Path(__file__).resolve().parents[2]
EXECUTOR = ["--inventory", str(REPO / "inventories/local/hosts.yml"),
            "--playbook", str(REPO / "playbooks/change_settings.yml")]
MIXES = dict(cal.DEFAULT_MIXES)
#: The seeds/002 parameters over 192 configurations (bench/design.py's wider grid).
LEVELS = ["compaction=SizeTieredCompactionStrategy,LeveledCompactionStrategy",
          "concurrent_reads=16,32,64,128", "concurrent_writes=16,32,64,128",
          "memtable_cleanup_threshold=0.11,0.2,0.33",
          "memtable_allocation_type=heap_buffers,offheap_objects"]
ORIGINAL = {"compaction": "SizeTieredCompactionStrategy", "concurrent_reads": 32,
            "concurrent_writes": 32, "memtable_cleanup_threshold": 0.33,
            "memtable_allocation_type": "heap_buffers"}
OPTIMUM = {"compaction": "LeveledCompactionStrategy", "concurrent_reads": 64,
           "concurrent_writes": 64, "memtable_cleanup_threshold": 0.2,
           "memtable_allocation_type": "offheap_objects"}
RANK = {16: 0, 32: 1, 64: 2, 128: 3}


class Interrupted(Exception):
    """Stands for Ctrl-C in the middle of a calibration."""


def peak(config: Mapping[str, Any], mix: Mapping[str, float]) -> float:
    """Log ops/s of a surface with one clear optimum, :data:`OPTIMUM` (+73 % over the worst):
    both thread counts peak at 64, LCS, threshold 0.2 and off-heap objects each add."""
    gain = 0.25 * (1 - abs(RANK[config["concurrent_reads"]] - 2) / 2)
    gain += 0.25 * (1 - abs(RANK[config["concurrent_writes"]] - 2) / 2)
    gain += 0.15 * (config["compaction"] == OPTIMUM["compaction"])
    gain += 0.10 * (config["memtable_cleanup_threshold"] == 0.2)
    gain += 0.08 * (config["memtable_allocation_type"] == "offheap_objects")
    return mix.get("read", 0.0) * math.log(1000) + mix.get("update", 0.0) * math.log(1300) + gain


class PeakBench:
    """:func:`peak` times a seeded log-normal run noise (SYNTHETIC)."""

    def __init__(self, seed: int, *, noise: float = 0.02,
                 fail_after: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.running = dict(ORIGINAL)
        self.fail_after = fail_after
        self.measured = 0

    def apply(self, changes: Mapping[str, Any]) -> None:
        self.running.update(changes)

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool,
                name: str = "") -> None:
        pass

    def measure(self, mix: Mapping[str, float], name: str = "") -> dict[str, Any]:
        if self.fail_after is not None and self.measured >= self.fail_after:
            raise Interrupted
        self.measured += 1
        log_ops = peak(self.running, mix) + self.rng.normal(0.0, self.noise)
        return {"ops_per_s": math.exp(log_ops), "failed": 0}

    def expected_seconds(self, changes: Mapping[str, Any], n_mixes: int) -> float:
        return 10.0 * n_mixes


def new_state(strategy: str, seed: int = 0) -> cal.CalibrationState:
    space = cal.make_space("cassandra", cal.parse_levels(LEVELS, "cassandra"), ORIGINAL)
    return cal.CalibrationState(engine="cassandra", levels=space.to_dict(), mixes=MIXES,
                                seed=seed, original=dict(ORIGINAL), applied=dict(ORIGINAL),
                                design_strategy=strategy)


def run(state: cal.CalibrationState, bench: PeakBench, tmp_path: Path, runs: int,
        log: list[str] | None = None) -> str:
    return cal.run_calibration(
        state, bench=bench, budget=cal.Budget(runs=runs),
        initial=design.default_initial(len(state.levels), state.design_strategy),
        state_path=tmp_path / "state.json", observations_path=tmp_path / "obs.csv",
        log=(log.append if log is not None else lambda _msg: None))


def found_at(state: cal.CalibrationState) -> int | None:
    keys = [cal.config_key(c) for c in state.design]
    target = cal.config_key(OPTIMUM)
    return keys.index(target) + 1 if target in keys else None


# ------------------------------------------------------------ the Gaussian process
def test_the_likelihood_gradient_is_the_finite_difference_one() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.uniform(size=(12, 4)), 0.1 * rng.normal(size=12)
    groups = np.array([0, 0, 1, 2])
    for _ in range(3):
        theta = rng.normal(scale=0.5, size=5)
        err = optimize.check_grad(lambda t: bo._neg_log_ml(t, x, y, groups)[0],
                                  lambda t: bo._neg_log_ml(t, x, y, groups)[1], theta)
        assert err < 1e-5


def test_the_gp_learns_which_parameter_matters_and_predicts_an_unseen_point() -> None:
    # two numeric parameters on a 5 x 5 grid; only the first matters (a 20 % slope), 1 % noise
    rng = np.random.default_rng(0)
    grid = np.array([(a, b) for a in np.linspace(0, 1, 5) for b in np.linspace(0, 1, 5)])
    truth = 0.2 * grid[:, 0]
    held = 12  # the centre point (0.5, 0.5)
    train = np.arange(len(grid)) != held
    y = truth[train] + rng.normal(0, 0.01, size=train.sum())
    gp = bo.fit_gp(grid[train], y, np.array([0, 1]), seed=0)
    assert gp.length[1] > 4 * gp.length[0]  # the null parameter is smoothed over
    assert gp.length[0] == pytest.approx(1.02, abs=0.01)
    assert gp.length[1] == pytest.approx(5.94, abs=0.01)
    assert gp.noise == pytest.approx(0.0101, abs=0.0005)  # the true noise: 0.01
    mu, sd = gp.predict(grid[[held]])
    assert abs(mu[0] - truth[held]) == pytest.approx(0.0064, abs=0.0005)  # 0.64 % off
    assert sd[0] == pytest.approx(0.0043, abs=0.0005)


def test_expected_improvement_figures() -> None:
    ei = bo.expected_improvement(np.array([0.0, 1.0, -5.0]), np.array([1.0, 1e-9, 1.0]), 0.0)
    assert ei[0] == pytest.approx(1 / math.sqrt(2 * math.pi))  # at the incumbent: sd phi(0)
    assert ei[1] == pytest.approx(1.0)  # a sure gain of 1
    assert 0 < ei[2] < 1e-6  # five standard deviations below
    with_margin = bo.expected_improvement(np.array([0.0]), np.array([1.0]), 0.0, xi=0.5)
    assert with_margin[0] < ei[0]


# -------------------------------------------------------------------------- bo_next
def test_bo_finds_a_clear_optimum_of_192_configurations_within_13_runs(tmp_path: Path) -> None:
    # 2 % run noise; the optimum is 1 of 192. Same seeds, same budget: maximin + uncertainty
    # (aiming at the model, not the optimum) has not measured it after 13 runs.
    found = {}
    for strategy in ("bo", "maximin"):
        found[strategy] = []
        for seed in range(4):
            state = new_state(strategy, seed)
            run(state, PeakBench(seed), tmp_path / f"{strategy}{seed}", runs=13)
            found[strategy].append(found_at(state))
    assert found["bo"] == [10, 10, 10, 12]
    assert found["maximin"] == [None, None, None, None]


def test_bo_next_is_deterministic_for_a_seed_and_the_seed_matters(tmp_path: Path) -> None:
    designs = []
    for seed in (5, 5, 6):
        state = new_state("bo", seed)
        run(state, PeakBench(0), tmp_path / f"s{seed}", runs=9)
        designs.append([cal.config_key(c) for c in state.design])
    assert designs[0] == designs[1]
    assert designs[0] != designs[2]
    # one call, twice, on the same evidence
    state = new_state("bo", 3)
    run(state, PeakBench(3), tmp_path / "again", runs=6)
    calls = [design.bo_next(state.space, state.design, state.measurements, seed=11)
             for _ in range(2)]
    assert calls[0] is not None and calls[0] == calls[1]


def test_bo_never_proposes_a_chosen_configuration_and_ends_with_the_grid(
    tmp_path: Path,
) -> None:
    # the default grid (16 configurations): BO until it is exhausted
    space = cal.make_space("cassandra", cal.default_levels("cassandra"),
                           {k: ORIGINAL[k] for k in cal.default_levels("cassandra")})
    state = cal.CalibrationState(engine="cassandra", levels=space.to_dict(), mixes=MIXES,
                                 seed=0, original={k: ORIGINAL[k] for k in space.params},
                                 applied={k: ORIGINAL[k] for k in space.params},
                                 design_strategy="bo")
    bench = PeakBench(0)
    bench.running = dict(state.original)
    for _ in range(20):
        nxt, _ = design.choose_next(state, initial=3)
        if nxt is None:
            break
        assert cal.config_key(nxt) not in {cal.config_key(c) for c in state.design}
        state.design.append(nxt)
        bench.running.update({**ORIGINAL, **nxt})
        for name, mix in MIXES.items():
            state.measurements.append({"config": nxt, "mix": name, **bench.measure(mix)})
    assert len(state.design) == 16 and nxt is None
    assert design.bo_next(space, state.design, state.measurements, seed=0) is None
    # among candidates, only an unchosen one: two left out of the chosen, one a candidate
    grid = space.grid()
    left = {cal.config_key(grid[0]), cal.config_key(grid[-1])}
    chosen = [c for c in state.design if cal.config_key(c) not in left]
    assert design.bo_next(space, chosen, state.measurements, 0, grid[:4]) == grid[0]


def test_choose_next_bo_starts_space_filling_then_goes_by_expected_improvement() -> None:
    state = new_state("bo")
    bench = PeakBench(0)
    reasons = []
    for _ in range(5):
        nxt, why = design.choose_next(state, initial=3)
        assert nxt is not None
        reasons.append(why)
        state.design.append(nxt)
        bench.running.update(nxt)
        for name, mix in MIXES.items():
            state.measurements.append({"config": nxt, "mix": name, **bench.measure(mix)})
    assert reasons[0] == "the configuration running before calibration"
    assert reasons[1:3] == ["space-filling", "space-filling"]
    assert reasons[3:] == ["largest expected improvement under the Gaussian process per mix"] * 2
    # without two measured configurations there is nothing to learn from yet
    early = new_state("bo")
    early.design = [dict(ORIGINAL), dict(OPTIMUM)]
    early.measurements = [{"config": dict(ORIGINAL), "mix": "read-heavy", "ops_per_s": 900.0}]
    _, why = design.choose_next(early, initial=1)
    assert why == "space-filling (too few observations for the Gaussian process yet)"
    # an explicit design overrides the state's; an unknown one is refused
    _, why = design.choose_next(state, initial=3, design="maximin")
    assert why == "most uncertain under the pooled model"
    with pytest.raises(ValidationError, match="design: must be one of maximin, bo"):
        design.choose_next(state, initial=3, design="random")


def test_default_initial_per_design() -> None:
    assert design.default_initial(5, "maximin") == 6
    assert design.default_initial(5, "bo") == 3
    assert design.default_initial(1, "bo") == 2


# --------------------------------------------------------------- state and resume
def test_the_state_file_keeps_the_design_and_old_files_load_as_maximin(tmp_path: Path) -> None:
    state = new_state("bo")
    state.save(tmp_path / "state.json")
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["design_strategy"] == "bo"
    assert cal.CalibrationState.load(tmp_path / "state.json").design_strategy == "bo"
    del data["design_strategy"]  # a state file from before the choice existed
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert cal.CalibrationState.load(tmp_path / "old.json").design_strategy == "maximin"
    data["design_strategy"] = "random"
    with pytest.raises(ValidationError, match="design_strategy must be one of maximin, bo"):
        cal.CalibrationState.from_dict(data)


def test_an_interrupted_bo_calibration_resumes_with_bo(tmp_path: Path) -> None:
    state = new_state("bo", seed=2)
    with pytest.raises(Interrupted):
        run(state, PeakBench(2, fail_after=9), tmp_path, runs=8)
    saved = cal.CalibrationState.load(tmp_path / "state.json")
    assert saved.design_strategy == "bo" and len(saved.design) == 5
    log: list[str] = []
    run(saved, PeakBench(3), tmp_path, runs=8, log=log)
    chosen = [line for line in log if line.startswith("calibrate: configuration ")]
    assert len(chosen) == 3
    assert all("largest expected improvement" in line for line in chosen)
    # the uninterrupted run makes the same design up to the interruption
    whole = new_state("bo", seed=2)
    run(whole, PeakBench(2), tmp_path / "whole", runs=5)
    assert whole.design == saved.design[:5]


def _parsed(tmp_path: Path, *extra: str) -> Any:
    current = tmp_path / "current.yml"
    current.write_text("concurrent_reads: 32\n")
    return build_parser().parse_args(
        ["calibrate", "--dir", str(tmp_path / "cal"), "--runs", "4", "--param",
         "concurrent_reads=16,64", "--current", str(current), *EXECUTOR, *extra])


def _paths(tmp_path: Path) -> dict[str, Path]:
    return {"state": tmp_path / "cal" / "state.json"}


def test_cli_new_state_takes_the_design_and_a_resume_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # new calibrations: --design, else the default (no node is touched: --current)
    args = _parsed(tmp_path)
    state = command._open_state(args, command._checked_run(args), _paths(tmp_path))
    assert state.design_strategy == design.DEFAULT_DESIGN
    (tmp_path / "cal" / "state.json").unlink()
    args = _parsed(tmp_path, "--design", "bo")
    state = command._open_state(args, command._checked_run(args), _paths(tmp_path))
    assert state.design_strategy == "bo"
    # a resume without --design keeps bo, whatever the default is
    args = _parsed(tmp_path)
    resumed = command._open_state(args, command._checked_run(args), _paths(tmp_path))
    assert resumed.design_strategy == "bo"
    assert "bo design" in capsys.readouterr().err
    # a resume asking for the other design is refused before any node is touched
    rc = main(["calibrate", "--dir", str(tmp_path / "cal"), "--runs", "4", "--param",
               "concurrent_reads=16,64", "--design", "maximin", *EXECUTOR])
    assert rc == 2
    assert "follows the bo design but --design maximin was asked" in capsys.readouterr().err
    assert cal.CalibrationState.load(tmp_path / "cal" / "state.json").measurements == []


def test_the_cli_spells_the_designs_and_the_default_as_the_planner_does() -> None:
    assert set(command.DESIGNS) == set(calibrate_state.DESIGNS)
    assert command.DEFAULT_DESIGN == design.DEFAULT_DESIGN
    assert command.MIX_ORDERS == calibrate_state.MIX_ORDERS
    args = build_parser().parse_args(["calibrate", "--runs", "1"])
    assert args.design is None  # resolved per state: new -> default, resumed -> kept
    with pytest.raises(SystemExit):
        build_parser().parse_args(["calibrate", "--design", "random"])
