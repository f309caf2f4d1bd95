"""Which parameter changes live is the configuration space's decision (planner/model/spaces.py).

The modules only know how: cassandra_live_settings has a nodetool setter per live
cassandra.yaml key (module_utils/kairos_nodetool.LIVE_SETTERS), and redis_live_config takes
the restart-class directives from the rollout (its ``restart_only``). These tests keep the
how in step with the what, so a parameter the space calls live can always be carried out
live, and the module never sets live what the space calls restart.
"""

from __future__ import annotations

from ansible.module_utils.kairos_nodetool import LIVE_SETTERS

from planner.executor.rollout import Composition, change_set
from planner.model.spaces import change_kind, get_space


def test_every_live_cassandra_yaml_parameter_has_a_nodetool_setter_and_none_is_restart() -> None:
    space = get_space("cassandra")
    in_file = {k: p for k, p in space.parameters.items() if p.location == "cassandra.yaml"}
    # Live for some transition (row_cache_size: between two non-zero sizes).
    live = {k for k, p in in_file.items() if p.change == "live"}
    live |= {k for k in in_file if change_kind("cassandra", k, "64MiB", "128MiB") == "live"}
    assert {"concurrent_reads", "row_cache_size"} <= live, "the scan found the live parameters"
    assert live <= set(LIVE_SETTERS), "a parameter the space calls live has no setter"
    # Setters beyond the space (concurrent_compactors, ...) are for the module used on its
    # own (the playbooks pass only the space's keys); none may be one the space restarts.
    assert not {k for k in set(LIVE_SETTERS) - live if k in space}


def test_the_redis_rollout_names_each_restart_class_directive_for_the_module() -> None:
    space = get_space("redis")
    restart = {k for k, p in space.parameters.items() if p.change == "restart"}
    live = {k for k, p in space.parameters.items() if p.change == "live"}
    assert restart and live
    before = space.defaults()
    after = {**before, **{k: space[k].candidate_values[-1] if space[k].candidate_values
                          else before[k] for k in space.parameters}}
    changes = change_set("redis", Composition(before, {"r1": before}),
                         Composition(after, {"r1": after}))
    changed = space.changed_keys(before, after)
    # What the playbook passes as restart_only is exactly the space's restart class.
    assert set(changes.restart) == {k for k in changed if k in restart}
    assert set(changes.live) == {k for k in changed if k in live}
