"""Documentation of the ``nodetool`` option of the Kairos modules that run nodetool.

Used with ``extends_documentation_fragment: [kairos_nodetool]``; the option is
``NODETOOL_ARGS`` in module_utils/kairos_nodetool.py, which ``nodetool_module`` adds to a
module's own. ``kairos_nodetool.jolokia``: the ``jolokia_config`` option of the modules
that make the same JMX calls through the node's Jolokia agent when it listens.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  nodetool:
    description:
      - Path of the node's nodetool launcher (its host and JMX port built in). It is run
        with an argument list, never through a shell.
    type: path
    required: true
"""

    JOLOKIA = r"""
options:
  jolokia_config:
    description:
      - The node's Jolokia agent properties (host, port, user, password), as the cassandra
        role writes them; empty, or an agent that does not listen, means nodetool.
    type: path
    default: ""
"""
