#!/usr/bin/python
"""Rotate a running Redis node's passwords live: ACL users, requirepass, masterauth."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: redis_acl_passwords
short_description: Put new Redis passwords into service on a running node, without a restart
description:
  - >-
    A password rotation in two passes over every node, so that no client or replica is
    refused midway. C(added) gives each user of I(users) its new password beside the old ones
    (C(ACL SETUSER <user> #<sha256>)) and sets I(masterauth) / I(masteruser) (C(CONFIG SET)),
    which the replicas use on their next connection. C(pruned), once every node has the new
    passwords, removes every other password of those users (C(ACL SETUSER <user> !<sha256>))
    and sets C(requirepass) to the C(default) user's new password (C(CONFIG SET), which keeps
    only that one). ACL SETUSER alone leaves the old password in requirepass, where
    C(CONFIG GET) shows it and a C(CONFIG REWRITE) would write it back into the conf.
  - Each pass reads the users back (C(ACL GETUSER)) and fails unless they hold what it set.
    Only SHA-256 digests are sent in ACL commands; no password or digest is returned.
  - A user the node does not know (added to the conf since the node started) is left to the
    node's next restart and named in I(absent).
  - Logs in as the default user with I(password); when that is refused (the default user's
    own password is the one being rotated), with I(previous_password).
extends_documentation_fragment: [kairos, kairos.no_check, kairos_redis, kairos.tls]
options:
  node:
    description: C(host:port) of the node.
    type: str
    required: true
  users:
    description: The users and their new passwords; C(default) is the requirepass user.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The ACL user.
        type: str
        required: true
      password:
        description: Its new password (never returned or logged).
        type: str
        required: true
      rules:
        description: Its rules, as the role renders them; not changed here (they change at restart).
        type: str
  previous_password:
    description:
      - The default user's password before this rotation, tried when I(password) is refused.
    type: str
    default: ""
  masteruser:
    description: The user the node's replication logs in as (empty - leave it).
    type: str
    default: ""
  masterauth:
    description: That user's new password (empty - leave it).
    type: str
    default: ""
  state:
    description: C(added) - the new passwords beside the old; C(pruned) - only the new ones.
    type: str
    choices: [added, pruned]
    default: added
"""

EXAMPLES = r"""
- name: New passwords beside the old, on every node first
  redis_acl_passwords:
    node: "{{ redis_address }}:{{ redis_port }}"
    password: "{{ redis_password }}"
    users: [{name: app, password: "{{ vault_redis_app_password }}"}]
    state: added
"""

RETURN = r"""
changed_users:
  description: The users whose passwords this pass changed (names only).
  returned: always
  type: list
  elements: str
absent:
  description: Users of I(users) the running node does not know (they come with its next restart).
  returned: always
  type: list
  elements: str
masterauth_changed:
  description: Whether masterauth or masteruser was set.
  returned: always
  type: bool
requirepass_changed:
  description: Whether requirepass was set (C(pruned), the C(default) user's new password).
  returned: always
  type: bool
"""

import hashlib

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_redis import (
    Node,
    RedisModuleError,
    config_get_value,
    credentials,
    error_text,
    redis_argument_spec,
)


def digest(password):
    return hashlib.sha256(password.encode()).hexdigest()


def acl_passwords(reply):
    """The password digests of an ``ACL GETUSER`` reply (a flat list or a map; RESP2 or 3),
    or None when the user does not exist."""
    if reply is None:
        return None
    fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    fields = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in fields.items()}
    return sorted(p.decode() if isinstance(p, bytes) else str(p)
                  for p in fields.get("passwords") or [])


def plan(users, running, state):
    """The ``ACL SETUSER`` rules per user: ``added`` adds a missing wanted digest, ``pruned``
    removes every other. ``users``: name -> wanted digest; ``running``: name -> digests."""
    rules = {}
    for name, wanted in users.items():
        have = running.get(name)
        if have is None:
            continue
        if state == "added":
            todo = [f"#{wanted}"] if wanted not in have else []
        else:
            todo = [f"!{d}" for d in have if d != wanted] + ([f"#{wanted}"] if wanted not in have
                                                               else [])
        if todo:
            rules[name] = todo
    return rules


def _login(module, where):
    """A node logged in with ``password``, else ``previous_password``."""
    password, username, timeout, tls = credentials(module)
    last = None
    for candidate in [password] + ([module.params["previous_password"]]
                                   if module.params["previous_password"] else []):
        try:
            node = Node(where, candidate, username, timeout, tls)
        except RedisModuleError as exc:  # not host:port, or no redis-py: no use retrying
            module.fail_json(msg=str(exc))
        try:
            node.raw("PING")
            return node
        except Exception as exc:  # a refused login: try the previous password
            node.close()
            last = exc
            if "Authentication" not in type(exc).__name__ and "NOAUTH" not in str(exc) \
                    and "WRONGPASS" not in str(exc):
                break
    module.fail_json(msg=f"{where}: cannot log in: {error_text(last)}")


def _set_config(node, key, value):
    """``CONFIG SET key value`` unless the node holds it already, read back; whether it was set."""
    if config_get_value(key, node.raw("CONFIG", "GET", key)) == value:
        return False
    node.raw("CONFIG", "SET", key, value)
    if config_get_value(key, node.raw("CONFIG", "GET", key)) != value:
        raise RedisModuleError(f"{node.endpoint}: {key} did not take the new value")
    return True


def _rotate(node, params, passwords):
    """One pass on a logged-in node: ``(running, rules, masterauth_changed, requirepass_changed)``,
    the users read back against what the pass set."""
    wanted = {name: digest(password) for name, password in passwords.items()}
    state = params["state"]
    running = {name: acl_passwords(node.raw("ACL", "GETUSER", name)) for name in wanted}
    rules = plan(wanted, running, state)
    for name, todo in rules.items():
        node.raw("ACL", "SETUSER", name, *todo)
    master_changed = requirepass_changed = False
    if state == "added":
        for key in ("masteruser", "masterauth"):
            if params[key] and _set_config(node, key, params[key]):
                master_changed = True
    elif running.get("default") is not None:
        # ACL SETUSER leaves requirepass (CONFIG GET, CONFIG REWRITE) with the old password;
        # CONFIG SET requirepass keeps only the new one, as the prune just did.
        requirepass_changed = _set_config(node, "requirepass", passwords["default"])
    for name in rules:
        after = acl_passwords(node.raw("ACL", "GETUSER", name)) or []
        if not (wanted[name] in after if state == "added" else after == [wanted[name]]):
            raise RedisModuleError(
                f"{node.endpoint}: user {name} does not hold its new password after "
                f"ACL SETUSER ({len(after)} passwords read back)")
    return running, rules, master_changed, requirepass_changed


def main():
    module = AnsibleModule(
        argument_spec=redis_argument_spec(
            node=dict(type="str", required=True),
            users=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                password=dict(type="str", required=True, no_log=True),
                rules=dict(type="str"))),
            previous_password=dict(type="str", default="", no_log=True),
            masteruser=dict(type="str", default=""),
            masterauth=dict(type="str", default="", no_log=True),
            state=dict(type="str", choices=["added", "pruned"], default="added"),
        ),
        supports_check_mode=False,
    )
    where = module.params["node"]
    passwords = {}
    for i, user in enumerate(module.params["users"]):
        name, password = str(user.get("name") or ""), user.get("password")
        if not name or not isinstance(password, str) or not password:
            module.fail_json(msg=f"users[{i}]: needs a name and a non-empty password")
        passwords[name] = password
    node = _login(module, where)
    try:
        running, rules, master_changed, requirepass_changed = _rotate(
            node, module.params, passwords)
    except RedisModuleError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:
        module.fail_json(msg=f"{where}: {error_text(exc)}")
    finally:
        node.close()
    module.exit_json(changed=bool(rules) or master_changed or requirepass_changed,
                     changed_users=sorted(rules),
                     absent=sorted(n for n, d in running.items() if d is None),
                     masterauth_changed=master_changed, requirepass_changed=requirepass_changed)


if __name__ == "__main__":
    main()
