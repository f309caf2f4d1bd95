"""Mitogen's linear strategy, found through this repository's ansible.cfg.

Mitogen (https://mitogen.networkgenomics.com/ansible_detailed.html) keeps one Python
interpreter per target for the whole run instead of starting one per task, and caches the
modules and module_utils it sends: on the lab, a rolling restart's orchestration overhead
fell from 75-99 s to 48-51 s (docs/executor.md, bench/rollout.py). It is a Kairos dependency
(pyproject.toml); this proxy lets ansible.cfg name it without a site-packages path. Without
it, the playbooks run on Ansible's own linear strategy, with a warning: the same steps, slower.

Mitogen's CPU pinning is switched off. On a machine with fewer than four CPUs it pins every
worker, and every process a module starts, to one CPU: Cassandra nodes restarted by a
rollout on the 2-CPU lab ran on CPU 1 only and took 12-36 s to serve CQL instead of 9-14 s.
"""

from __future__ import annotations

from ansible.utils.display import Display

try:
    import ansible_mitogen.affinity
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

__all__ = ["StrategyModule"]
