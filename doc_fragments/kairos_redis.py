"""Documentation of the options every Kairos Redis module takes.

``extends_documentation_fragment: [kairos_redis]`` documents the connection options
(module_utils/kairos_redis.py ``CONNECTION_ARGS``); ``kairos_redis.nodes`` adds the
``nodes`` option of the modules that read the whole cluster (``NODES_ARG``) and
``kairos_redis.wait`` the options of those that wait for it (``WAIT_ARGS``).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  password:
    description:
      - Password (requirepass, or the ACL user's). Sent with AUTH - never on a command
        line, never logged (no_log) and never returned.
    type: str
    default: ""
  username:
    description: ACL user; empty for the default user.
    type: str
    default: ""
  connect_timeout:
    description: Socket timeout in seconds.
    type: float
    default: 5
requirements: [redis (Python package)]
"""

    NODES = r"""
options:
  nodes:
    description: Inventory name -> C(host:port) of every node of the cluster.
    type: dict
    required: true
"""

    WAIT = r"""
options:
  timeout:
    description: Seconds to wait before failing.
    type: float
    default: 120
  interval:
    description: Seconds between polls.
    type: float
    default: 0.5
  down_grace:
    description:
      - Seconds a node may refuse every connection (no process listens; a busy node's
        timeouts do not count) before the wait fails at once naming it, rather than at
        I(timeout); 0 waits for I(timeout) whatever happens. The sync gate does not count
        I(node), the node just restarted.
    type: float
    default: 0
"""
