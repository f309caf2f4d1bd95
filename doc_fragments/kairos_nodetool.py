"""Documentation of the ``nodetool`` option of the Kairos modules that run nodetool.

Used with ``extends_documentation_fragment: [kairos_nodetool]``; the option is
``NODETOOL_ARGS`` in module_utils/kairos_nodetool.py, which ``nodetool_module`` adds to a
module's own.
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
