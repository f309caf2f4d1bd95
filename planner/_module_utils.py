"""The pure parsers of module_utils/ that the planner shares with the Ansible modules.

The modules import their shared code as ``ansible.module_utils.<name>`` (that is how
Ansible ships it to the nodes); the planner imports the same files under the same names,
by adding the repository's module_utils/ to that package's path, as tests/conftest.py does.
Only plain-Python files with no Ansible import are taken from there: the arrow runs from
the planner to module_utils/, never back (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from pathlib import Path

import ansible.module_utils

_MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils import (  # noqa: E402  (found once the path is set)
    kairos_cgroup,
    kairos_driverlog,
    kairos_javamap,
    kairos_proc,
    kairos_redis,
    kairos_settings,
    kairos_tls,
)

__all__ = [
    "kairos_cgroup", "kairos_driverlog", "kairos_javamap", "kairos_proc", "kairos_redis",
    "kairos_settings", "kairos_tls",
]
