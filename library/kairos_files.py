#!/usr/bin/python
"""Write whole files rendered on the control host, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_files
short_description: Write several whole files atomically, with a diff
description:
  - Writes each of I(files) whose content or mode differs, replacing it atomically (a
    crash leaves the old or the new file, never half of one), and reports which changed.
  - For a rollout that renders a node's configuration files on the control host - one
    module run for all of them, where a template task per file costs a module start each.
  - In check mode reports what would change; in diff mode the contents before and after.
extends_documentation_fragment: [kairos, kairos.check_diff, kairos.files]
"""

EXAMPLES = r"""
- name: Write a node's configuration
  kairos_files:
    files:
      - path: /srv/lab/cass1/conf/cassandra.yaml
        content: "{{ lookup('ansible.builtin.template', 'cassandra.yaml.j2') }}"
"""

RETURN = r"""
files_changed:
  description: Paths of I(files) whose content or mode changed (or would change).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_files import FILES_ARG, bad_modes, changes, write


def main():
    module = AnsibleModule(argument_spec=dict(**FILES_ARG), supports_check_mode=True)
    files = module.params["files"]
    bad = bad_modes(files)
    if bad:
        module.fail_json(msg=f"kairos_files: {bad}")
    differ, diff = changes(files)
    result = {"changed": bool(differ), "files_changed": [item["path"] for item in differ],
              "diff": diff}
    if not module.check_mode:
        for item in differ:
            try:
                write(item)
            except OSError as exc:
                module.fail_json(msg=f"cannot write {item['path']}: {exc}",
                                 files_changed=result["files_changed"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
