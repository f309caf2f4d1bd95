"""Heterogeneous plans (issue 42): the planner's decomposition, a joint GA and the DP.

Per-table and per-node values make the plan space ``candidates^groups``: here, per time
point, K cluster-wide restart-class candidates x V table options per table x U node
options per node. The exact DP (:func:`planner.planning.optimiser.solve_dp`) cannot reach
it; ``kairos plan`` decides it by decomposition (the DP's cluster-wide schedule, then each
table's and node's best path given that schedule). This bench defines ONE objective for a
whole heterogeneous plan and measures on it:

* ``decomposition``: the exact DP over the homogeneous candidates (every table and node on
  the cluster-wide value), then :func:`planner.planning.per_table.choose_per_table` and
  :func:`planner.planning.per_node.choose_per_node` on its schedule, as ``kairos plan``
  does (the DP here is given the joint objective's homogeneous capacities: see
  "Simplifications");
* ``decomposition + track polish``: the GA's final polish alone (:func:`polish`: each
  track in turn set to its exact best with the others held) from the decomposition's plan;
* ``ga``: a DEAP GA over the joint genome (one track of values per time point for the
  cluster-wide candidate, each table and each node), default budget (the optimiser's
  GAOptions), several seeds; the first seed also without the polish;
* ``ga-long``: the same GA with a much larger budget (the reference);
* ``homogeneous-dp``: the DP's optimum on the homogeneous subspace;
* ``bound``: the best joint state per time point with every switch free (an upper bound,
  not a plan).

Run from the repository root (``PYTHONPATH=.``: this checkout's planner, not the one the
shared venv's editable install points at)::

    PYTHONPATH=. .venv/bin/python bench/hetero_bench.py

One JSON line per method, then a table. Wall and CPU seconds are this process's; ``peak
RSS`` is the process's peak resident set so far (monotone: the interpreter and its imports
are most of it; ``rss_before_mb`` is the figure before the first method).

The problem (:func:`build_problem`, seeded): 12 nodes, 4 tables of different mixes (a
write-heavy time series whose reads rise for a dashboard hour, read-heavy profiles, mixed
sessions, scan-heavy reports) over 72 five-minute decision points; each table's load moves
on its own, and each node coordinates mostly one table (3 home nodes a table) plus an even
part of every table, so node mixes differ and move. Table option: ``compaction`` (STCS,
LCS, from the space). Node options: ``concurrent_reads`` x ``concurrent_writes`` (32, 64
each, from the space). Cluster-wide restart-class candidates: ``memtable_cleanup_threshold``
x ``memtable_flush_writers`` (two values each, from the space). The model is the shipped
prior with the class-dependent thread effects of docs/planning.md's per-node example (+0.3
for a class's own stage at 64 threads, -0.35 for the other's): the prior has no node-level
thread effect, so per-node choices would be void under it.

The objective of a plan (a state per time point: cluster-wide candidate ``k``, each
table's option ``v_t``, each node's option ``u_n``) is what the planner credits:

* capacity at time point ``tau``: node ``n`` serves its tables' operations, each meeting the
  capacity the model predicts for its table's mix under ``(k, v_t, u_n)``, combined
  harmonically over the tables by the node's own load shares
  (:func:`planner.planning.per_table.harmonic_capacity`); the cluster saturates when its
  first node does (:func:`planner.planning.per_node.min_capacity`);
* served work: the pipeline's credit of that capacity
  (:func:`planner.planning.costbenefit.served_matrix`; ``offered``: ``min(load, capacity)``)
  times the step;
* minus a cluster-wide restart change: the planner's restart cost
  (:class:`planner.planning.costbenefit.SwitchCostTensor`: rolling restart in the ring's
  safe batches, T_r 60 s, 5 % survivor penalty) between the joint capacity of the state
  before (on this time point's load) and after;
* minus a table's compaction change: the planner's compaction change seconds (120 s,
  :func:`planner.planning.pipeline.change_seconds_matrix`) times the served rate after the
  change times the table's share of the load (per_table.py's rule);
* node changes are live and free (``live_seconds`` 0).

Simplifications (printed in the output): a restart fits in one decision point (3 batches x
60 s <= 300 s: no lock-out spans two points, so every schedule is feasible); during a
restart the joint capacities before and after stand in for the planner's cluster-wide ones;
a table's change is priced at the served rate after it (per_table.py prices it at the
cluster-wide plan's; SwitchCostTensor at the new candidate's, which is this). ``kairos
plan``'s DP credits a candidate with the capacity of the aggregate mix; the DP here is
given the joint objective's capacity of the homogeneous state instead (the two differ:
the model is log-linear in the mix, the joint objective harmonic over tables and a min
over nodes), so that its optimum is the exact optimum of this objective on the
homogeneous subspace, checked by evaluating its plan with the joint objective.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from planner.model.performance import PerformanceModel, load_default_model
from planner.model.spaces import get_space
from planner.planning import optimiser as op
from planner.planning.costbenefit import (
    PlanningProblem,
    ReconfigModel,
    Served,
    SwitchCostTensor,
    served_matrix,
)
from planner.planning.per_node import NodeWorkload, choose_per_node, min_capacity
from planner.planning.per_table import TableWorkload, choose_per_table, harmonic_capacity
from planner.planning.pipeline import (
    DEFAULT_CHANGE_SECONDS,
    capacity_matrix,
    change_seconds_matrix,
    make_problem,
    restart_matrix,
)
from planner.topology.batching import safe_batches
from planner.topology.ring import Ring

ENGINE = "cassandra"
#: The cluster-wide restart-class parameters searched (two values each, from the space).
CLUSTER_KEYS = ("memtable_cleanup_threshold", "memtable_flush_writers")
#: The table-level option (``location: table``).
TABLE_KEYS = ("compaction",)
#: The node-level live options the test model has an effect for.
NODE_KEYS = ("concurrent_reads", "concurrent_writes")
#: name, mix (read, update, insert, scan) at rest, the same in the dashboard window (None:
#: no change), base load share, bump centre and width (fractions of the horizon), bump size.
TABLES: tuple[tuple[str, tuple[float, ...], tuple[float, ...] | None, float, float, float,
                    float], ...] = (
    ("metrics.events", (0.05, 0.05, 0.90, 0.0), (0.60, 0.05, 0.35, 0.0), 0.35, 0.15, 0.10, 1.5),
    ("shop.profiles", (0.90, 0.10, 0.0, 0.0), None, 0.30, 0.50, 0.15, 1.2),
    ("app.sessions", (0.50, 0.40, 0.10, 0.0), None, 0.20, 0.70, 0.25, 0.6),
    ("analytics.reports", (0.35, 0.0, 0.10, 0.55), None, 0.15, 0.85, 0.08, 2.0),
)
#: The dashboard window of the time series table (fractions of the horizon).
DASHBOARD = (0.35, 0.55)
#: Share of a table's load its three home nodes coordinate (the rest evenly over all).
HOME_SHARE = 0.6
#: The peak of offered load over the best homogeneous capacity at that point.
PEAK_UTILISATION = 1.25


def thread_test_model(prior: PerformanceModel) -> PerformanceModel:
    """docs/planning.md's per-node test model: more threads of a class's own stage +0.3,
    the other's -0.35 (the prior has no thread effect)."""
    col = {f.param: 1 + i for i, f in enumerate(prior.features)}
    coef = prior.coef.copy()
    for c, cls in enumerate(prior.classes):
        own, other = (("concurrent_reads", "concurrent_writes") if cls in ("read", "scan")
                      else ("concurrent_writes", "concurrent_reads"))
        coef[c, col[own]], coef[c, col[other]] = 0.3, -0.35
    return replace(prior, name="threads-test", coef=coef)


@dataclass(frozen=True)
class HeteroProblem:
    """A heterogeneous planning problem; a plan is ``(R, T)`` option indices, R = 1 +
    tables + nodes tracks (row 0 the cluster-wide candidate, then the tables, then the
    nodes). ``caps[t, tau, k, v, u]``: the capacity table ``t``'s mix meets at ``tau``
    under cluster candidate ``k``, table option ``v`` and node option ``u``."""

    model: PerformanceModel
    base: Mapping[str, Any]  # complete running configuration
    cluster_opts: tuple[Mapping[str, Any], ...]
    table_opts: tuple[Mapping[str, Any], ...]
    node_opts: tuple[Mapping[str, Any], ...]
    tables: tuple[str, ...]
    hosts: tuple[str, ...]
    table_load: np.ndarray  # (n_tab, T) ops/s
    table_mix: np.ndarray  # (n_tab, T, C)
    node_table_load: np.ndarray  # (n_nodes, n_tab, T) ops/s node n coordinates of table t
    caps: np.ndarray  # (n_tab, T, K, V, U)
    restart: np.ndarray  # (K, K) bool
    change: np.ndarray  # (V, V) seconds of full throughput a table option change costs
    reconfig: ReconfigModel
    step_seconds: float
    initial: np.ndarray  # (R,) the running state
    served: Served = "offered"
    headroom_weight: float = 0.0

    @property
    def n_steps(self) -> int:
        return int(self.table_load.shape[1])

    @property
    def n_tracks(self) -> int:
        return 1 + len(self.tables) + len(self.hosts)

    @property
    def options(self) -> np.ndarray:
        """``(R,)`` the number of options of each track."""
        return np.array([len(self.cluster_opts)] + [len(self.table_opts)] * len(self.tables)
                        + [len(self.node_opts)] * len(self.hosts))

    @property
    def total_load(self) -> np.ndarray:
        return self.table_load.sum(axis=0)

    @property
    def node_load(self) -> np.ndarray:
        return self.node_table_load.sum(axis=1)

    def config(self, k: int, v: int, u: int) -> dict[str, Any]:
        """The complete configuration of cluster candidate ``k``, table option ``v`` and
        node option ``u``."""
        return get_space(ENGINE).complete(
            {**self.base, **self.cluster_opts[k], **self.table_opts[v], **self.node_opts[u]})


def _grid(keys: Sequence[str], space: Any) -> tuple[dict[str, Any], ...]:
    """Every combination of the space's candidate values of ``keys``, the default first."""
    axes = [list(dict.fromkeys([space[k].default, *space[k].candidate_values])) for k in keys]
    return tuple(dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes))


def _profiles(n_steps: int, seed: int, classes: Sequence[str]
              ) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ``(n_tab, T)`` load shapes and ``(n_tab, T, C)`` mixes of :data:`TABLES`."""
    rng = np.random.default_rng(seed)
    x = (np.arange(n_steps) + 0.5) / n_steps
    loads, mixes = [], []
    dash = (x >= DASHBOARD[0]) & (x < DASHBOARD[1])
    for _name, mix, dash_mix, share, centre, width, bump in TABLES:
        shape = share * (1 + bump * np.exp(-0.5 * ((x - centre) / width) ** 2))
        loads.append(shape * rng.lognormal(0.0, 0.05, n_steps))
        m = np.tile(np.asarray(mix, dtype=float), (n_steps, 1))
        if dash_mix is not None:
            m[dash] = dash_mix
        m = m * rng.uniform(0.95, 1.05, m.shape)  # small seeded jitter of the mix
        mixes.append(m / m.sum(axis=1, keepdims=True))
    assert len(classes) == 4
    return np.stack(loads), np.stack(mixes)


def build_problem(*, n_nodes: int = 12, n_tables: int = 4, n_steps: int = 72,
                  step_seconds: float = 300.0, seed: int = 1,
                  cluster_keys: Sequence[str] = CLUSTER_KEYS,
                  node_opts: Sequence[Mapping[str, Any]] | None = None,
                  served: Served = "offered", headroom_weight: float = 0.0,
                  peak_utilisation: float = PEAK_UTILISATION) -> HeteroProblem:
    """The synthetic heterogeneous problem (the module docstring); the smaller arguments
    make the unit test's instance."""
    space = get_space(ENGINE)
    model = thread_test_model(load_default_model(ENGINE))
    base = space.complete({})
    cluster = _grid(cluster_keys, space)
    tables_opts = _grid(TABLE_KEYS, space)
    nodes_opts = tuple(dict(o) for o in node_opts) if node_opts is not None else _grid(
        NODE_KEYS, space)
    shape, mix = _profiles(n_steps, seed, model.classes)
    shape, mix = shape[:n_tables], mix[:n_tables]
    hosts = tuple(f"n{i:02d}" for i in range(n_nodes))
    # node n's home table: n mod tables (3 home nodes a table for 12 nodes and 4 tables)
    home = np.zeros((n_nodes, n_tables))
    home[np.arange(n_nodes), np.arange(n_nodes) % n_tables] = 1.0
    affinity = (1 - HOME_SHARE) / n_nodes + HOME_SHARE * home / home.sum(axis=0)
    configs = [get_space(ENGINE).complete({**base, **c, **t, **u})
               for c in cluster for t in tables_opts for u in nodes_opts]
    caps = np.stack([capacity_matrix(model, mix[t], configs) for t in range(n_tables)])
    caps = caps.reshape(n_tables, n_steps, len(cluster), len(tables_opts), len(nodes_opts))
    # RF 3 at QUORUM (the lab's); a test's 2-node ring has RF 2, where only ONE is safe
    batches = safe_batches(Ring.simple(list(hosts), rf=min(3, n_nodes)),
                           consistency_level="QUORUM" if n_nodes >= 3 else "ONE").batches
    reconfig = ReconfigModel.from_batches(batches, restart_seconds=60.0, survivor_penalty=0.05)
    if reconfig.duration_seconds > step_seconds:
        raise ValueError("a restart must fit in one decision point (see Simplifications)")
    full = tuple(space.complete({**base, **c}) for c in cluster)
    table_full = [space.complete({**base, **t}) for t in tables_opts]
    prob = HeteroProblem(
        model=model, base=base, cluster_opts=cluster, table_opts=tables_opts,
        node_opts=nodes_opts, tables=tuple(t[0] for t in TABLES[:n_tables]), hosts=hosts,
        table_load=shape, table_mix=mix,
        node_table_load=affinity[:, :, None] * shape[None, :, :],
        caps=caps, restart=restart_matrix(ENGINE, list(full)),
        change=change_seconds_matrix(ENGINE, table_full), reconfig=reconfig,
        step_seconds=step_seconds, initial=np.zeros(1 + n_tables + n_nodes, dtype=np.int64),
        served=served, headroom_weight=headroom_weight,
    )
    # Scale the load (capacity depends on the shares only) so that its peak is
    # peak_utilisation of the best homogeneous capacity there: quiet and saturated hours.
    best = homogeneous_capacity(prob).max(axis=1)
    scale = peak_utilisation / float(np.max(prob.total_load / best))
    return replace(prob, table_load=prob.table_load * scale,
                   node_table_load=prob.node_table_load * scale)


# ------------------------------------------------------------------ objective
def capacity(p: HeteroProblem, states: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """``(M,)`` cluster capacity of ``(M, R)`` states at time points ``tau`` ``(M,)``:
    harmonic over each node's tables, then the first node to saturate."""
    n_tab, n_nodes = len(p.tables), len(p.hosts)
    m = len(states)
    k = states[:, 0]
    v = states[:, 1:1 + n_tab]
    u = states[:, 1 + n_tab:]
    met = p.caps[np.arange(n_tab)[None, :, None], tau[:, None, None], k[:, None, None],
                 v[:, :, None], u[:, None, :]]  # (M, n_tab, n_nodes)
    loads = p.node_table_load[:, :, tau].transpose(1, 2, 0)  # (n_tab, M, n_nodes)
    node_cap = harmonic_capacity(loads.reshape(n_tab, -1),
                                 met.transpose(1, 0, 2).reshape(n_tab, -1)).reshape(m, n_nodes)
    return min_capacity(p.node_load[:, tau], node_cap.T)


def _credit(p: HeteroProblem, cap: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Served rate credited (ops/s) at capacities ``cap`` and offered loads ``load``."""
    return served_matrix(cap[:, None], load=load, served=p.served,
                         headroom_weight=p.headroom_weight)[:, 0]


def restart_costs(p: HeteroProblem, before: np.ndarray, after: np.ndarray,
                  load: np.ndarray) -> np.ndarray:
    """The planner's rolling-restart cost (ops) of each switch from capacity ``before`` to
    ``after`` at offered ``load``: a two-candidate SwitchCostTensor with one row per switch
    (a restart fits in one decision point, so each row is read alone)."""
    tensor = SwitchCostTensor(
        np.stack([before, after], axis=1), restart=np.array([[False, True], [True, False]]),
        model=p.reconfig, step_seconds=p.step_seconds,
        load=None if p.served == "capacity" else load, served=p.served,
        headroom_weight=p.headroom_weight)
    n = len(before)
    return np.asarray(tensor[np.arange(n), np.zeros(n, dtype=np.int64),
                             np.ones(n, dtype=np.int64)], dtype=float).reshape(n)


def contributions(p: HeteroProblem, prev: np.ndarray, cur: np.ndarray,
                  tau: np.ndarray) -> np.ndarray:
    """``(M,)`` what time point ``tau`` adds to a plan that goes from state ``prev`` to
    ``cur`` there: served work minus the restart and table change costs."""
    total = p.total_load[tau]
    cap = capacity(p, cur, tau)
    rate = _credit(p, cap, total)
    out = rate * p.step_seconds
    rs = p.restart[prev[:, 0], cur[:, 0]]
    if rs.any():
        idx = np.flatnonzero(rs)
        out[idx] -= restart_costs(p, capacity(p, prev[idx], tau[idx]), cap[idx], total[idx])
    safe = np.where(total > 0, total, 1.0)
    for i in range(len(p.tables)):
        a, b = prev[:, 1 + i], cur[:, 1 + i]
        share = np.where(total > 0, p.table_load[i, tau] / safe, 0.0)
        out -= p.change[a, b] * rate * share  # 0 where the option stays
    return out


def objective(p: HeteroProblem, plans: np.ndarray) -> np.ndarray:
    """``(P,)`` value (ops) of ``(P, R, T)`` plans (or one ``(R, T)`` plan: a scalar array)."""
    pl = np.asarray(plans, dtype=np.int64)
    single = pl.ndim == 2
    pl = pl[None] if single else pl
    n_p, n_r, n_t = pl.shape
    prev = np.concatenate([np.broadcast_to(p.initial[None, :, None], (n_p, n_r, 1)),
                           pl[:, :, :-1]], axis=2)
    flat = lambda a: a.transpose(0, 2, 1).reshape(-1, n_r)  # noqa: E731
    tau = np.tile(np.arange(n_t), n_p)
    out = contributions(p, flat(prev), flat(pl), tau).reshape(n_p, n_t).sum(axis=1)
    return out[0] if single else out


# ------------------------------------------------------------ homogeneous DP
def homogeneous_states(p: HeteroProblem) -> list[tuple[int, int, int]]:
    """The homogeneous candidates ``(k, v, u)``: every table on ``v``, every node on ``u``."""
    return list(itertools.product(range(len(p.cluster_opts)), range(len(p.table_opts)),
                                  range(len(p.node_opts))))


def _homogeneous_row(p: HeteroProblem, k: int, v: int, u: int) -> np.ndarray:
    return np.array([k] + [v] * len(p.tables) + [u] * len(p.hosts), dtype=np.int64)


def homogeneous_capacity(p: HeteroProblem) -> np.ndarray:
    """``(T, H)`` the joint capacity of each homogeneous candidate."""
    rows = np.stack([_homogeneous_row(p, *h) for h in homogeneous_states(p)])
    n_t, n_h = p.n_steps, len(rows)
    states = np.repeat(rows, n_t, axis=0)
    tau = np.tile(np.arange(n_t), n_h)
    return capacity(p, states, tau).reshape(n_h, n_t).T


def homogeneous_problem(p: HeteroProblem) -> tuple[PlanningProblem, list[tuple[int, int, int]]]:
    """The planner's problem over the homogeneous candidates, built as ``kairos plan``
    builds one (pipeline.make_problem, restart and change matrices of the complete
    configurations), on the joint objective's homogeneous capacities."""
    homo = homogeneous_states(p)
    configs = [p.config(*h) for h in homo]
    initial = homo.index((int(p.initial[0]), int(p.initial[1]), int(p.initial[-1])))
    prob = make_problem(
        homogeneous_capacity(p), restart=restart_matrix(ENGINE, configs), reconfig=p.reconfig,
        step_seconds=p.step_seconds, load=None if p.served == "capacity" else p.total_load,
        served=p.served, headroom_weight=p.headroom_weight, initial=initial,
        change_seconds=change_seconds_matrix(ENGINE, configs))
    return prob, homo


def plan_of_schedule(p: HeteroProblem, schedule: np.ndarray,
                     homo: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """``(R, T)``: a homogeneous schedule (candidate per time point) as a joint plan."""
    return np.stack([_homogeneous_row(p, *homo[int(h)]) for h in schedule], axis=1)


# ------------------------------------------------------------- decomposition
def decomposition(p: HeteroProblem, dp_schedule: np.ndarray,
                  homo: Sequence[tuple[int, int, int]]) -> tuple[np.ndarray, dict[str, Any]]:
    """``kairos plan``'s decomposition: the DP's cluster-wide schedule, then each table's
    (choose_per_table) and each node's (choose_per_node) values on it; the joint plan and
    which parts were overridden."""
    plan = plan_of_schedule(p, dp_schedule, homo)
    configs = [p.config(*homo[int(h)]) for h in dp_schedule]
    n_tab = len(p.tables)
    tables = {name: TableWorkload(p.table_load[i], p.table_mix[i])
              for i, name in enumerate(p.tables)}
    per_table = choose_per_table(
        model=p.model, configs=configs, running=p.base, tables=tables,
        step_seconds=p.step_seconds,
        change_seconds=lambda k, a, b: float(DEFAULT_CHANGE_SECONDS.get(k, 0.0)),
        values=_values(p.table_opts), served=p.served,
        headroom_weight=p.headroom_weight)
    node_mix = np.einsum("ntk,tkc->nkc", p.node_table_load, p.table_mix)
    node_mix /= node_mix.sum(axis=2, keepdims=True)
    nodes = {h: NodeWorkload(p.node_load[n], node_mix[n]) for n, h in enumerate(p.hosts)}
    per_node = choose_per_node(
        model=p.model, configs=configs, running=p.base, nodes=nodes,
        step_seconds=p.step_seconds, keys=NODE_KEYS,
        values=_values(p.node_opts), served=p.served,
        headroom_weight=p.headroom_weight)
    bounds = [*per_table.starts[1:], p.n_steps]
    for i, name in enumerate(p.tables):
        for j, (lo, hi) in enumerate(zip(per_table.starts, bounds, strict=True)):
            plan[1 + i, lo:hi] = _index(p.table_opts, per_table.tables[name].values[j])
    bounds = [*per_node.starts[1:], p.n_steps]
    for n, host in enumerate(p.hosts):
        for j, (lo, hi) in enumerate(zip(per_node.starts, bounds, strict=True)):
            plan[1 + n_tab + n, lo:hi] = _index(p.node_opts, per_node.nodes[host].values[j])
    info = {"tables_overridden": sum(c.override for c in per_table.tables.values()),
            "nodes_overridden": sum(c.override for c in per_node.nodes.values()),
            "groups": [f"{g.name}: {len(g.hosts)}" for g in per_node.groups]}
    return plan, info


def _values(opts: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Per key, the values the options give it (the options are their product)."""
    return {k: list(dict.fromkeys(o[k] for o in opts)) for k in opts[0]}


def _index(opts: Sequence[Mapping[str, Any]], values: Mapping[str, Any]) -> int:
    return next(i for i, o in enumerate(opts) if all(values[k] == o[k] for k in o))


# -------------------------------------------------------------- joint search
def window_best(p: HeteroProblem, lo: int, hi: int) -> np.ndarray:
    """``(R,)`` the state serving most over ``[lo, hi)`` with switches free: every cluster
    candidate and table assignment, each node on its own best (the node options separate
    under the min over nodes once the rest is fixed: a node's best keeps it the least busy
    over the window)."""
    n_tab = len(p.tables)
    k_opts, v_opts = len(p.cluster_opts), len(p.table_opts)
    combos = [(k, a) for k in range(k_opts)
              for a in itertools.product(range(v_opts), repeat=n_tab)]
    taus = np.arange(lo, hi)
    rows = []
    for k, a in combos:
        # busy[n, u]: node n's time over the window under option u (its tables' ops / cap)
        met = p.caps[np.arange(n_tab)[:, None], taus[None, :], k, np.asarray(a)[:, None]]
        busy = np.einsum("ntw,twu->nu", p.node_table_load[:, :, lo:hi], 1.0 / met)
        rows.append(np.array([k, *a, *np.argmin(busy, axis=1)], dtype=np.int64))
    states = np.repeat(np.stack(rows), len(taus), axis=0)
    tau = np.tile(taus, len(rows))
    rate = _credit(p, capacity(p, states, tau), p.total_load[tau])
    best = int(np.argmax(rate.reshape(len(rows), len(taus)).sum(axis=1)))
    return rows[best]


def bound(p: HeteroProblem) -> float:
    """Upper bound: the best state at every time point, every switch free."""
    plan = np.stack([window_best(p, t, t + 1) for t in range(p.n_steps)], axis=1)
    tau = np.arange(p.n_steps)
    return float(np.sum(_credit(p, capacity(p, plan.T, tau), p.total_load)) * p.step_seconds)


def heuristic_plans(p: HeteroProblem) -> list[np.ndarray]:
    """Plans that seed the GA (as optimiser.heuristic_genomes does for one track): stay,
    each homogeneous candidate held, and the best state per window of 1, 2, 4, ...
    points (:func:`window_best`)."""
    n_t = p.n_steps
    out = [np.repeat(p.initial[:, None], n_t, axis=1)]
    cap = homogeneous_capacity(p)
    homo = homogeneous_states(p)
    for h in np.argsort(-cap.sum(axis=0)):
        out.append(np.repeat(_homogeneous_row(p, *homo[int(h)])[:, None], n_t, axis=1))
    for w in sorted({1, 2, 4, 8, 16, max(1, n_t // 4), n_t}):
        out.append(np.concatenate(
            [np.repeat(window_best(p, s, min(n_t, s + w))[:, None], min(n_t, s + w) - s, axis=1)
             for s in range(0, n_t, w)], axis=1))
    return out


def track_dp(p: HeteroProblem, plan: np.ndarray, r: int) -> tuple[np.ndarray, float]:
    """The best values of track ``r`` with every other track of ``plan`` held (exact: a
    time point's contribution depends on this track's values there and just before);
    returns the plan and its value."""
    n_opt, n_t = int(p.options[r]), p.n_steps
    pairs = list(itertools.product(range(n_opt), repeat=2))  # (before, now)
    prev = np.concatenate([p.initial[:, None], plan[:, :-1]], axis=1)
    cur_s = np.repeat(plan.T[None], len(pairs), axis=0)  # (pairs, T, R)
    prev_s = np.repeat(prev.T[None], len(pairs), axis=0)
    for j, (a, b) in enumerate(pairs):
        cur_s[j, :, r] = b
        prev_s[j, 1:, r] = a  # at 0 the track was its initial value
    tau = np.tile(np.arange(n_t), len(pairs))
    gain = contributions(p, prev_s.reshape(-1, p.n_tracks), cur_s.reshape(-1, p.n_tracks),
                         tau).reshape(n_opt, n_opt, n_t)
    value = gain[int(p.initial[r]), :, 0].copy()  # (now,) at time 0
    back = np.zeros((n_t, n_opt), dtype=np.int64)
    for t in range(1, n_t):
        total = value[:, None] + gain[:, :, t]  # (before, now)
        back[t] = np.argmax(total, axis=0)
        value = total[back[t], np.arange(n_opt)]
    out = plan.copy()
    x = int(np.argmax(value))
    best = float(value[x])
    for t in range(n_t - 1, -1, -1):
        out[r, t] = x
        x = int(back[t, x])
    return out, best


def polish(p: HeteroProblem, plan: np.ndarray, value: float, *, rounds: int = 20
           ) -> tuple[np.ndarray, float, int]:
    """Block coordinate ascent: each track in turn set to its best with the others held
    (:func:`track_dp`), until a round gains nothing (the optimiser's segment hill-climb,
    made exact per track); returns the plan, its value and the states evaluated."""
    evals = 0
    for _ in range(rounds):
        start = value
        for r in range(p.n_tracks):
            trial, v = track_dp(p, plan, r)
            evals += int(p.options[r]) ** 2 * p.n_steps
            if v > value + 1e-9 * max(1.0, abs(value)):
                plan, value = trial, v
        if value <= start + 1e-9 * max(1.0, abs(start)):
            break
    return plan, value, evals


def _mutate(ind: list[int], rng: random.Random, p: HeteroProblem) -> None:
    """Segment mutation of one track in place (the optimiser's moves on a track): shift a
    boundary, drop a segment, retarget a segment, insert a block, or copy a window of a
    like track (a table's or a node's) onto it."""
    n_t = p.n_steps
    r = rng.randrange(p.n_tracks)
    n_opt = int(p.options[r])
    row = ind[r * n_t:(r + 1) * n_t]
    segs = op._segments(row)
    move = rng.random()
    if move < 0.25 and len(segs) > 1:
        i = rng.randrange(1, len(segs))
        s, e, v = segs[i]
        d = rng.randint(1, max(1, n_t // 8))
        if rng.random() < 0.5:
            row[max(0, s - d):s] = [v] * (s - max(0, s - d))
        else:
            row[s:min(e, s + d)] = [segs[i - 1][2]] * (min(e, s + d) - s)
    elif move < 0.45 and len(segs) > 1:
        i = rng.randrange(len(segs))
        s, e, _ = segs[i]
        row[s:e] = [segs[i - 1][2] if i > 0 else segs[1][2]] * (e - s)
    elif move < 0.7:
        s, e, v = segs[rng.randrange(len(segs))]
        row[s:e] = [rng.choice([x for x in range(n_opt) if x != v] or [v])] * (e - s)
    elif move < 0.85:
        length = min(n_t, max(1, int(rng.expovariate(1.0 / 6))))
        s = rng.randrange(0, n_t - length + 1)
        row[s:s + length] = [rng.randrange(n_opt)] * length
    else:
        n_tab = len(p.tables)
        like = (range(1, 1 + n_tab) if 1 <= r <= n_tab else
                range(1 + n_tab, p.n_tracks) if r > n_tab else range(1))
        src = rng.choice(list(like))
        s = rng.randrange(n_t)
        e = rng.randrange(s, n_t) + 1
        row[s:e] = ind[src * n_t + s:src * n_t + e]
    ind[r * n_t:(r + 1) * n_t] = row


def _mate(a: list[int], b: list[int], rng: random.Random, p: HeteroProblem) -> None:
    """Crossover in place: swap a window of time on every track, or whole tracks."""
    n_t = p.n_steps
    if rng.random() < 0.5:
        s = rng.randrange(n_t)
        e = rng.randrange(s, n_t) + 1
        for r in range(p.n_tracks):
            lo, hi = r * n_t + s, r * n_t + e
            a[lo:hi], b[lo:hi] = b[lo:hi], a[lo:hi]
    else:
        for r in range(p.n_tracks):
            if rng.random() < 0.5:
                lo, hi = r * n_t, (r + 1) * n_t
                a[lo:hi], b[lo:hi] = b[lo:hi], a[lo:hi]


def _search(p: HeteroProblem, options: op.GAOptions, seed: int
            ) -> tuple[np.ndarray, float, int]:
    """One GA search (the optimiser's DEAP creator classes and generation)."""
    creator, _tb = op._toolbox()
    rng = random.Random(seed)
    shape = (p.n_tracks, p.n_steps)

    def make(genome: Sequence[int] | np.ndarray) -> Any:
        return creator.KairosPlan(np.asarray(genome).ravel().tolist())

    seeds = heuristic_plans(p)
    pop = [make(g) for g in seeds[:options.population]]
    while len(pop) < options.population:
        ind = make(seeds[rng.randrange(len(seeds))])
        for _ in range(rng.randint(1, 4)):
            _mutate(ind, rng, p)
        pop.append(ind)
    evals = 0

    def assess(inds: list[Any]) -> None:
        nonlocal evals
        if inds:
            vals = objective(p, np.array(inds, dtype=np.int64).reshape(-1, *shape))
            evals += len(inds)
            for ind, v in zip(inds, vals, strict=True):
                ind.fitness.values = (float(v),)

    assess(pop)
    for _gen in range(options.generations):
        pop = op.next_generation(pop, options, rng, make, lambda a, b: _mate(a, b, rng, p),
                                 lambda ind: _mutate(ind, rng, p), assess)
    finalists = op.distinct_best(pop, options)
    best = np.array(finalists[0], dtype=np.int64).reshape(shape)
    best_v = float(finalists[0].fitness.values[0])
    if options.polish:
        for ind in finalists:
            plan, v, extra = polish(p, np.array(ind, dtype=np.int64).reshape(shape),
                                    float(ind.fitness.values[0]))
            evals += extra
            if v > best_v:
                best, best_v = plan, v
    return best, best_v, evals


def solve_joint_ga(p: HeteroProblem, options: op.GAOptions) -> tuple[np.ndarray, float, int]:
    """``options.searches`` searches (seeds ``seed``, ``seed + 1``, ...; DEAP's global
    ``random`` seeded for each, then restored), the best kept: plan, value, evaluations."""
    results = []
    for i in range(options.searches):
        with op.seeded_random(options.seed + i):
            results.append(_search(p, options, options.seed + i))
    plan, value, _ = max(results, key=lambda r: r[1])
    check = float(objective(p, plan))
    if not math.isclose(check, value, rel_tol=1e-9, abs_tol=1e-6):
        raise AssertionError("GA fitness disagrees with objective()")  # pragma: no cover
    return plan, value, sum(r[2] for r in results)


# ---------------------------------------------------------------------- bench
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _switches(p: HeteroProblem, plan: np.ndarray) -> dict[str, int]:
    prev = np.concatenate([p.initial[:, None], plan[:, :-1]], axis=1)
    ch = plan != prev
    n_tab = len(p.tables)
    return {"restarts": int(np.sum(p.restart[prev[0], plan[0]])),
            "table_changes": int(ch[1:1 + n_tab].sum()),
            "node_changes": int(ch[1 + n_tab:].sum())}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rss0 = _peak_rss_mb()
    p, build_s, build_c = _timed(lambda: build_problem(
        n_steps=args.steps, seed=args.trace_seed, served=args.served,
        headroom_weight=0.5 if args.served == "work" else 0.0))
    space_size = int(np.prod(p.options.astype(float)))
    print(json.dumps({
        "case": "hetero", "nodes": len(p.hosts), "tables": list(p.tables),
        "decision_points": p.n_steps, "step_seconds": p.step_seconds,
        "cluster_candidates": [dict(c) for c in p.cluster_opts],
        "table_options": [dict(o) for o in p.table_opts],
        "node_options": [dict(o) for o in p.node_opts],
        "states_per_point": space_size, "homogeneous_candidates": len(homogeneous_states(p)),
        "model": f"{p.model.name}: the shipped prior plus docs/planning.md's per-node test "
                 "thread effects (the prior has no node-level thread effect)",
        "served": p.served, "restart_batches": len(p.reconfig.batch_fractions),
        "build_seconds": round(build_s, 3), "build_cpu_seconds": round(build_c, 3),
        "simplifications": [
            "a rolling restart fits in one decision point (no lock-out across points)",
            "a restart is priced on the joint capacities before and after",
            "a table's compaction change is priced at the served rate after it x its share",
            "the DP gets the joint objective's homogeneous capacities (kairos plan's DP: "
            "the aggregate mix's)",
        ],
    }), flush=True)
    rows: list[dict[str, Any]] = []

    def record(method: str, value: float, wall: float, cpu: float, plan: np.ndarray | None,
               **extra: Any) -> None:
        row = {"method": method, "objective_ops": round(value, 1), "seconds": round(wall, 3),
               "cpu_seconds": round(cpu, 3), "peak_rss_mb": round(_peak_rss_mb()),
               **(_switches(p, plan) if plan is not None else {}), **extra}
        rows.append(row)

    (hprob, homo), _, _ = _timed(lambda: homogeneous_problem(p))
    dp, dp_s, dp_c = _timed(lambda: op.solve_dp(hprob))
    dp_plan = plan_of_schedule(p, dp.schedule, homo)
    joint_of_dp = float(objective(p, dp_plan))
    if not math.isclose(joint_of_dp, dp.total_ops, rel_tol=1e-9):
        raise AssertionError(f"the joint objective of the DP's plan {joint_of_dp} is not the "
                             f"DP's value {dp.total_ops}")
    record("homogeneous-dp", dp.total_ops, dp_s, dp_c, dp_plan,
           candidates=hprob.n_candidates)
    (dec_plan, info), dec_s, dec_c = _timed(lambda: decomposition(p, dp.schedule, homo))
    record("decomposition", float(objective(p, dec_plan)), dec_s + dp_s, dec_c + dp_c,
           dec_plan, **info)
    # The GA's polish (per-track exact ascent) alone, from the decomposition's plan: how
    # much of the decomposition's shortfall one cheap local step recovers.
    (pol_plan, pol_value, _), pol_s, pol_c = _timed(
        lambda: polish(p, dec_plan, float(objective(p, dec_plan))))
    record("decomposition + track polish", pol_value, dec_s + dp_s + pol_s,
           dec_c + dp_c + pol_c, pol_plan)
    for i, seed in enumerate(args.seeds):
        for polished in (True, False) if i == 0 else (True,):
            opts = op.GAOptions(seed=seed * 100, population=args.population,
                                generations=args.generations, searches=args.searches,
                                polish=polished)
            (plan, value, evals), s, c = _timed(partial(solve_joint_ga, p, opts))
            record(f"ga seed {seed * 100}" + ("" if polished else ", no polish"), value, s, c,
                   plan, evaluations=evals)
    if not args.skip_long:
        opts = op.GAOptions(seed=9000, population=args.long_population,
                            generations=args.long_generations, searches=args.long_searches,
                            polish_top=8)
        (plan, value, evals), s, c = _timed(lambda: solve_joint_ga(p, opts))
        record("ga-long", value, s, c, plan, evaluations=evals)
    ub, ub_s, ub_c = _timed(lambda: bound(p))
    record("bound (no switch costs)", ub, ub_s, ub_c, None)
    best = max(r["objective_ops"] for r in rows if not r["method"].startswith("bound"))
    for r in rows:
        r["gap_to_best"] = round((best - r["objective_ops"]) / best, 6)
        print(json.dumps(r), flush=True)
    print(json.dumps({"rss_before_mb": round(rss0)}), flush=True)
    return rows


def print_table(rows: Sequence[Mapping[str, Any]]) -> None:
    print()
    print("| method | objective (ops) | gap to best | wall s | CPU s | peak RSS MB "
          "| restarts | table changes | node changes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['objective_ops']:,.0f} | {100 * r['gap_to_best']:.3f} % "
              f"| {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['peak_rss_mb']} "
              f"| {r.get('restarts', '')} | {r.get('table_changes', '')} "
              f"| {r.get('node_changes', '')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=72, help="decision points (300 s each)")
    parser.add_argument("--trace-seed", type=int, default=1)
    parser.add_argument("--served", choices=("offered", "work"), default="offered")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="GA runs: run s uses search seeds 100 s, 100 s + 1, ...")
    parser.add_argument("--population", type=int, default=op.GAOptions.population)
    parser.add_argument("--generations", type=int, default=op.GAOptions.generations)
    parser.add_argument("--searches", type=int, default=op.GAOptions.searches)
    parser.add_argument("--long-population", type=int, default=192)
    parser.add_argument("--long-generations", type=int, default=600)
    parser.add_argument("--long-searches", type=int, default=4)
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args()
    print_table(run(args))


if __name__ == "__main__":
    main()
