"""Documentation of the CQL connection options every Kairos Cassandra module takes.

Used with ``extends_documentation_fragment: [kairos_cql]``; the options are built by
``cql_argument_spec`` in module_utils/kairos_cql.py, so the two are read side by side.
A module documents only what it changes (e.g. a longer ``timeout`` default).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  host:
    description: Address of the node to connect to; requests go to this node only.
    type: str
    required: true
  port:
    description: CQL (native transport) port.
    type: int
    default: 9042
  username:
    description: CQL role to log in as (PasswordAuthenticator); omit when authentication is off.
    type: str
  password:
    description:
      - Password of I(username). Sent in the CQL handshake only - never on a command line,
        never logged (no_log) and never returned.
    type: str
  timeout:
    description: Seconds to wait for the connection and for each request.
    type: float
    default: 20
requirements: [cassandra-driver]
"""
