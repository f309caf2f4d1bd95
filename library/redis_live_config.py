#!/usr/bin/python
"""Set redis.conf directives on a running Redis with CONFIG SET (never CONFIG REWRITE)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: redis_live_config
short_description: Set Redis directives live with CONFIG SET, keeping redis.conf the source of truth
description:
  - Reads the running value of every directive in I(settings) and I(expect) with CONFIG
    GET. An unknown directive, or one of I(settings) that I(restart_only) names, fails
    before anything is set; one Redis itself cannot change live (io-threads, ...) fails
    with the server's refusal, and nothing is set.
  - Sets the directives that differ in one atomic C(CONFIG SET k v [k v ...]) (Redis 7
    sets all or none), reads them back and fails if the server did not take them.
  - Never runs CONFIG REWRITE. The rendered conf file is the redis role's business
    (entry point C(apply_settings)); give I(conf_file) to check afterwards that the file
    says what the server runs, for every directive of I(settings) and I(expect).
  - I(expect) is compared only (e.g. restart-only directives after a restart); a
    difference fails.
  - Sizes compare by value (C(64mb) equals C(67108864)), booleans as yes/no.
extends_documentation_fragment: [kairos, kairos.check_diff, kairos_redis, kairos.tls]
options:
  host:
    description: Address of the node.
    type: str
    default: 127.0.0.1
  port:
    description: Port of the node.
    type: int
    required: true
  settings:
    description: redis.conf directive -> value to set live.
    type: dict
    default: {}
  expect:
    description: redis.conf directive -> value the node must already run (compared only).
    type: dict
    default: {}
  restart_only:
    description: >-
      Directives that need a restart, as the configuration space classes them (the
      rollout's C(restart) keys); any of them in I(settings) is refused.
    type: list
    elements: str
    default: []
  conf_file:
    description: >-
      The node's rendered conf file; when given, every directive of I(settings) and
      I(expect) must have the running value in it (checked after applying).
    type: path
"""

EXAMPLES = r"""
- name: More background work per second, live
  redis_live_config:
    port: 7001
    settings: {hz: 20, maxmemory-policy: allkeys-lfu}
    password: "{{ redis_password }}"

- name: After templating, the file and the server agree
  redis_live_config:
    port: 7001
    settings: {hz: 20}
    expect: {io-threads: 2}
    conf_file: /etc/redis-kairos/7001.conf
"""

RETURN = r"""
before:
  description: Running values (CONFIG GET form) before, for every directive given.
  returned: always
  type: dict
after:
  description: Values CONFIG GET reads back after the CONFIG SET (in check mode, what would be set).
  returned: always
  type: dict
changed_keys:
  description: Directives that were (or in check mode would be) set.
  returned: always
  type: list
  elements: str
file_mismatch:
  description: Directives whose conf_file value differs from the running one ({file, running}).
  returned: when conf_file is given
  type: dict
drift:
  description:
    - Directives of I(expect) the node does not run ({expected, running}), the pre-flight's
      C(drift) refusal (M(kairos_preflight)).
  returned: when the node does not run an expected value (failure)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_redis import (
    SECRET_DIRECTIVES,
    Node,
    RedisModuleError,
    config_set_args,
    credentials,
    differing,
    error_text,
    parse_conf,
    redis_argument_spec,
    same_value,
)


def _refuse_what_cannot_be_set(module, where, settings, expect, restart_only):
    """Fail before any read on a restart-only directive to set, or on the role's secrets."""
    refused = sorted(set(settings) & {str(k).lower() for k in restart_only})
    if refused:
        module.fail_json(
            msg=f"{where}: cannot change live (needs a restart): {', '.join(refused)}; "
            "nothing was set"
        )
    secret = sorted((set(settings) | set(expect)) & SECRET_DIRECTIVES)
    if secret:
        module.fail_json(msg=f"{where}: {', '.join(secret)} are the role's (redis_password)")


def _read_running(module, where, keys):
    """The connected node and what it runs for ``keys`` (CONFIG GET); unknown keys fail."""
    try:
        node = Node(where, *credentials(module))
        before = node.config_get(keys)
    except RedisModuleError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:
        module.fail_json(msg=f"{where}: cannot read the configuration: {error_text(exc)}")
    unknown = sorted(k for k in keys if before[k] is None)
    if unknown:
        module.fail_json(
            msg=f"{where}: unknown directives (CONFIG GET returns nothing): {', '.join(unknown)}; "
            "nothing was set",
            before=before,
        )
    return node, before


def _read_conf_file(module, where, conf_file):
    """The node's conf file's directives."""
    try:
        with open(conf_file, encoding="utf-8") as handle:
            return parse_conf(handle.read())
    except OSError as exc:
        module.fail_json(msg=f"{where}: cannot read {conf_file}: {exc}")


def _refuse_drift(module, where, expect, before, conf_file, in_file):
    """Fail, naming each value and what the file says, when the node does not run ``expect``."""
    not_running = differing(expect, before)
    if not_running:
        module.fail_json(
            msg=f"{where}: the node does not run the expected values: "
            + ", ".join(
                f"{k}={expect[k]} (runs {before[k]}"
                + (f", {conf_file} says {in_file.get(k)!r})" if in_file is not None else ")")
                for k in not_running
            ),
            before=before,
            drift={k: {"expected": str(expect[k]), "running": before[k]} for k in not_running},
        )


def _set_live(module, node, where, changes, keys, result):
    """One atomic CONFIG SET of ``changes``, then what the node runs, each change read back."""
    try:
        node.raw(*config_set_args(changes))
        after = node.config_get(keys)
    except Exception as exc:
        module.fail_json(
            msg=f"{where}: CONFIG SET {', '.join(changes)} refused: {error_text(exc)} "
            "(CONFIG SET is atomic: nothing was set)",
            **result,
        )
    not_taken = differing(changes, after)
    if not_taken:
        module.fail_json(
            msg=f"{where}: the node did not take: "
            + ", ".join(f"{k}={changes[k]} (runs {after[k]})" for k in not_taken),
            after=after,
            **result,
        )
    return after


def _file_mismatch(module, where, conf_file, in_file, keys, after, result):
    """Key -> {file, running} where the conf file disagrees; fails unless in check mode."""
    mismatch = {
        k: {"file": in_file.get(k), "running": after[k]}
        for k in keys
        if not same_value(in_file.get(k, ""), after[k])
    }
    if mismatch and not module.check_mode:
        module.fail_json(
            msg=f"{where}: {conf_file} disagrees with the running server: "
            + ", ".join(f"{k} file={v['file']!r} running={v['running']!r}"
                        for k, v in sorted(mismatch.items())),
            **{**result, "file_mismatch": mismatch},
        )
    return mismatch


def main():
    module = AnsibleModule(
        argument_spec=redis_argument_spec(
            host=dict(type="str", default="127.0.0.1"),
            port=dict(type="int", required=True),
            settings=dict(type="dict", default={}),
            expect=dict(type="dict", default={}),
            restart_only=dict(type="list", elements="str", default=[]),
            conf_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    settings = {str(k).lower(): v for k, v in p["settings"].items()}
    expect = {str(k).lower(): v for k, v in p["expect"].items()}
    where = f"{p['host']}:{p['port']}"
    _refuse_what_cannot_be_set(module, where, settings, expect, p["restart_only"])

    keys = sorted(set(settings) | set(expect))
    node, before = _read_running(module, where, keys)
    in_file = _read_conf_file(module, where, p["conf_file"]) if p["conf_file"] else None
    _refuse_drift(module, where, expect, before, p["conf_file"], in_file)
    changed_keys = differing(settings, before)
    result = dict(before=before, changed_keys=changed_keys)
    after = dict(before)
    if changed_keys and not module.check_mode:
        after = _set_live(module, node, where, {k: settings[k] for k in changed_keys}, keys,
                          result)
    elif changed_keys:
        after.update({k: str(settings[k]) for k in changed_keys})
    result.update(after=after, diff={"before": before, "after": after})

    if in_file is not None:
        result["file_mismatch"] = _file_mismatch(module, where, p["conf_file"], in_file, keys,
                                                 after, result)
    node.close()
    module.exit_json(changed=bool(changed_keys), **result)


if __name__ == "__main__":
    main()
