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

Every generator is seeded and returns a Cassandra :class:`planner.workload.WorkloadSeries`
with a regular step. :data:`GENERATORS` maps the shape names used by ``kairos simulate``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from planner.errors import ValidationError
from planner.workload import CASSANDRA_CLASSES, WorkloadSeries

__all__ = [
    "GENERATORS",
    "bus_tracking_like",
    "hpc_queue_like",
    "mgrast_like",
    "synthetic_capacity",
]

#: 2026-01-05T00:00:00Z, a Monday: the default start of every synthetic trace.
DEFAULT_START = 1767571200.0


def _check(steps: int, step_seconds: float) -> None:
    if steps < 2:
        raise ValidationError(f"steps: a trace needs at least 2 steps, got {steps}")
    if step_seconds <= 0:
        raise ValidationError(f"step_seconds: must be > 0, got {step_seconds}")


def _series(
    load: np.ndarray, mix: np.ndarray, *, step_seconds: float, start: float, scope: str
) -> WorkloadSeries:
    mix = np.clip(mix, 0.0, None)
    mix = mix / mix.sum(axis=1, keepdims=True)
    ts = start + step_seconds * np.arange(len(load), dtype=float)
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
    rng = np.random.default_rng(seed)
    mix = np.empty((steps, 4))
    load = np.empty(steps)
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
        load[t:end] = base_load * rng.lognormal(0.0, 0.25)
        t = end
        read_heavy = not read_heavy
    mix += rng.normal(0.0, 0.01, mix.shape)
    load *= 1.0 + rng.normal(0.0, 0.03, steps)
    return _series(load, mix, step_seconds=step_seconds, start=start, scope="cluster:mgrast-like")


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
    ts = start + step_seconds * np.arange(steps, dtype=float)
    hour = (ts % 86400.0) / 3600.0
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


#: Shape name -> generator, as ``kairos simulate --shape`` names them.
GENERATORS: dict[str, Callable[..., WorkloadSeries]] = {
    "mgrast": mgrast_like,
    "bus": bus_tracking_like,
    "hpc": hpc_queue_like,
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
