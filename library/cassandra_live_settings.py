#!/usr/bin/python
"""Apply cassandra.yaml settings that Cassandra can change while it runs, via JMX."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_live_settings
short_description: Set live-changeable Cassandra settings through Jolokia or nodetool
description:
  - For each setting, reads the running value with nodetool, and when it differs sets it
    (C(setconcurrency), C(setconcurrentcompactors), C(setcompactionthroughput),
    C(setcachecapacity), once for the key and row caches, keeping the counter cache and
    any cache not asked), then reads it again and fails if the node did not take it.
  - With I(jolokia_config) and the node's Jolokia agent listening, the same reads and sets
    are the same MBean calls made over HTTP, with no nodetool JVM per call (about 11 s of
    wall time each on the loaded lab), and each cache is set on its own.
  - The configuration file is the role's business (cassandra_settings_overrides); this
    module changes only the running node, so that a restart keeps what the file says.
extends_documentation_fragment: [kairos, kairos.check_diff, kairos_nodetool,
                                 kairos_nodetool.jolokia]
options:
  settings:
    description: >-
      cassandra.yaml keys and values. Supported: concurrent_reads, concurrent_writes,
      concurrent_counter_writes, concurrent_compactors, compaction_throughput (e.g. 64MiB/s),
      row_cache_size (e.g. 256MiB; only between non-zero sizes, enabling the row cache
      needs a restart), key_cache_size (e.g. 100MiB).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: More read threads, live
  cassandra_live_settings:
    nodetool: /srv/lab/cass1/bin/nodetool
    settings: {concurrent_reads: 64, compaction_throughput: 128MiB/s}
"""

RETURN = r"""
before:
  description: Running values before, as integers (MiB/s for compaction_throughput).
  returned: always
  type: dict
after:
  description: Running values read back after setting them (in check mode, what they would be).
  returned: always
  type: dict
changed_keys:
  description: Settings that were (or in check mode would be) changed.
  returned: always
  type: list
  elements: str
via:
  description: C(jolokia) or C(nodetool), what carried the calls.
  returned: always
  type: str
"""

from ansible.module_utils.kairos_jolokia import (
    JolokiaError,
    listening_agent,
    read_live_settings,
    set_live_setting,
)
from ansible.module_utils.kairos_nodetool import (
    CACHE_CAPACITIES,
    LIVE_SETTERS,
    nodetool_module,
    run_nodetool,
    set_cache_capacities,
)


class Nodetool:
    """The reads and sets through nodetool, one JVM per call."""

    via = "nodetool"

    def __init__(self, module, nodetool):
        self.module, self.nodetool = module, nodetool
        self.outputs = {}  # key -> the output it was last read from (setcachecapacity needs it)

    def read(self, keys):
        values, self.outputs = read(self.module, self.nodetool, keys)
        return values

    def set(self, wanted):
        caches = {k: v for k, v in wanted.items() if k in CACHE_CAPACITIES}
        if caches:  # one setcachecapacity for both caches (it sets all three)
            run_nodetool(self.module, self.nodetool,
                         set_cache_capacities(caches, self.outputs[next(iter(caches))]))
        for key, value in wanted.items():
            if key not in caches:
                run_nodetool(self.module, self.nodetool,
                             LIVE_SETTERS[key][2](value, self.outputs[key]))


class Jolokia:
    """The same MBean calls over HTTP through the node's agent."""

    via = "jolokia"

    def __init__(self, module, config):
        self.module, self.config = module, config

    def read(self, keys):
        try:
            return read_live_settings(self.config, keys)
        except JolokiaError as exc:
            self.module.fail_json(msg=f"cannot read the live settings through Jolokia: {exc}")

    def set(self, wanted):
        for key, value in wanted.items():
            try:
                set_live_setting(self.config, key, value)
            except JolokiaError as exc:
                self.module.fail_json(msg=f"cannot set {key}={value} through Jolokia: {exc}")


def read(module, nodetool, keys):
    """(key -> running value, key -> the nodetool output it was read from); one nodetool
    call per distinct command (the key and row caches share nodetool info)."""
    values, outputs, by_args = {}, {}, {}
    for key in keys:
        get_args, parse, _, _ = LIVE_SETTERS[key]
        command = tuple(get_args)
        if command not in by_args:
            _, by_args[command], _, _ = run_nodetool(module, nodetool, get_args)
        outputs[key] = by_args[command]
        try:
            values[key] = parse(outputs[key])
        except (KeyError, ValueError) as exc:
            module.fail_json(msg=f"cannot read {key} from nodetool {' '.join(get_args)}: {exc}")
    return values, outputs


def main():
    module = nodetool_module(settings=dict(type="dict", required=True),
                             jolokia_config=dict(type="path", default=""))
    nodetool = module.params["nodetool"]
    unknown = sorted(set(module.params["settings"]) - set(LIVE_SETTERS))
    if unknown:
        module.fail_json(
            msg=f"cannot change live: {', '.join(unknown)} "
            f"(live-changeable: {', '.join(sorted(LIVE_SETTERS))})"
        )
    wanted = {}
    for key, value in module.params["settings"].items():
        try:
            wanted[key] = LIVE_SETTERS[key][3](value)
        except (TypeError, ValueError) as exc:
            module.fail_json(msg=f"{key}: bad value {value!r}: {exc}")
        if wanted[key] <= 0:
            module.fail_json(msg=f"{key}: must be positive, got {value!r}")

    agent = listening_agent(module, module.params["jolokia_config"])
    node = Nodetool(module, nodetool) if agent is None else Jolokia(module, agent)
    before = node.read(wanted)
    changed_keys = sorted(k for k in wanted if before[k] != wanted[k])
    diff = {"before": before, "after": {**before, **{k: wanted[k] for k in changed_keys}}}
    if not changed_keys or module.check_mode:
        module.exit_json(
            changed=bool(changed_keys),
            before=before,
            after=diff["after"],
            changed_keys=changed_keys,
            diff=diff,
            via=node.via,
        )
    node.set({k: wanted[k] for k in changed_keys})
    after = node.read(wanted)
    refused = [k for k in changed_keys if after[k] != wanted[k]]
    if refused:
        module.fail_json(
            msg="the node did not take: "
            + ", ".join(f"{k}={wanted[k]} (is {after[k]})" for k in refused),
            before=before,
            after=after,
            via=node.via,
        )
    module.exit_json(
        changed=True,
        before=before,
        after=after,
        changed_keys=changed_keys,
        diff={"before": before, "after": after},
        via=node.via,
    )


if __name__ == "__main__":
    main()
