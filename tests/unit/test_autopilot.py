"""The autopilot's decisions: stale plan, deviation, rate limit, failed-step back-off."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from planner.autopilot import decisions as ap
from planner.cli import main
from planner.errors import ValidationError

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def plan(
    steps: int = 40, step_seconds: float = 20.0, dues: tuple[int, ...] = (2, 5)
) -> ap.PlanView:
    return ap.PlanView(
        path="/p.yml",
        start=T0,
        step_seconds=step_seconds,
        steps=steps,
        step_dues=tuple((f"s{i + 1}", T0 + timedelta(seconds=d * step_seconds))
                        for i, d in enumerate(dues)),
    )


def band(n: int = 40, lo: float = 200.0, hi: float = 400.0) -> ap.Band:
    ts = tuple(T0.timestamp() + 20.0 * i for i in range(n))
    return ap.Band(
        timestamps=ts,
        step_seconds=20.0,
        load_lower=(lo,) * n,
        load_upper=(hi,) * n,
        mix_lower={"read": (0.7,) * n, "update": (0.0,) * n},
        mix_upper={"read": (1.0,) * n, "update": (0.3,) * n},
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def obs(seconds: float, load: float = 300.0, read: float = 0.9) -> ap.Observation:
    return ap.Observation(at(seconds).timestamp(), load, {"read": read, "update": 1 - read})


POLICY = ap.Policy(stale_fraction=0.25, stale_steps=2, min_replan_seconds=600)


def test_no_plan_replans() -> None:
    d = ap.decide(now=at(0), policy=POLICY, plan=None, rollout_state={}, autopilot_state={})
    assert d.replan and d.replan_reasons == ("there is no plan",)
    assert not d.apply and d.step is None


def test_fresh_plan_applies_the_due_step_without_replanning() -> None:
    d = ap.decide(now=at(120), policy=POLICY, plan=plan(), rollout_state={}, autopilot_state={},
                  band=band(), observed=obs(110))
    assert not d.replan and d.apply and d.step == "s2"
    assert d.message == "apply step s2"


def test_no_step_due_yet() -> None:
    d = ap.decide(now=at(10), policy=POLICY, plan=plan(), rollout_state={}, autopilot_state={})
    assert not d.apply and d.step is None and d.message == "no step is due yet"


def test_applied_step_is_not_applied_again() -> None:
    state = {"steps": {"s2": {"status": "applied", "finished_at": at(110).isoformat()}}}
    d = ap.decide(now=at(120), policy=POLICY, plan=plan(), rollout_state=state, autopilot_state={})
    assert not d.apply and "already applied" in d.message


@pytest.mark.parametrize(
    ("seconds", "stale"),
    [
        (0, False),
        (599, False),  # 201 s of 800 left: more than 25 %
        (601, True),  # 199 s left: less than 25 % of the horizon
        (800, True),  # horizon over
        (900, True),
    ],
)
def test_stale_plan_by_fraction(seconds: float, stale: bool) -> None:
    d = ap.decide(now=at(seconds), policy=POLICY, plan=plan(), rollout_state={}, autopilot_state={})
    assert d.replan is stale
    if stale:
        assert "horizon" in d.replan_reasons[0]


def test_stale_plan_by_steps() -> None:
    policy = ap.Policy(stale_fraction=0.0, stale_steps=5)
    assert ap.staleness(plan(), at(800 - 120), policy) is None  # 6 steps left
    assert "fewer than 5" in str(ap.staleness(plan(), at(800 - 80), policy))


def test_deviation_of_load_triggers_a_replan() -> None:
    d = ap.decide(now=at(120), policy=POLICY, plan=plan(), rollout_state={}, autopilot_state={},
                  band=band(), observed=obs(110, load=900.0))
    assert d.replan and "outside the forecast interval [200.0, 400.0]" in d.replan_reasons[0]
    assert d.apply  # the current plan's due step still goes ahead unless a new plan replaces it


def test_deviation_of_mix_triggers_a_replan() -> None:
    d = ap.decide(now=at(120), policy=POLICY, plan=plan(), rollout_state={}, autopilot_state={},
                  band=band(), observed=obs(110, read=0.2))
    assert d.replan and "read share 20%" in d.replan_reasons[0]


def test_deviation_slack_and_out_of_range_observation() -> None:
    slack = ap.Policy(deviation_slack=0.5)
    assert ap.deviation(band(), obs(110, load=500.0), slack) is None
    assert ap.deviation(band(), obs(110, load=700.0), slack) is not None
    assert ap.deviation(band(), obs(-100, load=5000.0), POLICY) is None  # before the forecast


def test_rate_limit_blocks_a_second_replan() -> None:
    recent = {"last_replan_at": at(-300).isoformat()}
    d = ap.decide(now=at(700), policy=POLICY, plan=plan(), rollout_state={},
                  autopilot_state={"last_replan_at": at(500).isoformat()})
    assert not d.replan and d.replan_blocked and "minimum interval 600 s" in d.replan_blocked
    assert "rate-limited" in d.message
    d2 = ap.decide(now=at(700), policy=POLICY, plan=plan(), rollout_state={},
                   autopilot_state=recent)
    assert d2.replan and d2.replan_blocked is None


def test_rate_limit_never_blocks_the_first_plan() -> None:
    d = ap.decide(now=at(0), policy=POLICY, plan=None, rollout_state={},
                  autopilot_state={"last_replan_at": at(-1).isoformat()})
    assert d.replan


def failed(attempts: int = 1, when: float = 100.0) -> dict[str, object]:
    return {"steps": {"s2": {"status": "failed", "attempts": attempts,
                             "finished_at": at(when).isoformat(), "error": "cass2: start"}}}


def test_failed_step_waits_for_a_person() -> None:
    d = ap.decide(now=at(5000), policy=POLICY, plan=plan(), rollout_state=failed(),
                  autopilot_state={})
    assert not d.apply and not d.replan  # a stale plan does not paper over the failure
    assert d.hold and "waiting for a person" in d.hold and "cass2: start" in d.hold


def test_failed_step_back_off_then_retry_then_give_up() -> None:
    policy = ap.Policy(failed_backoff_seconds=300, max_attempts=2)
    early = ap.decide(now=at(200), policy=policy, plan=plan(), rollout_state=failed(),
                      autopilot_state={})
    assert not early.apply and early.hold and "back-off until" in early.hold
    late = ap.decide(now=at(401), policy=policy, plan=plan(), rollout_state=failed(),
                     autopilot_state={})
    assert late.apply and late.retry_failed and late.step == "s2" and not late.replan
    spent = ap.decide(now=at(5000), policy=policy, plan=plan(), rollout_state=failed(attempts=2),
                      autopilot_state={})
    assert not spent.apply and spent.hold and "the limit" in spent.hold


def test_paused_does_nothing() -> None:
    d = ap.decide(now=at(5000), policy=POLICY, plan=None, rollout_state={},
                  autopilot_state={"paused": True, "paused_reason": "freeze"})
    assert d.paused and not d.replan and not d.apply and "freeze" in d.message


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stale_fraction": 1.0}, "stale_fraction"),
        ({"stale_steps": -1}, "stale_steps"),
        ({"min_replan_seconds": -1}, "min_replan_seconds"),
        ({"failed_backoff_seconds": -1}, "failed_backoff_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_policy_validation(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ap.Policy(**kwargs)  # type: ignore[arg-type]


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValidationError, match="aware"):
        ap.decide(now=datetime(2026, 1, 1), policy=POLICY, plan=None, rollout_state={},
                  autopilot_state={})


def test_the_next_plan_starts_from_applied_and_superseded_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # s2 carried s1's restart change (s1 was never applied on its own): the running
    # configuration must hold both, not s2's target alone.
    from tests.unit.test_rollout import HOSTS, at, prepare, record_step, restart_then_live, write

    plan = write(tmp_path, restart_then_live())
    rollout = prepare(plan, hosts=HOSTS, now=at(15))
    record_step(tmp_path / "plan.yml.state.json", step_id="s2", status="applied",
                superseded=rollout.superseded, now=at(16))
    assert main(["autopilot", "decide", "--state-dir", str(tmp_path), "--plan", str(plan),
                 "--now", at(17).isoformat()]) == 0
    running = json.loads(capsys.readouterr().out)["running_config"]
    assert running == {"concurrent_reads": 64, "memtable_flush_writers": 4}


def test_cli_decide_pause_resume_status(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = str(tmp_path)
    assert main(["autopilot", "decide", "--state-dir", state_dir]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert decision["replan"] and decision["replan_reasons"] == ["there is no plan"]
    assert main(["autopilot", "pause", "--state-dir", state_dir, "--reason", "freeze"]) == 0
    assert main(["autopilot", "decide", "--state-dir", state_dir]) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    assert json.loads(out)["paused"] is True
    assert main(["autopilot", "status", "--state-dir", state_dir]) == 0
    assert "PAUSED" in capsys.readouterr().out and "freeze" in out
    assert main(["autopilot", "resume", "--state-dir", state_dir]) == 0
    assert main(["autopilot", "status", "--state-dir", state_dir]) == 0
    assert "active" in capsys.readouterr().out


# ------------------------------------------------------------ a failed apply
PREFLIGHT_REFUSED = """\
TASK [Refuse the rollout] ******************************************************
fatal: [redis1 -> localhost]: FAILED! =>
    changed: false
    msg: 'pre-flight refused, nothing was touched: redis2 hz is 10, the plan says 11'

PLAY RECAP *********************************************************************
localhost                  : ok=7    changed=0    unreachable=0    failed=0
"""
LOCK_BUSY = """\
TASK [Take the cluster's lock] *************************************************
fatal: [localhost]: FAILED! => {"changed": false, "locked": true, "msg": "x"}
    msg: another Kairos run holds /r/.kairos/lab-redis.lock (owner 20261121T1200, since \
2026-11-21T12:00:00+0000); this run exits without touching the cluster
"""


def test_failure_reason_is_the_last_msg_of_the_output() -> None:
    assert ap.failure_reason(PREFLIGHT_REFUSED) == (
        "pre-flight refused, nothing was touched: redis2 hz is 10, the plan says 11"
    )
    assert ap.failure_reason('x\n  "msg": "boom",\n') == "boom"  # JSON result format
    assert ap.failure_reason("only this\n\n") == "only this"
    assert ap.failure_reason("") == "no output"


def test_apply_refused_before_recording_is_recorded_by_the_autopilot() -> None:
    got = ap.judge_failed_apply(step="s1", rollout_state={"steps": {}}, since=T0,
                                output=PREFLIGHT_REFUSED)
    assert got.outcome == "apply-failed" and got.record
    assert got.reason.startswith("pre-flight refused")


def test_apply_failure_the_executor_recorded_is_not_recorded_twice() -> None:
    state = {"steps": {"s1": {"status": "failed", "attempts": 1,
                              "finished_at": at(30).isoformat(), "error": "cass2: start"}}}
    got = ap.judge_failed_apply(step="s1", rollout_state=state, since=T0, output="rollout stopped")
    assert got.outcome == "apply-failed" and not got.record


def test_a_retry_that_fails_before_recording_counts_as_another_attempt() -> None:
    """Regression: an older failure record must not hide this attempt's failure."""
    state = {"steps": {"s1": {"status": "failed", "attempts": 1,
                              "finished_at": at(-900).isoformat()}}}
    got = ap.judge_failed_apply(step="s1", rollout_state=state, since=T0,
                                output=PREFLIGHT_REFUSED)
    assert got.record


def test_apply_lock_held_by_another_run_leaves_the_step_due() -> None:
    got = ap.judge_failed_apply(step="s1", rollout_state={}, since=T0, output=LOCK_BUSY)
    assert got.outcome == "apply-busy" and not got.record
    assert "another Kairos run holds" in got.reason


def test_record_of_a_failed_apply_records_the_step_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from planner.autopilot.tick import tick_path

    plan_file = tmp_path / "p.yml"
    state_file = tmp_path / "p.yml.state.json"
    started = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    tick_path(tmp_path, "r1", "redis").parent.mkdir()
    tick_path(tmp_path, "r1", "redis").write_text(json.dumps({
        "stage": "apply", "outcome": "apply", "apply_log": "/x.log",
        "decision": {"plan": str(plan_file), "step": "s1", "retry_failed": False,
                     "message": "apply step s1"}}))
    args = ["autopilot", "record", "--state-dir", str(tmp_path), "--engine", "redis",
            "--run", "r1", "--started-at", started, "--apply-rc", "2"]
    assert main([*args, "--apply-output", PREFLIGHT_REFUSED]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "apply-failed" and out["failed"] and not out["applied"]
    assert out["apply_error"].startswith("pre-flight refused") and out["step"] == "s1"
    rec = json.loads(state_file.read_text())["steps"]["s1"]
    assert rec["status"] == "failed" and rec["attempts"] == 1
    assert "pre-flight refused" in rec["error"]
    # The record is this run's now: judging again does not add an attempt.
    assert main([*args, "--apply-output", PREFLIGHT_REFUSED]) == 0
    capsys.readouterr()
    assert json.loads(state_file.read_text())["steps"]["s1"]["attempts"] == 1
    assert main([*args, "--apply-output", LOCK_BUSY]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "apply-failed"  # recorded already
    lines = (tmp_path / "autopilot.log.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["engine"] == "redis" for x in lines)


def test_record_without_a_tick_file_names_the_collect_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["autopilot", "record", "--state-dir", str(tmp_path), "--run", "r2",
                 "--started-at", "2026-11-21T12:00:00+00:00", "--failed-task", "Collect",
                 "--error", "no node answered"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "collect-failed" and out["failed"]
    assert out["message"] == "Collect: no node answered"


def test_the_tick_summary_says_what_a_dry_run_would_do() -> None:
    from planner.autopilot.tick import TickResult

    tick = TickResult(run="r", started_at="t", cluster="lab", engine="cassandra", dry_run=True,
                      trace="trace t.csv", decision={"apply": True, "message": "apply step s2"})
    assert tick.summary == "cassandra: dry run: would apply step s2 (trace t.csv)"
    tick.dry_run = False
    assert tick.summary == "cassandra: apply step s2 (trace t.csv)"


def test_a_step_due_at_the_plans_start_is_due_in_the_bin_the_plan_was_made_in() -> None:
    """A plan starts at the end of the bin its trace ended in: a step at its start is its
    "change now", applied by the tick that made the plan, not one tick period late (CI stop
    57: the Redis demo's tick 1 ran 2 s before the boundary and left its step to tick 2)."""
    fresh = plan(dues=(0, 5))
    early = ap.decide(now=at(-19), policy=POLICY, plan=fresh, rollout_state={},
                      autopilot_state={"replanned_at": at(-19).isoformat()})
    assert early.apply and early.step == "s1", early.message
    before = ap.decide(now=at(-21), policy=POLICY, plan=fresh, rollout_state={},
                       autopilot_state={"replanned_at": at(-21).isoformat()})
    assert not before.apply and before.message == "no step is due yet"
    later = ap.decide(now=at(5 * 20 - 1), policy=POLICY, plan=fresh, rollout_state={},
                      autopilot_state={"replanned_at": at(0).isoformat()})
    assert later.step == "s1", "a later step is not due before its time"
