"""Synthetic workload traces in the three shapes of SOPHIA's evaluation.

* :func:`mgrast_like` -- a metagenomics portal: abrupt switches between read-heavy and
  write-heavy regimes of random length, no daily pattern (SOPHIA saw 443 sharp shifts a
  day); hard to forecast.
* :func:`bus_tracking_like` -- a bus-tracking application: a daily pattern of update,
  scan, insert and read (scan-heavy at night, update-heavy in the morning and evening
  rush); forecastable from its season.
* :func:`hpc_queue_like` -- a queue of analytics jobs, each a write (upload), read
  (analysis), write (commit) sequence of U(200, 100k)-operation phases; some jobs are
  recurring and skip the upload. Forecastable from the queue (SOPHIA's perfect f_pred).
* :func:`reporting_like` -- an analytics store: report scans through the day, and ingestion
  batches that rewrite recent rows at fixed hours (the issue-38 shape: scans and write
  bursts, whose best compaction differs).
* :func:`warehouse_like` -- the same store with its day's load: quiet hours at night and in
  the evening (a trickle of updates), reports at full load in business hours and the
  batches above it. Spare capacity comes before the reports: the hour to reconfigure in.

Every generator is seeded and returns a Cassandra :class:`planner.workload.series.WorkloadSeries`
with a regular step. :data:`GENERATORS` maps the shape names used by ``kairos simulate``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.errors import ValidationError
from planner.workload.series import CASSANDRA_CLASSES, WorkloadSeries

__all__ = [
    "GENERATORS",
    "OPS_PROFILES",
    "bus_tracking_like",
    "hpc_queue_like",
    "mgrast_draws",
    "mgrast_like",
    "ops_like",
    "reporting_like",
    "synthetic_capacity",
    "warehouse_like",
]

#: 2026-01-05T00:00:00Z, a Monday: the default start of every synthetic trace.
DEFAULT_START = 1767571200.0


def _check(steps: int, step_seconds: float) -> None:
    if steps < 2:
        raise ValidationError(f"steps: a trace needs at least 2 steps, got {steps}")
    if step_seconds <= 0:
        raise ValidationError(f"step_seconds: must be > 0, got {step_seconds}")


def _times(steps: int, step_seconds: float, start: float) -> tuple[np.ndarray, np.ndarray]:
    """Each step's start (Unix time) and its hour of the day (UTC, in [0, 24))."""
    ts = start + step_seconds * np.arange(steps, dtype=float)
    return ts, (ts % 86400.0) / 3600.0


def _series(
    load: np.ndarray, mix: np.ndarray, *, step_seconds: float, start: float, scope: str
) -> WorkloadSeries:
    mix = np.clip(mix, 0.0, None)
    mix = mix / mix.sum(axis=1, keepdims=True)
    ts, _ = _times(len(load), step_seconds, start)
    return WorkloadSeries(
        engine="cassandra",
        timestamps=ts,
        load=np.maximum(load, 0.0),
        mix={c: mix[:, i] for i, c in enumerate(CASSANDRA_CLASSES)},
        step_seconds=float(step_seconds),
        scope=scope,
    )


def mgrast_like(
    *,
    steps: int = 1440,
    step_seconds: float = 60.0,
    seed: int = 0,
    mean_regime_steps: float = 12.0,
    base_load: float = 40_000.0,
    start: float = DEFAULT_START,
) -> WorkloadSeries:
    """MG-RAST-like: read-heavy / write-heavy regimes with geometric lengths.

    Regime lengths are drawn from a geometric distribution with mean
    ``mean_regime_steps`` (a few long ones from a heavier tail); the load of each regime
    is lognormal around ``base_load``.
    """
    _check(steps, step_seconds)
    load, mix, _, _ = mgrast_draws(steps, seed, mean_regime_steps, base_load)
    return _series(load, mix, step_seconds=step_seconds, start=start, scope="cluster:mgrast-like")


def mgrast_draws(
    steps: int, seed: int, mean_regime_steps: float = 12.0, base_load: float = 40_000.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`mgrast_like`'s load and mix, with what generated them: each step's noise-free
    level and the step its regime ends (bench/forecast_oracle.py forecasts with these)."""
    rng = np.random.default_rng(seed)
    mix = np.empty((steps, 4))
    level = np.empty(steps)
    regime_end = np.empty(steps, dtype=int)
    t = 0
    read_heavy = bool(rng.integers(2))
    while t < steps:
        mean = mean_regime_steps * (4.0 if rng.random() < 0.15 else 1.0)
        length = int(rng.geometric(1.0 / mean))
        end = min(steps, t + length)
        if read_heavy:
            r = rng.uniform(0.85, 0.98)
            row = [r, (1 - r) * 0.3, (1 - r) * 0.7, 0.0]
        else:
            w = rng.uniform(0.8, 0.95)
            row = [1 - w, w * 0.25, w * 0.75, 0.0]
        mix[t:end] = row
        level[t:end] = base_load * rng.lognormal(0.0, 0.25)
        regime_end[t:end] = end
        t = end
        read_heavy = not read_heavy
    mix += rng.normal(0.0, 0.01, mix.shape)
    load = level * (1.0 + rng.normal(0.0, 0.03, steps))
    return load, mix, level, regime_end


def bus_tracking_like(
    *,
    steps: int = 288 * 7,
    step_seconds: float = 300.0,
    seed: int = 0,
    base_load: float = 30_000.0,
    start: float = DEFAULT_START,
) -> WorkloadSeries:
    """Bus-tracking-like: a daily cycle of scan (night), update (rush hours), read/insert.

    Averages near SOPHIA's mix (update 42%, scan 55%, insert 3%, read <1%) but scan
    dominates at night and updates during the 07-10 and 16-19 rush hours.
    """
    _check(steps, step_seconds)
    rng = np.random.default_rng(seed)
    ts, hour = _times(steps, step_seconds, start)
    rush = ((hour >= 7) & (hour < 10)) | ((hour >= 16) & (hour < 19))
    night = (hour >= 22) | (hour < 6)
    update = np.where(rush, 0.75, np.where(night, 0.12, 0.40))
    scan = np.where(rush, 0.18, np.where(night, 0.84, 0.50))
    insert = np.where(rush, 0.05, 0.03)
    read = np.where(night, 0.01, 0.02)
    # days differ a little; each step is noisy
    day = ((ts - start) // 86400).astype(int)
    day_shift = rng.normal(0.0, 0.03, day.max() + 1)[day]
    mix = np.stack([read, update + day_shift, insert, scan - day_shift], axis=1)
    mix += rng.normal(0.0, 0.02, mix.shape)
    daily = 0.55 + 0.45 * np.sin(2 * np.pi * (hour - 6.0) / 24.0) ** 2 * (~night)
    load = base_load * (0.4 + daily) * (1.0 + rng.normal(0.0, 0.05, steps))
    return _series(load, mix, step_seconds=step_seconds, start=start, scope="cluster:bus-like")


def hpc_queue_like(
    *,
    steps: int = 1440,
    step_seconds: float = 60.0,
    seed: int = 0,
    concurrency: int = 5,
    job_rate: float = 40.0,
    recurring_fraction: float = 0.5,
    start: float = DEFAULT_START,
) -> WorkloadSeries:
    """HPC-queue-like: ``concurrency`` jobs run at once, each write -> read -> write.

    Each phase is U(200, 100k) operations served at ``job_rate`` ops/s per job;
    recurring jobs (``recurring_fraction``) skip the upload phase. When a job finishes
    the next one starts. The mix per step is the time-weighted mix of running phases.
    """
    _check(steps, step_seconds)
    if concurrency < 1 or job_rate <= 0:
        raise ValidationError("concurrency must be >= 1 and job_rate > 0")
    rng = np.random.default_rng(seed)
    horizon = steps * step_seconds
    # per step: seconds of write-phase and read-phase work summed over job slots
    write_s = np.zeros(steps)
    read_s = np.zeros(steps)

    def add(kind: np.ndarray, a: float, b: float) -> None:
        i0, i1 = int(a // step_seconds), int(min(b, horizon - 1e-9) // step_seconds)
        for i in range(i0, min(i1, steps - 1) + 1):
            lo, hi = max(a, i * step_seconds), min(b, (i + 1) * step_seconds)
            if hi > lo:
                kind[i] += hi - lo

    for _ in range(concurrency):
        t = -rng.uniform(0, 2000.0)  # slots are already busy at the start
        while t < horizon:
            phases = ["read", "write"] if rng.random() < recurring_fraction else [
                "write", "read", "write"]
            for ph in phases:
                dur = rng.uniform(200, 100_000) / job_rate
                if t + dur > 0:
                    add(write_s if ph == "write" else read_s, max(t, 0.0), t + dur)
                t += dur
    busy = write_s + read_s
    wf = np.divide(write_s, busy, out=np.full(steps, 0.5), where=busy > 0)
    read = (1 - wf) * 0.9
    scan = (1 - wf) * 0.1
    insert = wf * 0.8
    update = wf * 0.2
    mix = np.stack([read, update, insert, scan], axis=1) + rng.normal(0, 0.005, (steps, 4))
    load = job_rate * busy / step_seconds * (1.0 + rng.normal(0.0, 0.03, steps))
    return _series(load, mix, step_seconds=step_seconds, start=start, scope="cluster:hpc-like")


#: Hours of a day (start, end) that :func:`reporting_like` gives to ingestion batches.
INGESTION_HOURS: tuple[tuple[float, float], ...] = ((0.0, 2.0), (12.0, 14.0))


def reporting_like(
    *,
    steps: int = 288,
    step_seconds: float = 300.0,
    seed: int = 0,
    base_load: float = 20_000.0,
    start: float = DEFAULT_START,
) -> WorkloadSeries:
    """Reporting-like: report scans all day (scan 0.9, update 0.1), and ingestion batches
    that rewrite recent rows (update 0.9, scan 0.1) in :data:`INGESTION_HOURS`: the nightly
    load and a midday refresh.

    The two mixes are the ones the enveloped lab's compaction calibration measured
    (docs/calibration.md): leveled compaction serves the scans about half as much again as
    size-tiered, and the batches less. Each step is a little noisy; a day repeats.
    """
    return _scans_and_batches(
        tuple((a, b, 0.9, 1.5) for a, b in INGESTION_HOURS), outside=(0.1, 1.0), steps=steps,
        step_seconds=step_seconds, seed=seed, base_load=base_load, start=start,
        scope="cluster:reporting-like")


#: The warehouse day, hour by hour from midnight: (from, to, update share, load relative to
#: the business-hours reports). Nightly ingestion, a quiet night of trickle updates,
#: reports, the midday refresh, reports, a quiet evening.
WAREHOUSE_DAY: tuple[tuple[float, float, float, float], ...] = (
    (0.0, 2.0, 0.9, 1.5), (2.0, 8.0, 0.9, 0.2), (8.0, 12.0, 0.1, 1.0),
    (12.0, 14.0, 0.9, 1.5), (14.0, 18.0, 0.1, 1.0), (18.0, 24.0, 0.9, 0.2))


def warehouse_like(
    *,
    steps: int = 288,
    step_seconds: float = 300.0,
    seed: int = 0,
    base_load: float = 20_000.0,
    start: float = DEFAULT_START,
) -> WorkloadSeries:
    """Warehouse-like: :func:`reporting_like`'s two mixes with the day's load
    (:data:`WAREHOUSE_DAY`): ingestion batches at 1.5x the reports' load, report scans
    (scan 0.9, update 0.1) through business hours, and quiet hours (a fifth of the load, a
    trickle of updates) at night and in the evening. Each step is a little noisy.
    """
    return _scans_and_batches(
        WAREHOUSE_DAY, outside=(0.0, 0.0), steps=steps, step_seconds=step_seconds, seed=seed,
        base_load=base_load, start=start, scope="cluster:warehouse-like")


def _scans_and_batches(
    day: tuple[tuple[float, float, float, float], ...],
    *,
    outside: tuple[float, float],
    steps: int,
    step_seconds: float,
    seed: int,
    base_load: float,
    start: float,
    scope: str,
) -> WorkloadSeries:
    """:func:`reporting_like` and :func:`warehouse_like`: each step's update share and load
    (relative to ``base_load``) from the hours of ``day`` (rows as :data:`WAREHOUSE_DAY`'s),
    ``outside`` in the hours it does not list; scans are the rest of the mix. A little noise
    on both."""
    _check(steps, step_seconds)
    rng = np.random.default_rng(seed)
    _, hour = _times(steps, step_seconds, start)
    update = np.full(steps, outside[0])
    level = np.full(steps, outside[1])
    for a, b, u, lv in day:
        inside = (hour >= a) & (hour < b)
        update[inside], level[inside] = u, lv
    update = update + rng.normal(0.0, 0.01, steps)
    zero = np.zeros(steps)
    mix = np.stack([zero, update, zero, 1.0 - update], axis=1)
    load = base_load * level * (1.0 + rng.normal(0.0, 0.05, steps))
    return _series(load, mix, step_seconds=step_seconds, start=start, scope=scope)


#: Shape name -> generator, as ``kairos simulate --shape`` names them.
GENERATORS: dict[str, Callable[..., WorkloadSeries]] = {
    "mgrast": mgrast_like,
    "bus": bus_tracking_like,
    "hpc": hpc_queue_like,
    "reporting": reporting_like,
    "warehouse": warehouse_like,
}


def synthetic_capacity(
    mix: np.ndarray, *, n_candidates: int = 16, seed: int = 0, scale: float = 50_000.0
) -> np.ndarray:
    """A stand-in performance model for tests and benchmarks: ``(T, K)`` ops/s.

    Candidate ``k`` serves class ``c`` at rate ``r[k, c]``; a mix is served at the
    harmonic rate ``1 / sum_c mix_c / r[k, c]``. Candidate 0 plays Cassandra's default
    (write-favouring, ~40k ops/s read-heavy vs ~50k for the best read configuration, as
    in SOPHIA's example); the others are seeded random specialisations.
    """
    m = np.asarray(mix, dtype=float)
    if m.ndim != 2 or m.shape[1] != len(CASSANDRA_CLASSES):
        raise ValidationError(f"mix: expected (T, {len(CASSANDRA_CLASSES)}), got {m.shape}")
    rng = np.random.default_rng(seed)
    rates = np.empty((n_candidates, 4))
    rates[0] = [0.80, 1.00, 1.05, 0.55]  # read, update, insert, scan: write-favouring
    for k in range(1, n_candidates):
        lean = rng.uniform(-1, 1)  # -1 write-optimised ... +1 read-optimised
        rates[k, 0] = 0.85 + 0.25 * lean + rng.normal(0, 0.04)
        rates[k, 1] = 0.95 - 0.20 * lean + rng.normal(0, 0.04)
        rates[k, 2] = 1.00 - 0.25 * lean + rng.normal(0, 0.04)
        rates[k, 3] = 0.60 + 0.30 * max(lean, 0) + rng.normal(0, 0.05)
    rates = np.clip(rates, 0.2, None) * scale
    return 1.0 / (m @ (1.0 / rates).T)


# ------------------------------------------------------------ operations traces
@dataclass(frozen=True)
class OpsProfile:
    """The shape of one kind of production service (see :func:`ops_like`).

    Times are hours of the day; shares are the mean operation mix (read, update, insert,
    scan); ``*_per_day`` are Poisson rates.
    """

    base_load: float
    peaks: tuple[tuple[float, float, float], ...]  # (hour, width in hours, height)
    floor: float  # night load relative to the weekday peak
    weekend: float  # weekend level relative to weekdays
    weekend_shift: float  # hours the weekend peaks move (people get up later)
    shares: tuple[float, float, float, float]
    read_per_log_load: float  # how much the read logit rises per unit of log load
    burst_mix: tuple[float, float, float, float]  # the mix of the extra burst traffic
    batch_window: tuple[float, float, float] | None = None  # (start hour, end hour, load)
    bursts_per_day: float = 1.0
    dips_per_day: float = 0.1
    noise: float = 0.06  # marginal sd of the log-load noise (AR(1), lag-one 0.8)
    mix_noise: float = 0.05  # sd of the per-step log-ratio noise of the mix
    day_sigma: float = 0.05  # day-to-day level variation (log sd)
    trend_changes: int = 2
    weekly_growth_sd: float = 0.03  # sd of each trend segment's growth per week (log)
    level_shift: float = 0.15  # sd of one permanent step change (a migration, a new tenant)


#: Three services, set from what such services look like (not tuned to any forecaster).
OPS_PROFILES: dict[str, OpsProfile] = {
    # A consumer web API: lunchtime and evening peaks, quiet weekends that start late,
    # read-heavy flash crowds, reads rising with load (browsing dominates at peaks).
    "web": OpsProfile(
        base_load=20_000.0, peaks=((12.5, 2.5, 0.8), (20.5, 2.0, 1.0)), floor=0.15,
        weekend=0.75, weekend_shift=1.5, shares=(0.72, 0.14, 0.09, 0.05),
        read_per_log_load=0.8, burst_mix=(0.9, 0.04, 0.04, 0.02), bursts_per_day=1.5,
    ),
    # A business SaaS: office hours on weekdays, a nightly write-heavy ETL window, light
    # weekends, bursts of report scans.
    "saas": OpsProfile(
        base_load=12_000.0, peaks=((10.0, 1.8, 1.0), (15.0, 2.0, 0.9)), floor=0.1,
        weekend=0.3, weekend_shift=0.5, shares=(0.55, 0.25, 0.12, 0.08),
        read_per_log_load=0.5, burst_mix=(0.2, 0.05, 0.05, 0.7),
        batch_window=(1.0, 3.5, 0.6), bursts_per_day=0.8, noise=0.05,
    ),
    # Telemetry ingest: devices report around the clock with a mild daytime rise, writes
    # dominate, reconnect storms are insert bursts, fleets are onboarded in steps.
    "ingest": OpsProfile(
        base_load=40_000.0, peaks=((14.0, 5.0, 1.0),), floor=0.7, weekend=0.9,
        weekend_shift=0.0, shares=(0.12, 0.15, 0.68, 0.05), read_per_log_load=-0.5,
        burst_mix=(0.02, 0.03, 0.93, 0.02), bursts_per_day=2.0, dips_per_day=0.15,
        noise=0.08, trend_changes=3, weekly_growth_sd=0.05, level_shift=0.25,
    ),
}


def _daily_shape(hour: np.ndarray, p: OpsProfile, shift: np.ndarray) -> np.ndarray:
    """Peaks as Gaussian bumps on the 24-hour circle over a floor; the highest peak is 1."""
    shape = np.zeros_like(hour)
    for centre, width, height in p.peaks:
        d = (hour - centre - shift + 12.0) % 24.0 - 12.0
        shape += height * np.exp(-0.5 * (d / width) ** 2)
    return p.floor + (1 - p.floor) * shape / max(h for _, _, h in p.peaks)


def _trend(steps: int, step_seconds: float, p: OpsProfile, rng: np.random.Generator
           ) -> np.ndarray:
    """Piecewise-linear log growth with random change points, plus one level shift."""
    weeks = np.arange(steps) * step_seconds / 604800.0
    cuts = np.sort(rng.uniform(0, weeks[-1], p.trend_changes))
    slopes = rng.normal(0.0, p.weekly_growth_sd, p.trend_changes + 1)
    seg = np.searchsorted(cuts, weeks)
    rate = slopes[seg]
    log_trend = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(weeks))])
    shift_at = rng.uniform(0.15, 0.95) * steps
    return log_trend + np.where(np.arange(steps) >= shift_at, rng.normal(0, p.level_shift), 0.0)


def _events(steps: int, per_day: float, step_seconds: float, rng: np.random.Generator,
            mean_steps: float, amp: tuple[float, float]) -> np.ndarray:
    """Sum of Poisson-arriving pulses: a jump, then exponential decay over ~mean_steps."""
    out = np.zeros(steps)
    count = rng.poisson(per_day * steps * step_seconds / 86400.0)
    for t0 in rng.integers(0, steps, count):
        length = int(rng.geometric(1.0 / mean_steps)) * 3
        t = np.arange(t0, min(steps, t0 + length))
        out[t] += rng.uniform(*amp) * np.exp(-(t - t0) / mean_steps)
    return out


def _ar1(steps: int, sd: float, rng: np.random.Generator, phi: float = 0.8) -> np.ndarray:
    e = rng.normal(0.0, sd * np.sqrt(1 - phi**2), steps)
    out = np.empty(steps)
    out[0] = rng.normal(0.0, sd)
    for i in range(1, steps):
        out[i] = phi * out[i - 1] + e[i]
    return out


def ops_like(
    *,
    profile: str = "web",
    steps: int = 288 * 35,
    step_seconds: float = 300.0,
    seed: int = 0,
    start: float = DEFAULT_START,
) -> WorkloadSeries:
    """A production-like operations trace: daily and weekly seasons and their irregularities.

    Weekday and weekend daily shapes (:data:`OPS_PROFILES`), one holiday (a weekday shaped
    like a Sunday), day-to-day level and phase jitter, piecewise-linear growth with random
    change points and one permanent level shift, AR(1) multiplicative noise, Poisson bursts
    with their own mix (flash crowds, report scans, reconnect storms) and short dips
    (incidents). The mix follows the load (reads rise at peaks for the web profile), a
    nightly batch window where the profile has one, a slow random drift and per-step noise.
    """
    _check(steps, step_seconds)
    if profile not in OPS_PROFILES:
        raise ValidationError(f"profile: unknown {profile!r}; known: {', '.join(OPS_PROFILES)}")
    p = OPS_PROFILES[profile]
    rng = np.random.default_rng(seed)
    ts, hour = _times(steps, step_seconds, start)
    day = ((ts - start) // 86400).astype(int)
    weekend = ((day + int(((start // 86400) + 3) % 7)) % 7) >= 5  # 1970-01-01 was a Thursday
    holiday = rng.integers(7, max(8, day.max() - 1))
    weekend |= (day == holiday) & ~weekend
    jitter = rng.normal(0.0, 0.25, day.max() + 1)[day]
    shape = np.where(weekend, p.weekend * _daily_shape(hour, p, jitter + p.weekend_shift),
                     _daily_shape(hour, p, jitter))
    log_load = np.log(shape) + rng.normal(0.0, p.day_sigma, day.max() + 1)[day]
    log_load += _trend(steps, step_seconds, p, rng) + _ar1(steps, p.noise, rng)
    batch = np.zeros(steps)
    if p.batch_window is not None:
        lo, hi, extra = p.batch_window
        batch = extra * ((hour >= lo) & (hour < hi)) * rng.lognormal(0, 0.15, day.max() + 1)[day]
    burst = _events(steps, p.bursts_per_day, step_seconds, rng, 6.0, (0.3, 1.5))
    dip = np.minimum(_events(steps, p.dips_per_day, step_seconds, rng, 4.0, (0.3, 0.6)), 0.8)
    organic = p.base_load * np.exp(log_load)
    load = (organic * (1 + burst) + p.base_load * batch) * (1 - dip)
    mix = _ops_mix(p, organic, burst, batch, steps, rng)
    return _series(load, mix, step_seconds=step_seconds, start=start,
                   scope=f"cluster:ops-{profile}")


def _ops_mix(p: OpsProfile, organic: np.ndarray, burst: np.ndarray, batch: np.ndarray,
             steps: int, rng: np.random.Generator) -> np.ndarray:
    """Organic mix (reads follow the load, slow drift, noise), blended with bursts and batch."""
    logits = np.log(np.array(p.shares))[None, :].repeat(steps, axis=0)
    rel = np.log(organic) - np.mean(np.log(organic))
    logits[:, 0] += p.read_per_log_load * rel
    logits += np.cumsum(rng.normal(0.0, 0.004, (steps, 4)), axis=0)  # slow drift
    logits += rng.normal(0.0, p.mix_noise, (steps, 4))
    organic_mix = np.exp(logits - logits.max(axis=1, keepdims=True))
    organic_mix /= organic_mix.sum(axis=1, keepdims=True)
    # the batch window writes and scans: its own mix, weighted by its share of the load
    batch_mix = np.array([0.05, 0.15, 0.5, 0.3])
    w_org = organic[:, None]
    w_burst = (organic * burst)[:, None]
    w_batch = (p.base_load * batch)[:, None]
    total = w_org + w_burst + w_batch
    return np.asarray((w_org * organic_mix + w_burst * np.array(p.burst_mix)
                       + w_batch * batch_mix) / total)
