"""Per-table choices of table-level parameters (MeT, seeds/001: configure each part of the
data by its own access pattern).

The optimiser gives every table the cluster-wide configuration. A table-level parameter
(``location: table`` in :mod:`planner.model.spaces`; today ``compaction``) may instead be
set per table, and a cluster serving a write-heavy and a read-heavy table wants a different
compaction strategy for each. Given the plan's cluster-wide configuration per time point
and each table's forecast load and mix, :func:`choose_per_table` picks each table's values.

The rule. An operation of table ``t`` costs ``1 / cap_t`` seconds of cluster time, where
``cap_t = f(mix_t, config_t)`` is what the performance model predicts the cluster would
serve if all of it ran table ``t``'s mix under ``t``'s configuration (the cluster-wide
node-level values and ``t``'s table-level values). With ``w_t`` the table's share of the
load at a time point, the cluster's capacity is the harmonic combination::

    capacity = 1 / sum_t (w_t / cap_t)

Maximising it is minimising ``sum_t w_t / cap_t``, which separates: each table's best value
is the argmax of its own predicted capacity under its own mix, whatever the other tables
choose. A plan step holds one value per table over several time points, so per step a
table takes the value that minimises the cluster time its forecast operations take over
the step, ``sum_tau load_t(tau) / cap_t(v, tau)`` (the per-point argmax whenever that is
the same at every point of the step). The load no forecast names (the main forecast's
minus the tables') runs the cluster-wide values as its own pseudo-table.

Served work per time point is the pipeline's credit of that capacity
(:func:`planner.planning.costbenefit.served_matrix`: ``min(load, capacity)``, plus the
headroom term with ``served="work"``). A table gets an override only when its choice
differs from the cluster-wide value and the served work it adds over the horizon
(``sum over time points x step_seconds``) beats what its changes cost, and, with
scenarios (``kairos plan --scenarios``, 200 by default), beats it in at least
``--confidence`` of the model's coefficient draws: the rule the optimiser's steps follow.
Tables are taken in order of their gain alone, each credited with what it adds to those
already taken, so the gains add up to the whole assignment's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from planner.errors import ValidationError
from planner.model.spaces import get_space
from planner.planning.costbenefit import Served, served_matrix

__all__ = [
    "ChoiceSetting",
    "OptionChoice",
    "PerTableChoices",
    "SegmentChoices",
    "TableChoice",
    "TableWorkload",
    "best_path",
    "choose_per_table",
    "harmonic_capacity",
    "option_capacities",
    "option_capacity_draws",
    "option_grid",
    "segment_starts",
    "steps_by_segment",
    "table_keys",
    "with_per_table",
]

#: Seconds of full throughput a change of ``key`` from ``old`` to ``new`` costs.
ChangeSeconds = Callable[[str, Any, Any], float]


@dataclass(frozen=True)
class TableWorkload:
    """One table's (or node's) forecast: ``load`` ``(T,)`` ops/s and ``mix`` ``(T, C)``
    class fractions in the performance model's class order."""

    load: np.ndarray
    mix: np.ndarray


@dataclass(frozen=True, kw_only=True)
class OptionChoice:
    """What a choice of a part's own values (a table's, a node's) chose for one part.

    ``values[j]``: the values the part runs in segment ``j`` (its best, when ``override``,
    else the cluster-wide ones); ``best[j]``: its best whether taken or not.
    ``capacity_chosen``/``capacity_cluster``: its predicted capacity (ops/s, mean over the
    horizon) under its best values and under the cluster-wide ones; ``gain_ops``: the served
    work its override adds; ``reason``: why it gets no override (None when it does);
    ``p_gain``: P(the gain beats its cost) over the model's coefficient draws (None: not
    drawn).
    """

    values: tuple[Mapping[str, Any], ...]
    best: tuple[Mapping[str, Any], ...]
    override: bool
    capacity_chosen: float
    capacity_cluster: float
    gain_ops: float
    reason: str | None = None
    p_gain: float | None = None

    def entry(self, **extra: Any) -> dict[str, Any]:
        """Its provenance entry: the chosen values, capacities and gain, ``extra``, then its
        P and reason where it has them."""
        chosen = [dict(v) for v in dict.fromkeys(
            tuple(sorted(b.items())) for b in self.best)]  # distinct, in order
        out: dict[str, Any] = {
            "chosen": chosen if len(chosen) > 1 else chosen[0],
            "override": self.override,
            "capacity_chosen": round(self.capacity_chosen, 1),
            "capacity_cluster_wide": round(self.capacity_cluster, 1),
            "gain_ops": round(self.gain_ops, 1),
            **extra,
        }
        if self.p_gain is not None:
            out["p_gain"] = round(self.p_gain, 4)
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True, kw_only=True)
class TableChoice(OptionChoice):
    """What :func:`choose_per_table` chose for one table (:class:`OptionChoice`);
    ``cost_ops``: what its changes cost."""

    table: str
    cost_ops: float

    def to_dict(self) -> dict[str, Any]:
        """The plan's ``provenance.per_table`` entry of this table."""
        return self.entry(cost_ops=round(self.cost_ops, 1))


@dataclass(frozen=True, kw_only=True)
class SegmentChoices:
    """Choices of parts' own values (tables', nodes') over the segments of a plan.

    ``starts[j]``: the first time point of segment ``j`` (a stretch of one cluster-wide
    configuration); ``cluster[j]``: its cluster-wide values of ``keys``; ``running``: the
    values before the plan; ``segment_gain_ops[j]``: the served work the overrides add in
    it; :meth:`parts`: each part's :class:`OptionChoice`.
    """

    keys: tuple[str, ...]
    starts: tuple[int, ...]
    running: Mapping[str, Any]
    cluster: tuple[Mapping[str, Any], ...]
    segment_gain_ops: tuple[float, ...]

    def parts(self) -> Mapping[str, OptionChoice]:
        raise NotImplementedError

    def overrides(self, segment: int) -> dict[str, dict[str, Any]]:
        """The overrides of segment ``segment`` (a step's ``per_table`` or ``per_node``):
        each part whose values differ there from the cluster-wide ones, with those values."""
        base = self.cluster[segment]
        out: dict[str, dict[str, Any]] = {}
        for name, choice in self.parts().items():
            diff = {k: v for k, v in choice.values[segment].items() if base[k] != v}
            if diff:
                out[name] = diff
        return out

    def changes(self, segment: int) -> tuple[str, ...]:
        """The keys some part's value changes at the start of ``segment`` (from the running
        values for segment 0), the cluster-wide change and a return to it included."""
        return tuple(k for k in self.keys if any(
            c.values[segment][k] != (c.values[segment - 1][k] if segment else self.running[k])
            for c in self.parts().values()))

    @property
    def gain_ops(self) -> float:
        return float(sum(self.segment_gain_ops))


@dataclass(frozen=True, kw_only=True)
class PerTableChoices(SegmentChoices):
    """Per-table choices (:class:`SegmentChoices`); ``segment_cost_ops[j]``: what the
    overrides' changes cost in segment ``j`` (a change is charged to the segment it
    starts)."""

    tables: Mapping[str, TableChoice]
    segment_cost_ops: tuple[float, ...]

    def parts(self) -> Mapping[str, OptionChoice]:
        return self.tables

    @property
    def cost_ops(self) -> float:
        return float(sum(self.segment_cost_ops))


def table_keys(engine: str) -> tuple[str, ...]:
    """The engine's table-level parameters (``location: table``)."""
    space = get_space(engine)
    return tuple(k for k in space.parameters if space[k].location == "table")


def segment_starts(configs: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    """The time points where the cluster-wide configuration changes (0 first)."""
    return (0, *(t for t in range(1, len(configs)) if configs[t] != configs[t - 1]))


def harmonic_capacity(loads: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """``(T,)`` cluster capacity ``1 / sum_t w_t / cap_t`` from ``(n, T)`` loads and the
    ``(n, T)`` capacities each table's operations meet; where nothing is offered, each
    table counts equally (the capacity a balanced load would meet)."""
    ld = np.asarray(loads, dtype=float)
    cap = np.asarray(capacities, dtype=float)
    total = ld.sum(axis=0)
    share = np.where(total > 0, ld / np.where(total > 0, total, 1.0), 1.0 / ld.shape[0])
    return 1.0 / np.sum(share / cap, axis=0)


def option_grid(keys: Sequence[str], values: Mapping[str, Sequence[Any]],
                configs: Sequence[Mapping[str, Any]], running: Mapping[str, Any],
                ) -> list[dict[str, Any]]:
    """Every combination of the values of ``keys`` (a table's, or a node's in
    :mod:`planner.planning.per_node`): the candidate values given and those the cluster
    runs, now or in any segment."""
    axes = [list(dict.fromkeys([*values.get(k, ()), running[k], *(c[k] for c in configs)]))
            for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


def option_capacities(model: Any, configs: Sequence[Mapping[str, Any]], mix: np.ndarray,
                      options: Sequence[Mapping[str, Any]], starts: Sequence[int],
                      ) -> np.ndarray:
    """``(T, V)``: the capacity a mix (a table's or a node's) meets under each option, the
    values the options do not set being each segment's cluster-wide ones."""
    classes = list(model.classes)
    rows = mix / mix.sum(axis=1, keepdims=True)
    out = np.empty((len(configs), len(options)))
    for lo, hi in zip(starts, [*starts[1:], len(configs)], strict=True):
        mixes = [dict(zip(classes, r.tolist(), strict=True)) for r in rows[lo:hi]]
        variants = [{**configs[lo], **o} for o in options]
        out[lo:hi] = np.asarray(model.predict_matrix(mixes, variants)[0], dtype=float)
    return out


def option_capacity_draws(model: Any, configs: Sequence[Mapping[str, Any]], mix: np.ndarray,
                          options: Sequence[Mapping[str, Any]], starts: Sequence[int], n: int,
                          seed: Any) -> np.ndarray:
    """``(S, T, V)``: :func:`option_capacities` under ``n`` coefficient draws, each segment's
    from a fresh stream of ``seed`` (so draw ``s`` is one model for every table and
    segment)."""
    rows = mix / mix.sum(axis=1, keepdims=True)
    out = np.empty((n, len(configs), len(options)))
    for lo, hi in zip(starts, [*starts[1:], len(configs)], strict=True):
        variants = [{**configs[lo], **o} for o in options]
        out[:, lo:hi] = model.sample_capacity(rows[lo:hi], variants, n=n,
                                              rng=np.random.default_rng(seed))
    return out


@dataclass(frozen=True)
class ChoiceSetting:
    """The inputs of one choice of parts' own values (tables', nodes'), shared by its
    helpers: each part's load and the capacity its mix meets per option, and how the
    parts' capacities make the cluster's (``combine``: :func:`harmonic_capacity` for
    tables, the first node to saturate for nodes)."""

    loads: np.ndarray  # (n, T): each part's load
    caps: np.ndarray  # (n, T, V): the capacity each part's mix meets per option
    cluster: np.ndarray  # (T,) option index of the cluster-wide values
    starts: tuple[int, ...]
    step_seconds: float
    served: Served
    headroom_weight: float
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray] = harmonic_capacity
    #: (S, n, T, V): ``caps`` under S coefficient draws of the model (None: not drawn).
    draws: np.ndarray | None = None
    confidence: float = 0.0

    @classmethod
    def build(cls, *, model: Any, configs: Sequence[Mapping[str, Any]],
              workloads: Sequence[TableWorkload], options: Sequence[Mapping[str, Any]],
              cluster: np.ndarray, step_seconds: float, scenarios: int, seed: Any,
              **rules: Any) -> ChoiceSetting:
        """The setting of ``workloads`` (each part's load and mix) over ``configs``, the
        capacities predicted (and, with ``scenarios``, drawn) per option; ``rules``: the
        other fields (``served``, ``headroom_weight``, ``combine``, ``confidence``)."""
        starts = segment_starts(configs)
        mixes = [np.asarray(w.mix, dtype=float) for w in workloads]
        return cls(
            loads=np.stack([np.asarray(w.load, dtype=float) for w in workloads]),
            caps=np.stack([option_capacities(model, configs, m, options, starts)
                           for m in mixes]),
            cluster=cluster, starts=starts, step_seconds=step_seconds,
            draws=None if scenarios <= 0 else np.stack(
                [option_capacity_draws(model, configs, m, options, starts, scenarios, seed)
                 for m in mixes], axis=1),
            **rules,
        )

    def served_ops(self, paths: np.ndarray) -> np.ndarray:
        """``(T,)`` work credited per time point (ops) when part ``i`` runs option
        ``paths[i, tau]``."""
        met = np.take_along_axis(self.caps, paths[:, :, None], axis=2)[:, :, 0]
        cap = self.combine(self.loads, met)
        credit = served_matrix(cap[:, None], load=self.loads.sum(axis=0), served=self.served,
                               headroom_weight=self.headroom_weight)[:, 0]
        return credit * self.step_seconds

    def gain(self, before: np.ndarray, after: np.ndarray) -> float:
        """The served work ``after`` adds over ``before`` (ops)."""
        return float(np.sum(self.served_ops(after) - self.served_ops(before)))

    def p_gain(self, before: np.ndarray, after: np.ndarray, *, cost: float = 0.0,
               tolerance: float = 0.0) -> float | None:
        """P(the served work ``after`` adds over ``before`` beats ``cost`` plus ``tolerance``
        of what ``before`` serves) over the draws (None: not drawn)."""
        if self.draws is None:
            return None
        wins = [drawn.gain(before, after)
                > cost + tolerance * float(np.sum(drawn.served_ops(before)))
                for drawn in (replace(self, caps=c, draws=None) for c in self.draws)]
        return float(np.mean(wins))


def best_path(load: np.ndarray, caps: np.ndarray, cluster: np.ndarray,
              starts: Sequence[int]) -> np.ndarray:
    """``(T,)`` a part's (a table's, a node's) best option per segment: the one its ``(T,)``
    load takes the least time under at its ``(T, V)`` capacities (ties and idle segments
    keep the ``(T,)`` cluster-wide option)."""
    path = cluster.copy()
    for lo, hi in zip(starts, [*starts[1:], len(path)], strict=True):
        time_used = np.sum(load[lo:hi, None] / caps[lo:hi], axis=0)
        here = int(cluster[lo])
        best = int(np.argmin(time_used))
        if time_used[best] < time_used[here] * (1 - 1e-9):
            path[lo:hi] = best
    return path


def _change_costs(setting: ChoiceSetting, i: int, path: np.ndarray,
                  options: Sequence[Mapping[str, Any]], running: int,
                  change_seconds: ChangeSeconds) -> np.ndarray:
    """Per segment: what table ``i``'s changes along ``path`` cost (ops).

    A compaction change is priced as the pipeline prices one (seconds of full throughput,
    :func:`planner.planning.pipeline.change_seconds_matrix`) scaled by the table's share of
    the load: rewriting one table's SSTables is that share of rewriting them all. It is
    priced at the cluster-wide plan's served work at the change's start. Where the
    cluster-wide value changes too, the optimiser's step already paid for rewriting every
    table, this one included, so only a change where the cluster's holds is charged.
    """
    base = setting.served_ops(np.broadcast_to(setting.cluster, setting.loads.shape).copy())
    total = setting.loads.sum(axis=0)
    out = np.zeros(len(setting.starts))
    for j, t in enumerate(setting.starts):
        before = int(path[t - 1]) if t > 0 else running
        cluster_before = int(setting.cluster[t - 1]) if t > 0 else running
        if int(path[t]) == before or int(setting.cluster[t]) != cluster_before:
            continue
        old, new = options[before], options[int(path[t])]
        seconds = sum(change_seconds(k, old[k], new[k]) for k in old if old[k] != new[k])
        share = setting.loads[i, t] / total[t] if total[t] > 0 else 0.0
        out[j] = seconds * base[t] / setting.step_seconds * share
    return out


def choose_per_table(
    *,
    model: Any,
    configs: Sequence[Mapping[str, Any]],
    running: Mapping[str, Any],
    tables: Mapping[str, TableWorkload],
    step_seconds: float,
    change_seconds: ChangeSeconds,
    rest: TableWorkload | None = None,
    values: Mapping[str, Sequence[Any]] | None = None,
    served: Served = "offered",
    headroom_weight: float = 0.0,
    scenarios: int = 0,
    confidence: float = 0.9,
    seed: Any = 0,
) -> PerTableChoices:
    """Choose each table's table-level values over a plan (the rule: the module docstring).

    Parameters
    ----------
    model
        The performance model (:class:`planner.model.performance.PerformanceModel`).
    configs
        ``T`` complete cluster-wide configurations, one per time point (the schedule of the
        plan's steps, or the hold).
    running
        The complete configuration running now: the tables' values before the plan.
    tables
        Per ``keyspace.table``: its forecast load and mix over the same ``T`` time points.
    step_seconds
        Length of one time point.
    change_seconds
        Seconds of full throughput a change of a table-level parameter costs (all tables).
    rest
        The load no table forecast names; it runs the cluster-wide values.
    values
        Per table-level parameter, its candidate values (default: the space's).
    served, headroom_weight
        The credit of served work (:func:`planner.planning.costbenefit.served_matrix`).
    scenarios, confidence, seed
        With ``scenarios`` > 0, an override is kept only when its gain beats its cost in at
        least ``confidence`` of that many coefficient draws of the model (the confidence rule
        the optimiser's steps follow); every table's capacities are drawn from one stream
        seeded by ``seed``, so draw ``s`` is the same model for all of them.
    """
    engine = model.engine
    keys = table_keys(engine)
    space = get_space(engine)
    _check_inputs(configs, tables, rest, step_seconds)
    values = values or {k: space[k].candidate_values or () for k in keys}
    options = option_grid(keys, values, configs, running)
    index = {tuple(o.items()): v for v, o in enumerate(options)}
    cluster = np.array([index[tuple((k, c[k]) for k in keys)] for c in configs])
    workloads = [*tables.values(), *([rest] if rest is not None else [])]
    setting = ChoiceSetting.build(
        model=model, configs=configs, workloads=workloads, options=options, cluster=cluster,
        step_seconds=step_seconds, scenarios=scenarios, seed=seed, served=served,
        headroom_weight=headroom_weight, confidence=confidence)
    running_option = index[tuple((k, running[k]) for k in keys)]
    return _decide(setting, list(tables), options, running_option, change_seconds, keys)


def _check_inputs(configs: Sequence[Mapping[str, Any]], tables: Mapping[str, TableWorkload],
                  rest: TableWorkload | None, step_seconds: float) -> None:
    if not configs or not tables:
        raise ValidationError("per-table choice: needs time points and at least one table")
    if not step_seconds > 0:
        raise ValidationError(f"step_seconds: must be > 0, got {step_seconds}")
    n = len(configs)
    for name, w in [*tables.items(), *([("rest", rest)] if rest is not None else [])]:
        load, mix = np.asarray(w.load, dtype=float), np.asarray(w.mix, dtype=float)
        if load.shape != (n,) or mix.ndim != 2 or mix.shape[0] != n:
            raise ValidationError(f"{name}: load and mix must cover the {n} time points")
        if np.any(load < 0) or not np.all(np.isfinite(load)):
            raise ValidationError(f"{name}: load must be finite and >= 0")


def _decide(setting: ChoiceSetting, names: Sequence[str], options: Sequence[Mapping[str, Any]],
            running: int, change_seconds: ChangeSeconds, keys: tuple[str, ...],
            ) -> PerTableChoices:
    """Take the tables' overrides that pay, the best alone first, each credited with what it
    adds to those taken before it."""
    n_all, n_t = setting.loads.shape
    paths = np.broadcast_to(setting.cluster, (n_all, n_t)).copy()
    base_ops = setting.served_ops(paths)
    best = [best_path(setting.loads[i], setting.caps[i], setting.cluster, setting.starts)
            for i in range(len(names))]
    costs = [_change_costs(setting, i, best[i], options, running, change_seconds)
             for i in range(len(names))]

    def with_path(current: np.ndarray, i: int) -> np.ndarray:
        out = current.copy()
        out[i] = best[i]
        return out

    alone = [float(np.sum(setting.served_ops(with_path(paths, i)) - base_ops) - costs[i].sum())
             for i in range(len(names))]
    taken: dict[int, tuple[float, str | None]] = {}
    probability: dict[int, float | None] = {}
    seg_cost = np.zeros(len(setting.starts))
    for i in sorted(range(len(names)), key=lambda i: (-alone[i], names[i])):
        cost = float(costs[i].sum())
        if np.array_equal(best[i], setting.cluster):
            taken[i] = (0.0, "the cluster-wide value is already its best")
            continue
        trial = with_path(paths, i)
        gain = float(np.sum(setting.served_ops(trial) - setting.served_ops(paths)))
        p = probability[i] = setting.p_gain(paths, trial, cost=cost) if gain > cost else None
        if gain > cost and (p is None or p >= setting.confidence):
            paths, seg_cost = trial, seg_cost + costs[i]
            taken[i] = (gain, None)
        elif gain > cost:
            taken[i] = (gain, f"P(gain > cost) {p:.2f} is below the confidence "
                              f"{setting.confidence:g} over the model's coefficient draws")
        else:
            taken[i] = (gain, f"its gain {gain:.4g} ops does not beat its change cost "
                              f"{cost:.4g} ops")
    final_ops = setting.served_ops(paths)
    bounds = [*setting.starts[1:], n_t]
    seg_gain = [float(np.sum(final_ops[lo:hi] - base_ops[lo:hi]))
                for lo, hi in zip(setting.starts, bounds, strict=True)]
    choices = {
        name: replace(_table_choice(setting, i, name, paths[i], best[i], options, taken[i],
                                    float(costs[i].sum())), p_gain=probability.get(i))
        for i, name in enumerate(names)
    }
    return PerTableChoices(
        keys=keys, starts=setting.starts, running=dict(options[running]),
        cluster=tuple(dict(options[int(setting.cluster[t])]) for t in setting.starts),
        tables=choices, segment_gain_ops=tuple(seg_gain),
        segment_cost_ops=tuple(float(c) for c in seg_cost),
    )


def _table_choice(setting: ChoiceSetting, i: int, name: str, path: np.ndarray, best: np.ndarray,
                  options: Sequence[Mapping[str, Any]], taken: tuple[float, str | None],
                  cost: float) -> TableChoice:
    gain, reason = taken
    t = np.arange(len(best))
    return TableChoice(
        table=name,
        values=tuple(dict(options[int(path[s])]) for s in setting.starts),
        best=tuple(dict(options[int(best[s])]) for s in setting.starts),
        override=reason is None,
        capacity_chosen=float(np.mean(setting.caps[i, t, best])),
        capacity_cluster=float(np.mean(setting.caps[i, t, setting.cluster])),
        gain_ops=gain, cost_ops=cost, reason=reason,
    )


def with_per_table(
    steps: Sequence[Mapping[str, Any]], choices: PerTableChoices, *, tables: Sequence[str],
    start: datetime, step_seconds: float, n_steps: int,
) -> list[dict[str, Any]]:
    """The plan's steps (plain data, :func:`planner.planning.pipeline.steps_from_evaluation`)
    with the per-table overrides of ``choices``, whose segments are the steps' intervals.

    Each step gets its segment's ``per_table`` (an override holds for its step only, so a
    step repeats those that go on), the ``tables`` given where a table's value changes
    (a table returning to the cluster-wide value included), the changed keys in ``live``
    (a table option changes live) and the segment's gain and cost in ``expected``. When
    no step is due at the start and an override pays before the first, a step due at the
    start changes only the tables.
    """
    out = steps_by_segment(steps, choices.starts, pays_at_start=bool(choices.overrides(0)),
                           start=start, step_seconds=step_seconds, n_steps=n_steps)
    for step, j in out:
        _add_segment(step, choices, j, tables)
    return [step for step, _ in out]


def steps_by_segment(
    steps: Sequence[Mapping[str, Any]], starts: Sequence[int], *, pays_at_start: bool,
    start: datetime, step_seconds: float, n_steps: int,
) -> list[tuple[dict[str, Any], int]]:
    """Copies of the plan's ``steps``, each with the segment it starts (its index in
    ``starts``), numbered ``s1``, ``s2``, ... When no step is due at the start and
    ``pays_at_start`` (an override pays in the hold), a step due at the start that changes
    nothing cluster-wide (``target`` {}) comes first, for the overrides to fill.
    """
    due = [round((datetime.fromisoformat(s["due"]) - start).total_seconds() / step_seconds)
           for s in steps]
    out = [dict(s) for s in steps]
    if (not due or due[0] > 0) and pays_at_start:
        until = start + timedelta(seconds=(due[0] if due else n_steps) * step_seconds)
        out.insert(0, {"id": "", "due": start.isoformat(), "until": until.isoformat(),
                       "target": {}, "per_node": {}, "live": [], "restart": [],
                       "batches": [], "expected": {"benefit_ops": 0.0, "cost_ops": 0.0,
                                                   "net_ops": 0.0}})
        due.insert(0, 0)
    segments = []
    for i, (step, t) in enumerate(zip(out, due, strict=True)):
        if t not in starts:  # a caller's bug: the choices were made on other steps
            raise ValueError(f"step {step['id']} is due at interval {t}, where the choices' "
                             f"cluster-wide configuration does not change ({tuple(starts)})")
        step["id"] = f"s{i + 1}"
        segments.append(starts.index(t))
    return list(zip(out, segments, strict=True))


def _add_segment(step: dict[str, Any], choices: PerTableChoices, j: int,
                 tables: Sequence[str]) -> None:
    """Step ``step`` (segment ``j``) with the segment's overrides, tables, live keys and
    expected figures."""
    overrides = choices.overrides(j)
    changed = choices.changes(j)
    if overrides:
        step["per_table"] = overrides
    if changed:  # the plan names tables only where some table's values change
        step["tables"] = list(dict.fromkeys([*step.get("tables", []), *tables]))
    step["live"] = [*step["live"], *(k for k in changed
                                     if k not in step["live"] and k not in step["restart"])]
    ex = dict(step["expected"])
    ex["benefit_ops"] = float(ex["benefit_ops"]) + choices.segment_gain_ops[j]
    ex["cost_ops"] = float(ex["cost_ops"]) + choices.segment_cost_ops[j]
    ex["net_ops"] = ex["benefit_ops"] - ex["cost_ops"]
    step["expected"] = ex
