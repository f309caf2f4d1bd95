"""Mitogen's linear strategy, found through this repository's ansible.cfg.

Mitogen (https://mitogen.networkgenomics.com/ansible_detailed.html) keeps one Python
interpreter per target for the whole run instead of starting one per task, and caches the
modules and module_utils it sends: on the lab, a rolling restart's orchestration overhead
fell from 75-99 s to 48-51 s (docs/executor.md, bench/rollout.py). It is a Kairos dependency
(pyproject.toml); this proxy lets ansible.cfg name it without a site-packages path. Without
it, the playbooks run on Ansible's own linear strategy, with a warning: the same steps, slower.

Every local context (the control host, where the CQL modules run) has the Cassandra driver
imported into its fork parent. A module that imports Kairos' module_utils is forked from
that parent for every run, and imported the driver again each time (0.35 s of CPU, several
seconds of wall time on the lab's saturated CPUs, three times per batch).

Mitogen's CPU pinning is switched off. On a machine with fewer than four CPUs it pins every
worker, and every process a module starts, to one CPU: Cassandra nodes restarted by a
rollout on the 2-CPU lab ran on CPU 1 only and took 12-36 s to serve CQL instead of 9-14 s.
"""

from __future__ import annotations

import importlib

from ansible.utils.display import Display

# What the CQL modules import (module_utils/kairos_cql.py): no threads start at import.
PRELOAD = ("cassandra.cluster", "cassandra.auth", "cassandra.policies")

try:
    import ansible_mitogen.affinity
    import ansible_mitogen.services
    from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule
except ImportError as exc:
    from ansible.plugins.strategy.linear import StrategyModule

    Display().warning(
        f"Mitogen cannot be imported by Ansible's Python ({exc}): running on Ansible's own "
        "linear strategy, the same steps but slower (install 'mitogen'; make setup does)"
    )
else:
    # The base Policy places nothing: processes keep the CPUs they were given.
    ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()

    def _preloading(connect):
        def _connect_and_preload(self, key, spec, via=None):
            """Mitogen's connect, then PRELOAD imported in a local context's fork parent.

            Sent before the connection is handed out, so it runs before the parent's first
            fork (a context runs its calls in order). Where an import fails (no driver on
            that Python), the parent stays as it was and a module needing it says so itself.
            """
            response = connect(self, key, spec, via=via)
            fork_parent = (response.get("init_child_result") or {}).get("fork_context")
            if spec.get("method") == "local" and fork_parent is not None:
                for name in PRELOAD:
                    fork_parent.call_no_reply(importlib.import_module, name)
            return response

        _connect_and_preload.kairos_preload = True  # type: ignore[attr-defined]
        return _connect_and_preload

    # Once, however often the plugin is loaded.
    if not getattr(ansible_mitogen.services.ContextService._connect, "kairos_preload", False):
        ansible_mitogen.services.ContextService._connect = _preloading(
            ansible_mitogen.services.ContextService._connect)

__all__ = ["StrategyModule"]
