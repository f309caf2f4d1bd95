"""The rollout lock of library/kairos_lock.py: its holder record, whether a holder is dead,
and the lease in the cluster itself.

A lease lives where every run can see it, whatever its control host or directory: in
Cassandra a row of ``kairos.leases`` changed only by lightweight transactions, whose owner
columns carry a TTL (the lease period) and whose ``fencing_token`` column, without one,
grows by one at each new holder; in Redis a key taken with ``SET NX PX`` (changed after
by compare-and-set scripts) and a token key counted with ``INCR``, both under one hash tag so
that a Redis Cluster keeps them on one primary, and taken only once a replica holds them
(``WAIT``). A holder renews its lease at each heartbeat;
one that dies stops renewing, and its lease expires one period later. A holder on this host
whose process is gone is taken over at once, as with the file lock.

Plain Python and the drivers, no AnsibleModule: library/kairos_lock.py turns errors into results.
"""

from __future__ import annotations

import json
import random
import socket
import time

from ansible.module_utils.kairos_proc import process_start

LEASE_TABLE = "leases"


class LeaseUnreachable(Exception):
    """No node of the cluster answered: nothing is known about the lease."""


class LeaseRefused(Exception):
    """A node answered and refused the login: the run must not fall back to the file."""


class LeaseNotReplicated(Exception):
    """The Redis lease was written on its primary but no replica acknowledged it in time:
    a failover then would lose it and let a second run take the lock. Not taken."""


#: How long a Redis take waits for a replica to acknowledge the lease (WAIT), in ms.
REDIS_WAIT_MS = 2000


def holder_dead(holder, stale_after, now):
    """Why the holder is dead (a reason), or None while it may still be running.

    On this host its process tells (gone, or its pid reused); from another host only its
    heartbeat does, older than ``stale_after`` seconds (None: a lease, which expires by
    itself instead).
    """
    pid = holder.get("pid")
    if holder.get("host") == socket.gethostname() and pid:
        started = process_start(pid)
        if started is None:
            return f"its process {pid} on {holder['host']} is gone"
        if holder.get("pid_start") not in (None, started):
            return f"its process {pid} on {holder['host']} is gone (the pid was reused)"
        return None
    if stale_after is None:
        return None
    age = now - float(holder.get("heartbeat_at", holder.get("created_at", 0)))
    if age > stale_after:
        return f"no heartbeat for {int(age)} s"
    return None


def new_holder(owner, pid, pid_start, now):
    """The record of a run that takes the lock now."""
    return {
        "owner": owner,
        "host": socket.gethostname(),
        "pid": pid,
        "pid_start": pid_start,
        "created_at": now,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
        "heartbeat_at": now,
    }


def describe_holder(holder):
    """Who holds it, for a refusal: owner, host, pid, since when (and when it expires)."""
    text = (f"owner {holder.get('owner')} on {holder.get('host')}, pid {holder.get('pid')}, "
            f"since {holder.get('created')}")
    if holder.get("expires_in") is not None:
        text += f"; it expires in {holder['expires_in']} s unless renewed"
    return text


def decide(holder, owner, stale_after, now):
    """What a run that wants the lock does, given the current ``holder`` (None: free).

    ``("take", None)``, ``("renew", None)`` (the owner's own), ``("takeover", reason)`` (a
    dead holder's), or ``("refuse", None)``.
    """
    if not holder or not holder.get("owner"):
        return "take", None
    if holder.get("owner") == owner:
        return "renew", None
    dead = holder_dead(holder, stale_after, now)
    return ("takeover", dead) if dead else ("refuse", None)


# ------------------------------------------------------------------ Cassandra
def _holder_json(holder):
    """The holder as the row keeps it: the token has its own column, expires_in is the TTL."""
    return json.dumps({k: v for k, v in holder.items() if k not in ("token", "expires_in")})


def lease_schema(keyspace, replication):
    """The CQL that creates the lease keyspace (NetworkTopologyStrategy, ``replication``:
    DC -> RF) and table; the role's auth setup runs it as the superuser at install."""
    options = ", ".join(f"'{dc}': {rf}" for dc, rf in sorted(replication.items()))
    return [
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
        f"{{'class': 'NetworkTopologyStrategy', {options}}}",
        f"CREATE TABLE IF NOT EXISTS {keyspace}.{LEASE_TABLE} (name text PRIMARY KEY, "
        "owner text, holder text, fencing_token bigint)",
    ]


class CassandraLease:
    """The lease row ``<keyspace>.leases[name]``, read and changed at SERIAL consistency."""

    def __init__(self, session, name, seconds, keyspace="kairos"):
        self.session, self.name, self.seconds, self.keyspace = session, name, int(seconds), keyspace
        self.table = f"{keyspace}.{LEASE_TABLE}"

    def ensure_schema(self, replication):
        """Create the keyspace (NetworkTopologyStrategy, ``replication``: DC -> RF) and table
        if missing. Read first: a schema change is not made on every heartbeat, and Kairos'
        own role may not create keyspaces (the role's auth setup creates this one)."""
        row = self.session.execute(
            "SELECT table_name FROM system_schema.tables "
            "WHERE keyspace_name = %s AND table_name = %s",
            (self.keyspace, LEASE_TABLE)).one()
        if row:
            return False
        for statement in lease_schema(self.keyspace, replication):
            self.session.execute(statement)
        return True

    def read(self):
        """(holder or None, token or None): the holder with ``token`` and ``expires_in``.

        A SERIAL read that times out (two runs' Paxos rounds contending for the row) is
        tried again, a few times, after a random pause."""
        from cassandra import ConsistencyLevel, Timeout
        from cassandra.query import SimpleStatement

        statement = SimpleStatement(
            f"SELECT owner, holder, fencing_token, TTL(owner) AS ttl FROM {self.table} "
            "WHERE name = %s", consistency_level=ConsistencyLevel.SERIAL)
        for attempt in range(4):
            try:
                row = self.session.execute(statement, (self.name,)).one()
                break
            except Timeout:
                if attempt == 3:
                    raise
                time.sleep(random.uniform(0.2, 1.0))
        if row is None:
            return None, None
        if row.owner is None:
            return None, row.fencing_token
        holder = json.loads(row.holder or "{}")
        holder.update(token=row.fencing_token, expires_in=row.ttl)
        return holder, row.fencing_token

    def _batch(self, holder, condition, values, token):
        """Owner and holder with the lease's TTL, the token without one, if ``condition``."""
        stored = _holder_json(holder)
        statement = (
            "BEGIN BATCH "
            f"UPDATE {self.table} USING TTL {self.seconds} SET owner = %s, holder = %s "
            f"WHERE name = %s IF {condition}; "
            f"UPDATE {self.table} SET fencing_token = %s WHERE name = %s; APPLY BATCH")
        return self._cas(statement, (holder["owner"], stored, self.name, *values, token,
                                     self.name))

    def _cas(self, statement, values):
        """Whether a conditional statement applied; a CAS write that timed out (contention)
        counts as not applied: the caller reads again at SERIAL, which finishes it."""
        from cassandra import Timeout

        try:
            return self.session.execute(statement, values).was_applied
        except Timeout:
            return False

    def take(self, holder, previous_owner, previous_token):
        """Take the lease from nobody (``previous_owner`` None) or from a dead holder; the
        token grows by one. False when another run got there first."""
        token = (previous_token or 0) + 1
        owner_condition = "owner = %s" if previous_owner else "owner = null"
        token_condition = ("fencing_token = %s" if previous_token is not None
                           else "fencing_token = null")
        values = tuple(v for v in (previous_owner, previous_token) if v is not None)
        applied = self._batch(holder, f"{owner_condition} AND {token_condition}", values, token)
        return token if applied else None

    def renew(self, holder):
        """Extend the owner's lease by a period: False when it is no longer the owner."""
        stored = _holder_json(holder)
        return self._cas(
            f"UPDATE {self.table} USING TTL {self.seconds} SET owner = %s, holder = %s "
            "WHERE name = %s IF owner = %s",
            (holder["owner"], stored, self.name, holder["owner"]))

    def release(self, owner):
        """Free the lease if ``owner`` holds it: True when it did."""
        return self._cas(
            f"DELETE owner, holder FROM {self.table} WHERE name = %s IF owner = %s",
            (self.name, owner))


# ------------------------------------------------------------------ Redis
# Compare-and-set on the lease key: the stored holder is ARGV[1] as stored (a takeover of a
# dead holder read before), or its owner is ARGV[1] (a renewal).
_REDIS_SET_IF = """
local v = redis.call('GET', KEYS[1])
if v and (v == ARGV[1] or cjson.decode(v).owner == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_REDIS_RELEASE = """
local v = redis.call('GET', KEYS[1])
if v and cjson.decode(v).owner == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLease:
    """The lease key ``kairos:{lease:<name>}`` on the primary that serves its slot."""

    def __init__(self, client, name, seconds):
        self.client, self.seconds = client, int(seconds)
        self.key = f"kairos:{{lease:{name}}}"
        self.token_key = self.key + ":token"
        self._raw = None  # the holder as stored, for a compare-and-set takeover

    def read(self):
        raw = self.client.get(self.key)
        self._raw = raw
        if raw is None:
            return None, None
        holder = json.loads(raw)
        ttl = self.client.pttl(self.key)
        holder["expires_in"] = max(0, int(ttl) // 1000) if ttl and ttl > 0 else None
        return holder, holder.get("token")

    def _stored(self, holder, token):
        return json.dumps({**{k: v for k, v in holder.items() if k != "expires_in"},
                           "token": token})

    def take(self, holder, previous_owner, previous_token):
        token = int(self.client.incr(self.token_key))
        stored = self._stored(holder, token)
        if previous_owner is None:
            applied = self.client.set(self.key, stored, nx=True, px=self.seconds * 1000)
        else:
            applied = self.client.eval(_REDIS_SET_IF, 1, self.key, self._raw, stored,
                                       self.seconds * 1000)
        if applied:
            self._replicated(holder["owner"])
        return token if applied else None

    def _replicated(self, owner, what="taken"):
        """Wait until a replica holds the lease and its token (WAIT covers every earlier
        write of this connection), when the primary has replicas; else give it back and
        raise :class:`LeaseNotReplicated`: Redis replicates asynchronously, and a failover
        before the copy would hand the lock to a second run."""
        replicas = int(self.client.info("replication").get("connected_slaves", 0))
        if replicas and int(self.client.wait(1, REDIS_WAIT_MS)) < 1:
            self.release(owner)
            raise LeaseNotReplicated(
                f"none of the {replicas} replica(s) of the lease's primary acknowledged it "
                f"within {REDIS_WAIT_MS} ms (WAIT); not {what} but given back, so that a "
                "failover cannot hand the lock to a second run")

    def renew(self, holder):
        """Extend the owner's lease once a replica holds the new expiry too: a failover
        before the copy would leave the old one, and the lease could lapse mid-rollout."""
        stored = self._stored(holder, holder.get("token"))
        renewed = bool(self.client.eval(_REDIS_SET_IF, 1, self.key, holder["owner"], stored,
                                        self.seconds * 1000))
        if renewed:
            self._replicated(holder["owner"], "renewed")
        return renewed

    def release(self, owner):
        return bool(self.client.eval(_REDIS_RELEASE, 1, self.key, owner))


# ------------------------------------------------------------------ one acquire
def acquire(lease, owner, pid, pid_start, now, take_over=True):
    """Take or renew ``lease`` for ``owner``: ``(outcome, holder, reason)``.

    outcome: ``taken``, ``renewed``, ``taken over`` (reason: whose, and why it is dead), or
    ``held`` (holder: the other run's, None if it could not be read back). Without
    ``take_over`` (a heartbeat) a dead holder's lease is held too: another run had it.
    """
    for attempt in range(5):  # another run may win the race between the read and the write
        if attempt:
            time.sleep(random.uniform(0.1, 0.5))  # two runs that collided do not again
        current, token = lease.read()
        action, reason = decide(current, owner, None, now)
        if action == "refuse" or (action == "takeover" and not take_over):
            return "held", current, None
        if action == "renew":
            current["heartbeat_at"] = now
            if lease.renew(current):
                return "renewed", current, None
            continue
        record = new_holder(owner, pid, pid_start, now)
        got = lease.take(record, current.get("owner") if current else None, token)
        if got is not None:
            record.update(token=got, expires_in=lease.seconds)
            if action == "takeover":
                return "taken over", record, f"{current.get('owner')}: {reason}"
            return "taken", record, None
    return "held", lease.read()[0], None
