#!/usr/bin/python
"""Bootstrap and keep PasswordAuthenticator's state: system_auth replication, the admin role."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_auth_setup
short_description: Replicate system_auth and ensure the superuser role Kairos logs in as
description:
  - Logs in as I(username). When that is refused (a brand-new cluster), logs in as the
    built-in superuser I(default_username) instead, retrying until I(timeout) because
    Cassandra creates that role some seconds after it starts.
  - Sets system_auth to NetworkTopologyStrategy with min(I(replication_factor), nodes in
    the DC) replicas in every DC, so logins survive a node restart (the default of one
    replica makes a rolling restart lock clients out). Reports C(repair_needed) when the
    replication changed; run C(nodetool repair --full system_auth) then.
  - Creates I(username) as a superuser with I(password), or sets its password when the
    role exists but the password was refused, then logs in as it.
  - With I(disable_default_superuser), takes login and superuser away from the built-in role.
  - Passwords are never logged or returned; statements are not returned either.
extends_documentation_fragment: [kairos, kairos.check_only, kairos_cql]
options:
  username:
    description: The superuser role Kairos uses.
    required: true
  password:
    description: Its password; never on a command line, never logged or returned.
    required: true
  default_username:
    description: Cassandra's built-in superuser.
    type: str
    default: cassandra
  default_password:
    description: Its password on a brand-new cluster; never logged or returned.
    type: str
    default: cassandra
  replication_factor:
    description: system_auth replicas wanted per DC (capped at the DC's node count).
    type: int
    default: 3
  disable_default_superuser:
    description: Remove LOGIN and SUPERUSER from I(default_username) once I(username) works.
    type: bool
    default: true
  timeout:
    description: Seconds to keep trying to log in (and per statement).
    default: 60
"""

EXAMPLES = r"""
- name: Set up authentication
  cassandra_auth_setup:
    host: 127.0.0.1
    username: kairos
    password: "{{ cassandra_cql_password }}"
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
  description: True when system_auth replication changed (run a full repair of system_auth).
  returned: success
  type: bool
actions:
  description: What was done (or would be, in check mode), without secrets.
  returned: success
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import (
    HAS_DRIVER,
    build_cluster,
    cql_argument_spec,
    wanted_replication,
)

if HAS_DRIVER:
    from cassandra import AuthenticationFailed, ConsistencyLevel
    from cassandra.cluster import NoHostAvailable

NTS = "org.apache.cassandra.locator.NetworkTopologyStrategy"


def _auth_refused(exc):
    """True when the failure is bad credentials (not an unreachable node)."""
    if isinstance(exc, AuthenticationFailed):
        return True
    if isinstance(exc, NoHostAvailable):
        return any(isinstance(e, AuthenticationFailed) for e in exc.errors.values())
    return False


def _connect(params, username, password):
    cluster = build_cluster(
        [params["host"]],
        port=params["port"],
        timeout=min(params["timeout"], 20),
        username=username,
        password=password,
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


def login(module, params):
    """(cluster, session, role) logged in as the Kairos role, else as the built-in one."""
    deadline = time.monotonic() + params["timeout"]
    last = None
    while True:
        for user, password in ((params["username"], params["password"]),
                               (params["default_username"], params["default_password"])):
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
                f"{params['default_username']} can log in; set cassandra_cql_password to the "
                f"current password of {params['username']}"
        )
    module.fail_json(msg=f"cannot connect to {params['host']}:{params['port']} over CQL: {last}")


def _check_params(module, params):
    """Fail on a replication factor below 1, an empty role or password, the built-in role."""
    if params["replication_factor"] < 1:
        module.fail_json(
            msg=f"replication_factor={params['replication_factor']}: must be at least 1"
        )
    if not params["username"]:
        module.fail_json(msg="username: empty; give the role Kairos logs in as")
    if not params["password"]:
        module.fail_json(
            msg=f"password: empty; give the password of {params['username']} "
            "(cassandra_cql_password), a superuser is never created without one"
        )
    if params["username"] == params["default_username"]:
        module.fail_json(msg=f"username must not be the built-in {params['default_username']} role")


class _Setup:
    """One run's connection (replaced once the Kairos role is proven) and the actions taken.

    In check mode each action is recorded and its statement is not executed.
    """

    def __init__(self, module, cluster, session, logged_in_as):
        self.module = module
        self.params = module.params
        self.cluster, self.session, self.logged_in_as = cluster, session, logged_in_as
        self.actions = []

    def run(self, statement, action):
        self.actions.append(action)
        if not self.module.check_mode:
            self.session.execute(statement, timeout=self.params["timeout"])

    def replicate_system_auth(self):
        """system_auth on NetworkTopologyStrategy, min(RF, nodes) per DC: (wanted, changed)."""
        row = self.session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = 'system_auth'"
        ).one()
        current = dict(row.replication) if row else {}
        wanted = wanted_replication(self.cluster.metadata.all_hosts(),
                                    self.params["replication_factor"])
        current_dcs = {k: int(v) for k, v in current.items() if k not in ("class",)
                       and str(v).isdigit()}
        repair_needed = current.get("class") != NTS or current_dcs != wanted
        if repair_needed:
            options = ", ".join(f"'{dc}': {rf}" for dc, rf in wanted.items())
            self.run(
                "ALTER KEYSPACE system_auth WITH replication = "
                f"{{'class': 'NetworkTopologyStrategy', {options}}}",
                f"system_auth replication {current_dcs or current.get('class')} -> {wanted}",
            )
        return wanted, repair_needed

    def ensure_kairos_role(self):
        """The Kairos role exists as a superuser with the given password."""
        user, password = self.params["username"], self.params["password"]
        exists = self.session.execute(
            "SELECT role FROM system_auth.roles WHERE role = %s", (user,)
        ).one() is not None
        if not exists:
            self.run(f"CREATE ROLE {_identifier(user)} WITH PASSWORD = {_quote(password)} "
                     "AND SUPERUSER = true AND LOGIN = true",
                     f"created superuser role {user}")
        elif self.logged_in_as != user:
            self.run(f"ALTER ROLE {_identifier(user)} WITH PASSWORD = {_quote(password)} "
                     "AND SUPERUSER = true AND LOGIN = true",
                     f"set the password of role {user}")

    def disable_default_superuser(self):
        """The built-in role can neither log in nor act as a superuser."""
        default_username = self.params["default_username"]
        default = self.session.execute(
            "SELECT can_login, is_superuser FROM system_auth.roles WHERE role = %s",
            (default_username,),
        ).one()
        if default is None or not (default.can_login or default.is_superuser):
            return
        user = self.params["username"]
        if self.logged_in_as != user and not self.module.check_mode:
            # Prove the Kairos role works before locking the built-in one out.
            self.cluster.shutdown()
            self.cluster, self.session = _connect(self.params, user, self.params["password"])
        self.run(f"ALTER ROLE {_identifier(default_username)} "
                 "WITH SUPERUSER = false AND LOGIN = false",
                 f"disabled login and superuser of the built-in {default_username} role")


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(
            username=dict(required=True),
            password=dict(required=True),
            default_username=dict(type="str", default="cassandra"),
            default_password=dict(type="str", default="cassandra", no_log=True),
            replication_factor=dict(type="int", default=3),
            disable_default_superuser=dict(type="bool", default=True),
            timeout=dict(default=60),
        ),
        supports_check_mode=True,
    )
    if not HAS_DRIVER:
        module.fail_json(msg="cassandra-driver is required on the host running this module")
    params = module.params
    _check_params(module, params)

    setup = _Setup(module, *login(module, params))
    try:
        # Replication first, so the roles written next land on every replica.
        wanted, repair_needed = setup.replicate_system_auth()
        setup.ensure_kairos_role()
        if params["disable_default_superuser"]:
            setup.disable_default_superuser()
    except Exception as exc:
        # A server error may quote the statement: never let the password through.
        message = str(exc).replace(params["password"], "********")
        module.fail_json(
            msg=f"{params['host']}: authentication setup failed: {message}",
            actions=setup.actions,
        )
    finally:
        setup.cluster.shutdown()

    module.exit_json(changed=bool(setup.actions), logged_in_as=setup.logged_in_as,
                     replication=wanted, repair_needed=repair_needed and not module.check_mode,
                     actions=setup.actions)


if __name__ == "__main__":
    main()
