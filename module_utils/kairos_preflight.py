"""The rollout pre-flight's judgement: what the engine's role read -> the refusals, each named.

Each engine's ``rollout_preflight`` only reads (a module per read, registered with
``failed_when: false`` where a failed read is a refusal rather than an error) and hands
what it registered to M(kairos_preflight), which calls :func:`judge` here. Plain Python,
without Ansible or the planner, so tests call it on captured results.

A read is judged on the module's own keys, never on ``failed``: ``failed_when: false``
keeps ``failed`` false on a read whose module failed (the bug e10c706 fixed in Jinja). The
modules read here return ``msg`` only when they fail, so ``msg`` marks a failed read; a
skipped read (``skipped``) says nothing.

A refusal is ``{"name": ..., "message": ...}``; the rollout (playbooks/rollout.yml) joins
the messages of every node's refusals and stops every node when any node refuses.
"""

from __future__ import annotations

#: Every refusal a pre-flight can give, by name: what it means (docs/executor.md,
#: docs/redis-executor.md). "error" is the rollout's own: a pre-flight task that failed.
REFUSALS = {
    "ring_unreadable": "cassandra: the live ring could not be read",
    "unsafe_batch": "cassandra: a plan's batch would leave a replica set below the CL now",
    "down": "a node is down",
    "hints": "cassandra: a node holds hints for another, or the nodes disagree on who is UN",
    "hint_file": "cassandra: this node still writes a hint file for another",
    "schema": "cassandra: the live nodes disagree on the schema version",
    "view": "cassandra: this node does not see every node UN",
    "not_in_sync": "redis: a replica is not linked or caught up, or the cluster is not ok",
    "drift": "redis: the node does not run the values the plan says it runs now",
    "config": "redis: a directive is unknown, not settable live, or cannot be read",
    "order": "redis: the restarts cannot be ordered from the live roles",
    "error": "a pre-flight task failed (playbooks/rollout.yml names it)",
}


class PreflightError(ValueError):
    """The reads handed to the judge are not the engine's (a role and this module disagree)."""


def refusal(name, message):
    """One named refusal."""
    if name not in REFUSALS:
        raise PreflightError(f"unknown refusal {name!r}")
    return {"name": name, "message": str(message)}


def failed(read):
    """Whether a registered read's module failed (see the module docstring)."""
    if not isinstance(read, dict) or read.get("skipped"):
        return False
    return bool(read.get("failed")) or "msg" in read


def _why(read, default):
    """What a failed read said: its stderr (a command), else its msg, else ``default``."""
    said = str(read.get("stderr") or "").strip()
    return said or str(read.get("msg") or default)


def judge_cassandra(reads, *, host, cluster_size):
    """The Cassandra pre-flight's refusals, in the order a person should read them.

    Parameters
    ----------
    reads
        ``ring``: cassandra_cluster_facts (at least down, msg, schema_agreement,
        schema_versions); ``batches``: ``kairos rollout preflight`` through kairos_command;
        ``hints``: cassandra_sync_gate with cross_check; ``hint_files``: cassandra_node_gate
        with checks [hints], on ``host``; ``view``: cassandra_ring_status on ``host``.
    host
        The inventory name of the node whose reads these are (named in its own refusals).
    cluster_size
        How many nodes the cassandra group has (every one must be UN in ``host``'s view).
    """
    if cluster_size is None:
        raise PreflightError("the cassandra pre-flight needs cluster_size")
    ring, batches, hints, hint_files, view = (
        reads["ring"], reads["batches"], reads["hints"], reads["hint_files"], reads["view"]
    )
    out = []
    if "down" not in ring:
        why = ring.get("msg", "no answer")
        out.append(refusal("ring_unreadable", f"cannot read the live ring: {why}"))
    if failed(batches) or batches.get("rc", 0) != 0:
        out.append(refusal("unsafe_batch", _why(batches, "the batch check failed")))
    if ring.get("down"):
        out.append(refusal("down", f"down: {', '.join(ring['down'])}"))
    if failed(hints) or hints.get("unmet"):
        out.append(refusal("hints", _why(hints, f"not in sync: {hints.get('unmet')}")))
    if failed(hint_files):
        out.append(refusal("hint_file", f"{host}: {_why(hint_files, 'the hints gate failed')}"))
    if not ring.get("schema_agreement", True):
        out.append(refusal("schema", f"schema versions disagree: {ring.get('schema_versions')}"))
    if not view.get("skipped") and len(view.get("up_normal") or []) != cluster_size:
        seen = view.get("msg", [node.get("code") for node in view.get("nodes") or []])
        out.append(refusal("view", f"{host} does not see every node UN: {seen}"))
    return out


def judge_redis(reads, *, host, cluster_size=None):
    """The Redis pre-flight's refusals.

    Parameters
    ----------
    reads
        ``topology``: redis_replication_facts (down, unmet); ``config``: redis_live_config
        in check mode with ``expect`` (the values the step keeps), on ``host``; ``order``:
        redis_restart_order (skipped when nothing restarts).
    host
        The inventory name of the node whose reads these are.
    cluster_size
        Unused (the topology read names the nodes down itself).
    """
    del cluster_size
    topology, config, order = reads["topology"], reads["config"], reads["order"]
    out = []
    if topology.get("down"):
        out.append(refusal("down", f"down: {', '.join(topology['down'])}"))
    if topology.get("unmet"):
        out.append(refusal("not_in_sync", f"not in sync: {topology['unmet']}"))
    if failed(config):
        said = _why(config, "the configuration check failed")
        name = "drift" if config.get("drift") else "config"
        out.append(refusal(name, f"{host}: {said}"))
    if failed(order):
        out.append(refusal("order", _why(order, "the restarts could not be ordered")))
    return out


#: Each engine's judge and the reads it takes (every one registered, skipped or not).
ENGINES = {
    "cassandra": (judge_cassandra, ("ring", "batches", "hints", "hint_files", "view")),
    "redis": (judge_redis, ("topology", "config", "order")),
}


def judge(engine, reads, *, host, cluster_size=None):
    """The refusals of ``engine``'s pre-flight on ``host`` (empty: go on).

    Raises
    ------
    PreflightError
        An unknown engine, or ``reads`` missing one of the engine's reads or naming another
        (a check the role renamed would otherwise be dropped without a word).
    """
    if engine not in ENGINES:
        raise PreflightError(f"unknown engine {engine!r}: one of {', '.join(sorted(ENGINES))}")
    judge_engine, names = ENGINES[engine]
    missing = sorted(set(names) - set(reads))
    extra = sorted(set(reads) - set(names))
    if missing or extra:
        raise PreflightError(
            f"{engine} pre-flight reads are {', '.join(names)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    bad = sorted(name for name in names if not isinstance(reads[name], dict))
    if bad:
        raise PreflightError(
            f"{engine} pre-flight reads must be registered results: {', '.join(bad)}"
        )
    return judge_engine(reads, host=host, cluster_size=cluster_size)
