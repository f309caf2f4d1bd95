#!/usr/bin/python
"""Bootstrap and keep PasswordAuthenticator's state: system_auth replication, the install's
superuser, Kairos' own least-privilege role and the application roles the inventory names."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_auth_setup
short_description: Replicate system_auth; ensure the superuser, Kairos' own role and its grants
description:
  - Logs in as the superuser I(username). When that is refused, tries I(kairos_username)
    (a cluster set up before Kairos had its own role, where that role was the superuser),
    then the built-in superuser I(default_username) (a brand-new cluster), retrying until
    I(timeout) because Cassandra creates that role some seconds after it starts.
  - Sets system_auth to NetworkTopologyStrategy with min(I(replication_factor), nodes in
    the DC) replicas in every DC, so logins survive a node restart (the default of one
    replica makes a rolling restart lock clients out). Reports C(repair_needed) when the
    replication changed; run C(nodetool repair --full system_auth) then. Before that, it
    reads every role at ALL (a read repair), so that the login is still a superuser on the
    new replicas for the statements that follow.
  - Creates I(username) as a superuser with I(password) (or sets its password), and logs in
    as it before changing any other role. This superuser is for installing only; Kairos
    never logs in as it.
  - Creates I(kairos_username), the role Kairos logs in as, as a login role that is not a
    superuser, with exactly the grants its operations need (C(kairos_grants) lists them
    with their reasons); any other permission it holds is revoked. Creates
    I(kairos_keyspace) and its lease table for it.
  - Creates each role of I(roles) (application logins) and adds the grants it lacks; their
    other permissions (those on what they created) are left alone.
  - With I(disable_default_superuser), takes login and superuser away from the built-in role.
  - A statement the node refuses as unauthorized after the login was confirmed a superuser
    is run again until I(timeout), with a warning; the node's permissions cache may hold the
    login as no superuser until its next refresh (permissions_update_interval).
  - Passwords are never logged or returned; statements are not returned either.
extends_documentation_fragment: [kairos, kairos.check_only, kairos_cql, kairos.tls]
options:
  username:
    description: The superuser role this module ensures and logs in as (install only).
    required: true
  password:
    description: Its password; never on a command line, never logged or returned.
    required: true
  kairos_username:
    description: The role Kairos logs in as; empty to leave Kairos' role alone.
    type: str
    default: kairos
  kairos_password:
    description: Its password; never on a command line, never logged or returned.
    type: str
  kairos_keyspace:
    description: Kairos' own keyspace (the lease table), created here with system_auth's
      replication.
    type: str
    default: kairos
  alter_keyspaces:
    description: The application keyspaces whose tables Kairos may ALTER (compaction and
      caching steps). C(*) grants ALTER on all keyspaces (the lab, where tests create their
      keyspaces as they go). A keyspace that does not exist yet gets no grant and a warning.
    type: list
    elements: str
    default: []
  roles:
    description: Application login roles to ensure.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The role's name.
        type: str
        required: true
      password:
        description: Its password; never logged or returned.
        type: str
        required: true
      grants:
        description: Permissions it must hold, e.g. C(CREATE ON ALL KEYSPACES),
          C(SELECT ON KEYSPACE shop), C(MODIFY ON TABLE shop.cart).
        type: list
        elements: str
        default: []
  default_username:
    description: Cassandra's built-in superuser.
    type: str
    default: cassandra
  default_password:
    description: Its password on a brand-new cluster; never logged or returned.
    type: str
    default: cassandra
  replication_factor:
    description: system_auth (and I(kairos_keyspace)) replicas wanted per DC (capped at the
      DC's node count).
    type: int
    default: 3
  expected_nodes:
    description: Nodes the driver must see in the ring before the replication is decided;
      the module waits for them up to I(timeout). A node still joining would otherwise
      lower min(I(replication_factor), nodes), and the next run raise it again. 0 does not
      wait.
    type: int
    default: 0
  disable_default_superuser:
    description: Remove LOGIN and SUPERUSER from I(default_username) once I(username) works.
    type: bool
    default: true
  timeout:
    description: Seconds to keep trying to log in, per statement, and to keep running a
      statement the node refuses as unauthorized.
    default: 60
"""

EXAMPLES = r"""
- name: Set up authentication
  cassandra_auth_setup:
    host: 127.0.0.1
    username: kairos_admin
    password: "{{ cassandra_admin_password }}"
    kairos_username: kairos
    kairos_password: "{{ cassandra_cql_password }}"
    alter_keyspaces: [shop]
  register: auth
"""

RETURN = r"""
logged_in_as:
  description: The role the module logged in as first.
  returned: success
  type: str
replication:
  description: system_auth replication after the run (DC -> replicas).
  returned: success
  type: dict
repair_needed:
  description: True when system_auth replication changed, or the run logged in as the built-in
    superuser (an install not finished); run a full repair of system_auth then.
  returned: success
  type: bool
kairos_grants:
  description: The permissions Kairos' role holds after the run, as "PERMISSION ON RESOURCE".
  returned: success
  type: list
  elements: str
actions:
  description: What was done (or would be, in check mode), without secrets.
  returned: success
  type: list
  elements: str
"""

import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import (
    HAS_DRIVER,
    build_cluster,
    cql_argument_spec,
    wanted_replication,
)
from ansible.module_utils.kairos_lease import LEASE_TABLE, lease_schema

if HAS_DRIVER:
    from cassandra import AuthenticationFailed, ConsistencyLevel, Unauthorized
    from cassandra.cluster import NoHostAvailable

NTS = "org.apache.cassandra.locator.NetworkTopologyStrategy"
PERMISSIONS = ("ALTER", "AUTHORIZE", "CREATE", "DESCRIBE", "DROP", "EXECUTE", "MODIFY",
               "SELECT", "UNMASK", "SELECT_MASKED")
_GRANT = re.compile(r"^\s*(\w+)\s+ON\s+(ALL KEYSPACES|KEYSPACE \w+|TABLE \w+\.\w+)\s*$", re.I)


def kairos_grants(keyspace, alter_keyspaces):
    """[(permission, resource, why)]: everything Kairos' own role needs, nothing more."""
    grants = [
        ("SELECT", "KEYSPACE system_views",
         "collect, drift, the gates and read-backs read the virtual tables"),
        ("SELECT", "TABLE system_distributed.view_build_status",
         "the failure-detector probe reads one small replicated table"),
        ("SELECT", f"KEYSPACE {keyspace}", "the rollout lease (read at SERIAL)"),
        ("MODIFY", f"KEYSPACE {keyspace}", "the rollout lease (lightweight transactions)"),
    ]
    if "*" in alter_keyspaces:
        return [*grants, ("ALTER", "ALL KEYSPACES", "table steps on any keyspace")]
    return grants + [("ALTER", f"KEYSPACE {ks}", "table steps (compaction, caching)")
                     for ks in sorted(set(alter_keyspaces))]


def parse_grant(text):
    """(PERMISSION, resource) of "SELECT ON KEYSPACE shop"; ValueError names what is wrong."""
    match = _GRANT.match(text or "")
    if not match:
        raise ValueError(f"{text!r}: want PERMISSION ON ALL KEYSPACES | KEYSPACE k | TABLE k.t")
    permission, resource = match[1].upper(), match[2]
    if permission not in PERMISSIONS:
        raise ValueError(f"{text!r}: unknown permission {permission} "
                         f"(one of {', '.join(PERMISSIONS)})")
    kind, _, name = resource.partition(" ")
    return permission, (resource.upper() if kind.upper() == "ALL" else f"{kind.upper()} {name}")


def listed_resource(printed):
    """A resource as LIST PERMISSIONS prints it ('<keyspace shop>') in GRANT's syntax."""
    inner = printed.strip("<>")
    if inner.startswith("all functions in "):  # the functions of one keyspace
        return f"ALL FUNCTIONS IN KEYSPACE {inner[len('all functions in '):]}"
    if inner.startswith("all "):
        return inner.upper()
    kind, _, name = inner.partition(" ")
    return f"{kind.upper()} {name}"


def _auth_refused(exc):
    """True when the failure is bad credentials: not an unreachable node, nor a node that
    cannot read its roles yet (Cassandra answers "Unable to perform authentication: Cannot
    achieve consistency level ..." with the same error code while its peers are out of reach)."""
    if isinstance(exc, NoHostAvailable):
        return any(_auth_refused(e) for e in exc.errors.values())
    return isinstance(exc, AuthenticationFailed) and "Unable to perform" not in str(exc)


def _connect(params, username, password):
    cluster = build_cluster(
        [params["host"]],
        port=params["port"],
        timeout=min(params["timeout"], 20),
        username=username,
        password=password,
        tls=params["tls"],
        # Read what the last run wrote even before a replica caught up (idempotence).
        consistency_level=ConsistencyLevel.QUORUM,
    )
    try:
        return cluster, cluster.connect()
    except Exception:
        cluster.shutdown()
        raise


def _quote(literal):
    """A CQL string literal (role options take no bind markers)."""
    return "'" + literal.replace("'", "''") + "'"


def _identifier(name):
    return '"' + name.replace('"', '""') + '"'


def _logins(params):
    """The logins to try, in order: the superuser, Kairos' role (a superuser on clusters set
    up before it had grants of its own), the built-in superuser."""
    logins = [(params["username"], params["password"])]
    if params["kairos_username"] and params["kairos_password"]:
        logins.append((params["kairos_username"], params["kairos_password"]))
    return [*logins, (params["default_username"], params["default_password"])]


def login(module, params):
    """(cluster, session, role) logged in as the first role of :func:`_logins` that works."""
    deadline = time.monotonic() + params["timeout"]
    last = None
    while True:
        for user, password in _logins(params):
            try:
                cluster, session = _connect(params, user, password)
                return cluster, session, user
            except Exception as exc:
                last = exc
                if not _auth_refused(exc):
                    break
        if time.monotonic() >= deadline:
            break
        time.sleep(2)
    if last is not None and _auth_refused(last):
        module.fail_json(
            msg=f"{params['host']}: neither {params['username']} nor the built-in "
                f"{params['default_username']} can log in; set cassandra_admin_password to the "
                f"current password of {params['username']}"
        )
    module.fail_json(msg=f"cannot connect to {params['host']}:{params['port']} over CQL: {last}")


def _check_params(module, params):
    """Fail on bad input before connecting: names, passwords, grants, the replication."""
    if params["replication_factor"] < 1:
        module.fail_json(
            msg=f"replication_factor={params['replication_factor']}: must be at least 1"
        )
    if not params["username"]:
        module.fail_json(msg="username: empty; give the superuser role used to install")
    if not params["password"]:
        module.fail_json(
            msg=f"password: empty; give the password of {params['username']} "
            "(cassandra_admin_password), a superuser is never created without one"
        )
    if params["username"] == params["default_username"]:
        module.fail_json(msg=f"username must not be the built-in {params['default_username']} role")
    kairos = params["kairos_username"]
    if kairos and kairos in (params["username"], params["default_username"]):
        module.fail_json(msg=f"kairos_username={kairos}: Kairos' role must not be a superuser "
                             "role; give it a name of its own")
    if kairos and not params["kairos_password"]:
        module.fail_json(msg=f"kairos_password: empty; give the password of {kairos} "
                             "(cassandra_cql_password)")
    if not re.fullmatch(r"\w+", params["kairos_keyspace"] or ""):
        module.fail_json(msg=f"kairos_keyspace={params['kairos_keyspace']!r}: not a keyspace name")
    for name in params["alter_keyspaces"]:
        if name != "*" and not re.fullmatch(r"\w+", name or ""):
            module.fail_json(msg=f"alter_keyspaces: {name!r} is not a keyspace name (or *)")
    for index, role in enumerate(params["roles"]):
        where = f"roles[{index}]"
        if not role.get("name") or not re.fullmatch(r"\w+", str(role["name"])):
            module.fail_json(msg=f"{where}.name: {role.get('name')!r} is not a role name")
        if role["name"] in (params["username"], params["default_username"], kairos):
            module.fail_json(msg=f"{where}.name: {role['name']} is already a Kairos or "
                                 "built-in role")
        if not role.get("password"):
            module.fail_json(msg=f"{where}.password: empty; give the password of {role['name']}")
        for grant in role.get("grants") or []:
            try:
                parse_grant(grant)
            except ValueError as exc:
                module.fail_json(msg=f"{where}.grants: {exc}")


class _Setup:
    """One run's connection (replaced once the superuser is proven) and the actions taken.

    In check mode each action is recorded and its statement is not executed.
    """

    def __init__(self, module, cluster, session, logged_in_as):
        self.module = module
        self.params = module.params
        self.cluster, self.session, self.logged_in_as = cluster, session, logged_in_as
        self.actions = []
        # Once this run has changed system_auth's replication, the rows written before are
        # only on the old replicas until the repair after the module: a QUORUM of the new
        # ones may not hold them (the built-in superuser read as absent, left enabled, and
        # disabled only by the next run). Roles are then read from every replica.
        self.read_every_replica = False

    def run(self, statement, action):
        """Run a statement of the proven superuser. Refused, it is run again until the
        timeout: the node's permissions cache may still hold what it computed while the login
        read as no superuser (the refused probes of :meth:`confirm_superuser` load it), and
        serves it until a refresh, every permissions_update_interval (a CREATE ROLE refused right
        after the probe passed: CI stop 69). The node authorizes before it runs anything, so
        running it again is safe."""
        self.actions.append(action)
        if self.module.check_mode:
            return
        try:
            refusals = self._while_refused(statement)
        except Unauthorized as exc:
            raise RuntimeError(
                f"refused for {float(self.params['timeout']):g} s although "
                f"{self.logged_in_as} was confirmed a superuser: {exc}") from exc
        if refusals:
            self.module.warn(
                f"the node refused '{action}' {refusals} time(s) before it ran it: its "
                "permissions cache still held the login as no superuser")

    def _while_refused(self, statement):
        """Execute ``statement``, again every second while the node refuses it as
        unauthorized (its auth caches refresh on their own); the number of refusals. The
        last refusal is raised once the timeout has passed."""
        deadline, refusals = time.monotonic() + float(self.params["timeout"]), 0
        while True:
            try:
                self.session.execute(statement, timeout=self.params["timeout"])
                return refusals
            except Unauthorized:
                refusals += 1
                if time.monotonic() >= deadline:
                    raise
            time.sleep(1)

    def replicate_system_auth(self):
        """system_auth on NetworkTopologyStrategy, min(RF, nodes) per DC: (wanted, changed)."""
        row = self.session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = 'system_auth'"
        ).one()
        current = dict(row.replication) if row else {}
        wanted = wanted_replication(self.ring_hosts(), self.params["replication_factor"])
        current_dcs = {k: int(v) for k, v in current.items() if k not in ("class",)
                       and str(v).isdigit()}
        changed = current.get("class") != NTS or current_dcs != wanted
        if changed:
            options = ", ".join(f"'{dc}': {rf}" for dc, rf in wanted.items())
            self.run(
                "ALTER KEYSPACE system_auth WITH replication = "
                f"{{'class': 'NetworkTopologyStrategy', {options}}}",
                f"system_auth replication {current_dcs or current.get('class')} -> {wanted}",
            )
            self.read_every_replica = not self.module.check_mode
            self.wait_for_schema_agreement()
        # The built-in superuser's row predates the change: logged in as it (a new cluster, or
        # an install cut short after the change and before its repair), read every role at
        # ALL first, and end with a repair.
        unfinished = (self.logged_in_as == self.params["default_username"]
                      and self.logged_in_as != self.params["username"])
        if changed or unfinished:
            self.read_repair_roles()
        return wanted, changed or unfinished

    def read_repair_roles(self):
        """Every role's row on every new replica before the login is used again. Until the
        repair after the module, a row written before the change is on its old replica only,
        and the node's roles cache, which reads at QUORUM, may then read the logged-in
        superuser as absent and refuse its next statement ("does not have sufficient
        privileges": a fresh lab's start, 2026-12-04). A read at ALL repairs what it reads;
        then wait until the node's cache holds the login as a superuser again."""
        if self.module.check_mode:
            return
        from cassandra.query import SimpleStatement

        def every_replica(query):
            return SimpleStatement(query, consistency_level=ConsistencyLevel.ALL)

        names = [r.role for r in self.session.execute(
            every_replica("SELECT role FROM system_auth.roles"), timeout=self.params["timeout"])]
        # Each row by its key as well: a single-partition read at ALL surely repairs it.
        for name in names:
            self.session.execute(every_replica("SELECT * FROM system_auth.roles WHERE role = %s"),
                                 (name,), timeout=self.params["timeout"])
        self.confirm_superuser(self.logged_in_as, "every role was read at ALL")

    def wait_for_schema_agreement(self):
        """Every node has the new replication before a role is written: a node still on the
        old one writes and reads a role on its old replica only (the driver's own wait gives
        up silently after 10 s, which a loaded machine can exceed)."""
        if self.module.check_mode:
            return
        timeout = float(self.params["timeout"])
        if not self.cluster.control_connection.wait_for_schema_agreement(wait_time=timeout):
            self.module.fail_json(
                msg=f"{self.params['host']}: the nodes do not agree on the schema {timeout:g} s "
                    "after system_auth's replication changed; no role was written. Check that "
                    "every node is up (nodetool describecluster) and run the role again",
                actions=self.actions)

    def ring_hosts(self):
        """The hosts the driver sees, once they are at least ``expected_nodes``."""
        expected = self.params["expected_nodes"]
        deadline = time.monotonic() + self.params["timeout"]
        hosts = list(self.cluster.metadata.all_hosts())
        while len(hosts) < expected:
            if time.monotonic() >= deadline:
                self.module.fail_json(
                    msg=f"{self.params['host']}: the ring shows {len(hosts)} node(s) after "
                        f"{float(self.params['timeout']):g} s, not the {expected} expected: the "
                        "system_auth replication is not decided on part of the cluster")
            time.sleep(2)
            self.cluster.refresh_nodes()
            hosts = list(self.cluster.metadata.all_hosts())
        return hosts

    def _role(self, name):
        from cassandra.query import SimpleStatement

        query = SimpleStatement(
            "SELECT can_login, is_superuser FROM system_auth.roles WHERE role = %s",
            consistency_level=ConsistencyLevel.ALL if self.read_every_replica else None)
        return self.session.execute(query, (name,)).one()

    def ensure_login_role(self, user, password, superuser):
        """``user`` exists, can log in with ``password``, and is a superuser or not."""
        flags = f"SUPERUSER = {'true' if superuser else 'false'} AND LOGIN = true"
        kind = "superuser role" if superuser else "role"
        role = self._role(user)
        if role is None:
            self.run(f"CREATE ROLE {_identifier(user)} WITH PASSWORD = {_quote(password)} "
                     f"AND {flags}", f"created {kind} {user}")
        elif bool(role.is_superuser) != superuser or (
                self.logged_in_as != user and not self.login_works(user, password)):
            self.run(f"ALTER ROLE {_identifier(user)} WITH PASSWORD = {_quote(password)} "
                     f"AND {flags}", f"set the password of {kind} {user}"
                     + ("" if bool(role.is_superuser) == superuser else
                        f" and made it {'a superuser' if superuser else 'no superuser'}"))

    def require_superuser(self):
        """Fail unless the login (Kairos' role: an upgrade's only way in) is a superuser."""
        from cassandra import Unauthorized

        user = self.logged_in_as
        try:
            self._role(user)
        except Unauthorized:
            self.module.fail_json(
                msg=f"{self.params['host']}: {self.params['username']} cannot log in and "
                    f"{user} is not a superuser (Kairos' role has only its grants); set "
                    f"cassandra_admin_password to the password of {self.params['username']}")

    def login_works(self, user, password):
        """True when ``user`` logs in with ``password`` (a password to set again if not)."""
        try:
            cluster, _ = _connect(self.params, user, password)
        except Exception as exc:
            if _auth_refused(exc):
                return False
            raise
        cluster.shutdown()
        return True

    def become_superuser(self):
        """Log in as the superuser before changing any other role (proves its password)."""
        user = self.params["username"]
        if self.logged_in_as == user or self.module.check_mode:
            return
        self.cluster.shutdown()
        self.cluster, self.session = _connect(self.params, user, self.params["password"])
        self.confirm_superuser(user, "it was made one")

    def confirm_superuser(self, user, since):
        """The node treats the new login as a superuser before it is used as one. A node
        whose roles cache read the role before it was written refuses it (Unauthorized,
        "does not have sufficient privileges": CI stop 64) until the cache refreshes,
        every roles_update_interval. A refused probe leaves the login's permissions on the
        roles cached as none (CassandraAuthorizer.list asks for DESCRIBE on them): the role
        statements that follow are run again while refused (:meth:`run`)."""
        try:
            # Superusers only: anyone else may list no permissions but their own.
            self._while_refused("LIST ALL PERMISSIONS")
        except Unauthorized:
            self.module.fail_json(
                msg=f"{self.params['host']} still refuses {user} as a superuser "
                    f"{float(self.params['timeout']):g} s after {since}; "
                    "nothing else was changed. Run the role again",
                actions=self.actions)

    def permissions(self, role):
        """{(PERMISSION, resource)} the role holds directly."""
        if self._role(role) is None:
            return set()
        rows = self.session.execute(f"LIST ALL PERMISSIONS OF {_identifier(role)} NORECURSIVE")
        return {(r.permission, listed_resource(r.resource)) for r in rows}

    def keyspaces(self):
        return {r.keyspace_name for r in self.session.execute(
            "SELECT keyspace_name FROM system_schema.keyspaces")}

    def grant(self, role, wanted, revoke_others):
        """GRANT what ``role`` lacks of ``wanted``; REVOKE the rest when ``revoke_others``."""
        held = self.permissions(role)
        for permission, resource in sorted(set(wanted) - held):
            self.run(f"GRANT {permission} ON {resource} TO {_identifier(role)}",
                     f"granted {permission} ON {resource} to {role}")
        if revoke_others:
            for permission, resource in sorted(held - set(wanted)):
                self.run(f"REVOKE {permission} ON {resource} FROM {_identifier(role)}",
                         f"revoked {permission} ON {resource} from {role}")

    def ensure_kairos_role(self, replication):
        """Kairos' keyspace and lease table, its role (no superuser) and exactly its grants."""
        params = self.params
        keyspace, user = params["kairos_keyspace"], params["kairos_username"]
        existing = self.keyspaces()
        has_table = self.session.execute(
            "SELECT table_name FROM system_schema.tables "
            "WHERE keyspace_name = %s AND table_name = %s", (keyspace, LEASE_TABLE)).one()
        create_keyspace, create_table = lease_schema(keyspace, replication)
        if keyspace not in existing:
            self.run(create_keyspace, f"created keyspace {keyspace} (Kairos' lease)")
            existing.add(keyspace)
        if not has_table:
            self.run(create_table, f"created table {keyspace}.{LEASE_TABLE}")
        self.ensure_login_role(user, params["kairos_password"], superuser=False)
        missing = sorted(k for k in params["alter_keyspaces"] if k != "*" and k not in existing)
        if missing:
            self.module.warn(f"keyspaces {', '.join(missing)} do not exist yet: {user} gets no "
                             "ALTER on them; run the role again once they are created")
        wanted = [(perm, res) for perm, res, _ in kairos_grants(
            keyspace, [k for k in params["alter_keyspaces"] if k not in missing])]
        self.grant(user, wanted, revoke_others=True)
        return sorted(f"{perm} ON {res}" for perm, res in wanted)

    def ensure_roles(self):
        for role in self.params["roles"]:
            self.ensure_login_role(role["name"], role["password"], superuser=False)
            self.grant(role["name"], [parse_grant(g) for g in role.get("grants") or []],
                       revoke_others=False)

    def disable_default_superuser(self):
        """The built-in role can neither log in nor act as a superuser."""
        default_username = self.params["default_username"]
        default = self._role(default_username)
        if default is None or not (default.can_login or default.is_superuser):
            return
        self.run(f"ALTER ROLE {_identifier(default_username)} "
                 "WITH SUPERUSER = false AND LOGIN = false",
                 f"disabled login and superuser of the built-in {default_username} role")


def _setup(setup, params):
    """The run's steps, in an order that never locks the installer out."""
    if setup.logged_in_as == params["kairos_username"]:
        setup.require_superuser()
    # Replication first, so the roles written next land on every replica.
    wanted, repair_needed = setup.replicate_system_auth()
    setup.ensure_login_role(params["username"], params["password"], superuser=True)
    setup.become_superuser()
    grants = setup.ensure_kairos_role(wanted) if params["kairos_username"] else []
    setup.ensure_roles()
    if params["disable_default_superuser"]:
        setup.disable_default_superuser()
    return wanted, repair_needed, grants


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(
            username=dict(required=True),
            password=dict(required=True),
            kairos_username=dict(type="str", default="kairos"),
            kairos_password=dict(type="str", no_log=True),
            kairos_keyspace=dict(type="str", default="kairos"),
            alter_keyspaces=dict(type="list", elements="str", default=[]),
            roles=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                password=dict(type="str", required=True, no_log=True),
                grants=dict(type="list", elements="str", default=[]),
            )),
            default_username=dict(type="str", default="cassandra"),
            default_password=dict(type="str", default="cassandra", no_log=True),
            replication_factor=dict(type="int", default=3),
            expected_nodes=dict(type="int", default=0),
            disable_default_superuser=dict(type="bool", default=True),
            timeout=dict(default=60),
        ),
        supports_check_mode=True,
    )
    if not HAS_DRIVER:
        module.fail_json(msg="cassandra-driver is required on the host running this module")
    params = module.params
    _check_params(module, params)
    secrets = [params["password"], params["kairos_password"] or ""] + [
        str(r.get("password") or "") for r in params["roles"]]

    setup = _Setup(module, *login(module, params))
    try:
        wanted, repair_needed, grants = _setup(setup, params)
    except Exception as exc:
        # A server error may quote the statement: never let a password through.
        message = str(exc)
        for secret in filter(None, secrets):
            message = message.replace(secret, "********")
        module.fail_json(
            msg=f"{params['host']}: authentication setup failed: {message}",
            actions=setup.actions,
        )
    finally:
        setup.cluster.shutdown()

    module.exit_json(changed=bool(setup.actions), logged_in_as=setup.logged_in_as,
                     replication=wanted, repair_needed=repair_needed and not module.check_mode,
                     kairos_grants=grants, actions=setup.actions)


if __name__ == "__main__":
    main()
