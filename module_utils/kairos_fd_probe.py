"""Ask a peer, over CQL, whether its failure detector counts a node alive.

No virtual table of Cassandra 5.0 shows the failure detector's verdict, but every
coordinator applies it: a read at consistency ALL is refused at once with Unavailable by a
coordinator that counts any replica of the range down, and served only when it counts
them all alive and they answer. So a read at ALL, sent to the peer, of a one-token range a
node owns (the node is its first replica) asks the peer's failure detector about that
node - the same verdict as the U in the peer's ``nodetool status``, without a JVM start.

``system_distributed`` is replicated with SimpleStrategy (three replicas by default), so
every node is the first replica of its own tokens there whatever the DCs; its
``view_build_status`` table is small and always present.
"""

from __future__ import annotations

try:
    from cassandra import ConsistencyLevel, InvalidRequest, Unauthorized, Unavailable
    from cassandra.protocol import SyntaxException
    from cassandra.query import SimpleStatement

    #: Errors that say the probe itself cannot run here (no permission, no such table).
    CANNOT_PROBE = (Unauthorized, InvalidRequest, SyntaxException)
except ImportError:  # pragma: no cover - the module reports the missing driver
    ConsistencyLevel = Unavailable = SimpleStatement = None
    CANNOT_PROBE = ()

MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1
PEER_TOKENS = "SELECT peer, tokens FROM system.peers_v2"
#: Why a peer cannot be asked about a node whose token it does not list.
TOKEN_UNKNOWN = "token unknown to this peer"
_PROBE = (
    "SELECT keyspace_name FROM system_distributed.view_build_status "
    "WHERE token(keyspace_name, view_name) > %s"
)


def probe_range(token):
    """(CQL, bounds) reading only the range ending at ``token``, which its owner replicates first.

    Murmur3 never hashes a key to the minimum token: a node holding it owns the end of the
    ring, (MAX - 1, MAX], read with an open upper bound.
    """
    token = int(token)
    if token == MIN_TOKEN:
        return _PROBE + " LIMIT 1", (MAX_TOKEN - 1,)
    return _PROBE + " AND token(keyspace_name, view_name) <= %s LIMIT 1", (token - 1, token)


def tokens_by_node(rows):
    """``system.peers_v2`` rows -> listen address -> one of its tokens (the smallest)."""
    return {
        str(r["peer"]): min(int(t) for t in r["tokens"]) for r in rows if r.get("tokens")
    }


def probe_alive(session, token):
    """'' when the session's coordinator counts every replica of ``token``'s range alive and
    they answered at ALL; else why not (Unavailable: the failure detector counts one down).

    :data:`CANNOT_PROBE` errors (the probe itself cannot run) propagate.
    """
    query, bounds = probe_range(token)
    try:
        session.execute(SimpleStatement(query, consistency_level=ConsistencyLevel.ALL), bounds)
    except Unavailable as exc:
        return (f"its failure detector counts a replica down ({exc.alive_replicas} of "
                f"{exc.required_replicas} alive)")
    except CANNOT_PROBE:
        raise
    except Exception as exc:  # timeouts: counted alive, not answering yet
        return f"not answering at ALL yet ({type(exc).__name__})"
    return ""
