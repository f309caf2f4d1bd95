"""Per-node choices of node-level live parameters (MeT, seeds/001: nodes grouped by the
access pattern they serve, each group configured for its own).

The optimiser gives every node the cluster-wide configuration. A node whose coordinator
load is mostly reads and one whose load is mostly writes may each serve more with its own
values of a node-level parameter. Given the plan's cluster-wide configuration per time
point and each node's (inventory host's) forecast load and mix, :func:`choose_per_node`
picks each node's values of the node-level LIVE parameters (``change: live`` in
:mod:`planner.model.spaces`, table-level ones excluded: a table option is schema, which
every node shares). Restart-class parameters stay cluster-wide in this slice: a per-node
restart would need batches of its own, which the optimiser's costs do not price.

The rule. Node ``n`` serves its local load ``L_n``. The performance model predicts, for
node ``n``'s own mix under node ``n``'s configuration, the cluster capacity ``cap_n``; a
node's own capacity is ``cap_n / N`` (``N`` nodes: one node's part of a cluster of like
nodes). Where a request waits on several replicas (Cassandra), the cluster saturates
when its first node saturates, so at load shares ``s_n = L_n / sum L`` its capacity is::

    capacity = min_n (cap_n / N) / s_n

The slowest replicas bound it (:func:`min_capacity`). Where each request is served by the
one node that holds its key (Redis Cluster: the registry's ``shards_serve_alone``), a
saturated node loses only its own excess, and the cluster serves
``sum_n min(L_n, cap_n / N)`` (:func:`shard_capacity`): a node that saturates alone gains
from its own values even when another would saturate first. Maximising a min (or a sum) of
terms that each depend only on their own node's values separates: each node's best value
is the argmax of its own ``cap_n``, whatever the other nodes choose. A plan step holds one
value per node over several time points, so per step a node takes the value that
minimises its busy time over the step, ``sum_tau L_n(tau) / cap_n(v, tau)`` (the per-point
argmax whenever that is the same at every point of the step; ties and idle steps keep the
cluster-wide value).

Served work per time point is the pipeline's credit of that capacity
(:func:`planner.planning.costbenefit.served_matrix`: ``min(load, capacity)``, plus the
headroom term with ``served="work"``). A live change costs no served work (the pipeline
prices live changes at 0 s, ``live_seconds``), so a node gets an override when its choice
differs from the cluster-wide value and the served work it adds over the horizon is
positive, and, with scenarios (``kairos plan --scenarios``), positive in at least
``--confidence`` of the model's coefficient draws (draw ``s`` is one model for every node:
one stream per seed). Under a min a node adds work only when it bounds the cluster (under
the sum, only when it saturates), so a node's gain is what the whole assignment loses when
that node alone returns to the cluster-wide values; the weakest node under the rule is
dropped and the others re-weighed until every override left passes.

Nodes with the same values form a group, named by its nodes' dominant class (MeT's R, W,
RW, Scan; thresholds :data:`READ_SHARE`, :data:`WRITE_SHARE`, :data:`SCAN_SHARE`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from planner.engines import get_engine
from planner.errors import ValidationError
from planner.model.spaces import get_space
from planner.planning.costbenefit import Served
from planner.planning.per_table import (
    ChoiceSetting,
    OptionChoice,
    SegmentChoices,
    TableWorkload,
    best_path,
    option_grid,
    steps_by_segment,
)

__all__ = [
    "NodeChoice",
    "NodeGroup",
    "NodeWorkload",
    "PerNodeChoices",
    "capacity_rule",
    "choose_per_node",
    "min_capacity",
    "node_class",
    "node_keys",
    "shard_capacity",
    "with_per_node",
    "with_replicas",
]

#: A node whose reads are more than this share of its operations is R (MeT's read group).
READ_SHARE = 0.7
#: A node whose writes (update + insert; Redis' write) are more than this share is W.
WRITE_SHARE = 0.7
#: A node whose scans are more than this share is Scan (scans cost ~10 reads each).
SCAN_SHARE = 0.5
#: The classes counted as writes, over the engines' class names.
WRITE_CLASSES = ("update", "insert", "write")
#: Relative tolerance under which a gain counts as none (float noise of equal capacities).
_GAIN_TOL = 1e-9


#: One node's forecast: ``load`` ``(T,)`` ops/s it coordinates and ``mix`` ``(T, C)`` class
#: fractions in the performance model's class order (a table's has the same shape).
NodeWorkload = TableWorkload


@dataclass(frozen=True, kw_only=True)
class NodeChoice(OptionChoice):
    """What :func:`choose_per_node` chose for one node (:class:`OptionChoice`; its
    capacities are the node's own, ``cap_n / N``, its gain what its override adds to the
    others', its P that of a gain above 0); ``node_class``: its dominant class (R, W, RW,
    Scan)."""

    host: str
    node_class: str
    follows: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan's ``provenance.per_node.nodes`` entry of this node."""
        return {"class": self.node_class, **self.entry(
            **({"follows": self.follows} if self.follows else {}))}


@dataclass(frozen=True)
class NodeGroup:
    """Nodes that run the same values in every segment, named by their dominant class."""

    name: str
    hosts: tuple[str, ...]
    values: tuple[Mapping[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        distinct = [dict(v) for v in dict.fromkeys(tuple(sorted(v.items()))
                                                   for v in self.values)]
        return {"name": self.name, "hosts": list(self.hosts),
                "values": distinct if len(distinct) > 1 else distinct[0]}


@dataclass(frozen=True, kw_only=True)
class PerNodeChoices(SegmentChoices):
    """Per-node choices (:class:`SegmentChoices`: ``cluster[j]`` the cluster-wide
    node-level values); ``groups``: the nodes that run the same values."""

    nodes: Mapping[str, NodeChoice]
    groups: tuple[NodeGroup, ...]

    def parts(self) -> Mapping[str, OptionChoice]:
        return self.nodes


def node_keys(engine: str) -> tuple[str, ...]:
    """The engine's node-level live parameters: those a node may run its own value of.

    A parameter that re-encodes the data only at a reload (Redis' listpack thresholds,
    ``Parameter.reencode``) is settable live but takes a restart in a plan (the plan
    validator refuses it under ``live``): not one of them."""
    space = get_space(engine)
    reencode = set(space.reencode_params(space.parameters))
    return tuple(k for k in space.parameters if space[k].change == "live"
                 and space[k].location != "table" and k not in reencode)


def node_class(load: np.ndarray, mix: np.ndarray, classes: Sequence[str]) -> str:
    """MeT's class of a node from its ``(T,)`` load and ``(T, C)`` mix: ``R``, ``W``,
    ``Scan`` or ``RW`` (the thresholds: :data:`READ_SHARE` and the others), on its
    operations over the horizon (each time point weighted by its load; an idle node by
    its mean mix)."""
    ld, mx = np.asarray(load, dtype=float), np.asarray(mix, dtype=float)
    rows = mx / np.maximum(mx.sum(axis=1, keepdims=True), 1e-12)
    w = ld / ld.sum() if ld.sum() > 0 else np.full(len(ld), 1.0 / len(ld))
    share = dict(zip(classes, (w @ rows).tolist(), strict=True))
    if share.get("read", 0.0) > READ_SHARE:
        return "R"
    if sum(share.get(c, 0.0) for c in WRITE_CLASSES) > WRITE_SHARE:
        return "W"
    if share.get("scan", 0.0) > SCAN_SHARE:
        return "Scan"
    return "RW"


def min_capacity(loads: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """``(T,)`` cluster capacity ``min_n (cap_n / N) / s_n`` from ``(N, T)`` loads and the
    ``(N, T)`` capacities ``cap_n`` each node's mix meets; a node with no load bounds
    nothing, and where nothing is offered every node counts equally (the capacity a
    balanced load would meet)."""
    ld = np.asarray(loads, dtype=float)
    cap = np.asarray(capacities, dtype=float)
    n = ld.shape[0]
    total = ld.sum(axis=0)
    share = np.where(total > 0, ld / np.where(total > 0, total, 1.0), 1.0 / n)
    with np.errstate(divide="ignore"):
        bound = np.where(share > 0, (cap / n) / np.where(share > 0, share, 1.0), np.inf)
    return np.asarray(bound.min(axis=0))


def shard_capacity(loads: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """``(T,)`` cluster capacity where each node serves its own keys alone: once a node's
    load passes its own capacity ``cap_n / N``, what the nodes serve, ``sum_n min(L_n,
    cap_n / N)``; before, :func:`min_capacity` (the total load at which the first node would
    saturate: the headroom a balanced growth of the load has)."""
    ld = np.asarray(loads, dtype=float)
    own = np.asarray(capacities, dtype=float) / ld.shape[0]
    saturated = np.any(ld > own, axis=0)
    return np.asarray(np.where(saturated, np.minimum(ld, own).sum(axis=0),
                               min_capacity(ld, capacities)))


def capacity_rule(engine: str) -> tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str]:
    """How the nodes' capacities make the cluster's for ``engine``, and the rule in words."""
    if get_engine(engine).shards_serve_alone:
        return shard_capacity, ("each node serves its own keys: sum_n min(L_n, cap_n / N) "
                                "once a node saturates, a saturated node losing only its "
                                "own excess")
    return min_capacity, ("cluster capacity min_n (cap_n / N) / s_n: the first node to "
                          "saturate bounds it")


def _best_path(setting: ChoiceSetting, i: int) -> np.ndarray:
    """Node ``i``'s best option per segment: the one its load keeps it busy the least under."""
    return best_path(setting.loads[i], setting.caps[i], setting.cluster, setting.starts)


def choose_per_node(
    *,
    model: Any,
    configs: Sequence[Mapping[str, Any]],
    running: Mapping[str, Any],
    nodes: Mapping[str, NodeWorkload],
    step_seconds: float,
    keys: Sequence[str] | None = None,
    values: Mapping[str, Sequence[Any]] | None = None,
    fixed: Collection[str] = (),
    served: Served = "offered",
    headroom_weight: float = 0.0,
    scenarios: int = 0,
    confidence: float = 0.9,
    seed: Any = 0,
) -> PerNodeChoices:
    """Choose each node's node-level live values over a plan (the rule: the module
    docstring).

    Parameters
    ----------
    model
        The performance model (:class:`planner.model.performance.PerformanceModel`).
    configs
        ``T`` complete cluster-wide configurations, one per time point.
    running
        The complete configuration every node runs now.
    nodes
        Per host, every node of the cluster: its forecast load and mix over the ``T`` time
        points (``N = len(nodes)``).
    step_seconds
        Length of one time point.
    keys, values
        The parameters chosen per node (default: :func:`node_keys`; each must be one) and
        their candidate values (default: the space's).
    fixed
        Hosts that keep the cluster-wide values (no forecast of their own: their load is
        an even part of what the others leave).
    served, headroom_weight
        The credit of served work (:func:`planner.planning.costbenefit.served_matrix`).
    scenarios, confidence, seed
        With ``scenarios`` > 0, an override is kept only when its gain is positive in at
        least ``confidence`` of that many coefficient draws; every node's capacities are
        drawn from one stream seeded by ``seed``, so draw ``s`` is one model for all.
    """
    space = get_space(model.engine)
    keys = tuple(keys if keys is not None else node_keys(model.engine))
    _check_inputs(model.engine, keys, configs, nodes, fixed, step_seconds)
    values = values or {k: space[k].candidate_values or () for k in keys}
    options = option_grid(keys, values, configs, running)
    index = {tuple(o.items()): v for v, o in enumerate(options)}
    setting = ChoiceSetting.build(
        model=model, configs=configs, workloads=list(nodes.values()), options=options,
        cluster=np.array([index[tuple((k, c[k]) for k in keys)] for c in configs]),
        step_seconds=step_seconds, scenarios=scenarios, seed=seed, served=served,
        headroom_weight=headroom_weight, combine=capacity_rule(model.engine)[0])
    hosts = list(nodes)
    free = [i for i, h in enumerate(hosts) if h not in fixed]
    paths, verdicts = _decide(setting, free, confidence)
    classes = [node_class(w.load, w.mix, model.classes) for w in nodes.values()]
    choices = {h: _node_choice(setting, i, h, paths, options, verdicts.get(i), classes[i],
                               fixed=h in fixed) for i, h in enumerate(hosts)}
    base = setting.served_ops(_stay(setting))
    final = setting.served_ops(paths)
    starts = setting.starts
    bounds = [*starts[1:], len(configs)]
    return PerNodeChoices(
        keys=keys, starts=starts, running={k: running[k] for k in keys},
        cluster=tuple(dict(options[int(setting.cluster[t])]) for t in starts),
        nodes=choices, groups=_groups(choices, nodes, model.classes),
        segment_gain_ops=tuple(float(np.sum(final[lo:hi] - base[lo:hi]))
                               for lo, hi in zip(starts, bounds, strict=True)),
    )


def _check_inputs(engine: str, keys: Sequence[str], configs: Sequence[Mapping[str, Any]],
                  nodes: Mapping[str, NodeWorkload], fixed: Collection[str],
                  step_seconds: float) -> None:
    if not configs or not nodes:
        raise ValidationError("per-node choice: needs time points and at least one node")
    if not step_seconds > 0:
        raise ValidationError(f"step_seconds: must be > 0, got {step_seconds}")
    allowed = node_keys(engine)
    wrong = [k for k in keys if k not in allowed]
    if wrong:
        raise ValidationError(f"per-node choice: {wrong[0]!r} is not a node-level live "
                              f"parameter of {engine} ({', '.join(allowed)})")
    unknown = sorted(set(fixed) - set(nodes))
    if unknown:
        raise ValidationError(f"per-node choice: fixed host {unknown[0]!r} is not a node")
    n = len(configs)
    for host, w in nodes.items():
        load, mix = np.asarray(w.load, dtype=float), np.asarray(w.mix, dtype=float)
        if load.shape != (n,) or mix.ndim != 2 or mix.shape[0] != n:
            raise ValidationError(f"{host}: load and mix must cover the {n} time points")
        if np.any(load < 0) or not np.all(np.isfinite(load)):
            raise ValidationError(f"{host}: load must be finite and >= 0")


def _stay(setting: ChoiceSetting) -> np.ndarray:
    """``(N, T)``: every node on the cluster-wide values."""
    return np.broadcast_to(setting.cluster, setting.loads.shape).copy()


def _decide(setting: ChoiceSetting, free: Sequence[int], confidence: float,
            ) -> tuple[np.ndarray, dict[int, tuple[float, float | None, str | None]]]:
    """The nodes' paths and per free node ``(gain, p_gain, reason)``.

    Every node whose best differs starts overridden; each is weighed by what the
    assignment loses when it alone returns to the cluster-wide values, and the weakest
    that fails the rule (no gain, or P below ``confidence``) is dropped, until none fails.
    Dropping a node that adds nothing leaves the others' gains as they were or larger.
    """
    best = {i: _best_path(setting, i) for i in free}
    verdicts: dict[int, tuple[float, float | None, str | None]] = {
        i: (0.0, None, "the cluster-wide value is already its best")
        for i in free if np.array_equal(best[i], setting.cluster)}
    taken = [i for i in free if i not in verdicts]
    while True:
        paths = _stay(setting)
        for i in taken:
            paths[i] = best[i]
        weighed = {}
        for i in taken:
            without = paths.copy()
            without[i] = setting.cluster
            gain = setting.gain(without, paths)
            positive = gain > _GAIN_TOL * float(np.sum(setting.served_ops(without)))
            p = setting.p_gain(without, paths, tolerance=_GAIN_TOL) if positive else None
            weighed[i] = (gain, p, positive)
        failing = [i for i, (_, p, ok) in weighed.items()
                   if not ok or (p is not None and p < confidence)]
        if not failing:
            verdicts.update({i: (g, p, None) for i, (g, p, _) in weighed.items()})
            return paths, verdicts
        worst = min(failing, key=lambda i: (weighed[i][2], weighed[i][1] or 0.0, weighed[i][0]))
        gain, p, ok = weighed[worst]
        verdicts[worst] = (gain, p, (
            f"P(gain > 0) {p:.2f} is below the confidence {confidence:g} over the model's "
            "coefficient draws" if ok else
            "its values add no served work (the node does not bound the cluster's capacity "
            "or saturate, or the load stays below it)"))
        taken.remove(worst)


def _node_choice(setting: ChoiceSetting, i: int, host: str, paths: np.ndarray,
                 options: Sequence[Mapping[str, Any]],
                 verdict: tuple[float, float | None, str | None] | None, node_cls: str, *,
                 fixed: bool) -> NodeChoice:
    if fixed or verdict is None:
        verdict = (0.0, None, "no forecast of its own: it runs the cluster-wide values")
        best = setting.cluster
    else:
        best = _best_path(setting, i)
    gain, p, reason = verdict
    t = np.arange(len(best))
    n = setting.loads.shape[0]
    return NodeChoice(
        host=host,
        values=tuple(dict(options[int(paths[i, s])]) for s in setting.starts),
        best=tuple(dict(options[int(best[s])]) for s in setting.starts),
        override=reason is None,
        capacity_chosen=float(np.mean(setting.caps[i, t, best])) / n,
        capacity_cluster=float(np.mean(setting.caps[i, t, setting.cluster])) / n,
        gain_ops=gain, node_class=node_cls, reason=reason, p_gain=p,
    )


def _groups(choices: Mapping[str, NodeChoice], nodes: Mapping[str, NodeWorkload],
            classes: Sequence[str]) -> tuple[NodeGroup, ...]:
    """Nodes with the same values in every segment, in the order of their first host, each
    named by the dominant class of its nodes' operations together."""
    members: dict[tuple[Any, ...], list[str]] = {}
    for host, c in choices.items():
        members.setdefault(tuple(tuple(sorted(v.items())) for v in c.values), []).append(host)
    out = []
    for hosts in members.values():
        ops = sum(np.asarray(nodes[h].load, dtype=float)[:, None]
                  * np.asarray(nodes[h].mix, dtype=float) for h in hosts)
        load = np.asarray(ops).sum(axis=1)
        mix = np.where(load[:, None] > 0, ops / np.where(load > 0, load, 1.0)[:, None],
                       np.asarray(nodes[hosts[0]].mix, dtype=float))
        out.append(NodeGroup(node_class(load, mix, classes), tuple(hosts),
                             choices[hosts[0]].values))
    return tuple(out)


def with_per_node(
    steps: Sequence[Mapping[str, Any]], choices: PerNodeChoices, *, start: datetime,
    step_seconds: float, n_steps: int,
) -> list[dict[str, Any]]:
    """The plan's steps (plain data) with the per-node overrides of ``choices``, whose
    segments are the steps' intervals.

    Each step gets its segment's ``per_node`` (an override holds for its step only, so a
    step repeats those that go on), the keys some node's value changes in ``live`` (a node
    returning to the cluster-wide value included) and the segment's gain in ``expected``
    (a live change costs nothing). When no step is due at the start and an override pays
    before the first, a step due at the start changes only the nodes.
    """
    out = steps_by_segment(steps, choices.starts, pays_at_start=bool(choices.overrides(0)),
                           start=start, step_seconds=step_seconds, n_steps=n_steps)
    for step, j in out:
        step["per_node"] = {**step.get("per_node", {}), **choices.overrides(j)}
        step["live"] = [*step["live"], *(k for k in choices.changes(j)
                                         if k not in step["live"] and k not in step["restart"])]
        ex = dict(step["expected"])
        ex["benefit_ops"] = float(ex["benefit_ops"]) + choices.segment_gain_ops[j]
        ex["net_ops"] = ex["benefit_ops"] - float(ex["cost_ops"])
        step["expected"] = ex
    return [step for step, _ in out]


def with_replicas(choices: PerNodeChoices, replicas: Mapping[str, str]) -> PerNodeChoices:
    """``choices`` with each Redis replica (``replicas``: replica -> its primary) running
    its primary's values in every segment.

    A replica serves none of the clients' operations, so it has no load of its own to
    choose for; but it holds its primary's data, applies the same writes under its own
    settings (a hash it receives is encoded by its own listpack threshold, so it would
    hold the data in another size than its primary) and, once promoted, serves the
    primary's load. Its entry says whom it follows; its gain is its primary's, counted
    once.

    Raises
    ------
    ValidationError
        ``replicas``: a primary the choices do not hold, or a replica that has a choice of
        its own.
    """
    nodes = dict(choices.nodes)
    for replica, primary in sorted(replicas.items()):
        if primary not in choices.nodes:
            raise ValidationError(f"replicas: {replica}'s primary {primary!r} is not a node of "
                                  f"the per-node choice ({', '.join(choices.nodes)})")
        if replica in choices.nodes:
            raise ValidationError(f"replicas: {replica} has a choice of its own; a replica "
                                  "follows its primary (give no forecast of its own)")
        nodes[replica] = replace(choices.nodes[primary], host=replica, follows=primary,
                                 gain_ops=0.0, p_gain=None)
    groups = tuple(replace(g, hosts=tuple(sorted(
        [*g.hosts, *(r for r, p in replicas.items() if p in g.hosts)]))) for g in choices.groups)
    return replace(choices, nodes=nodes, groups=groups)
