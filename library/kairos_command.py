#!/usr/bin/python
"""Run a kairos planner command inside Ansible's Python on the control host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_command
short_description: Run a kairos command in Ansible's own Python on the control host
description:
  - Runs C(kairos) with I(argv) as the console script would (the same output, errors and
    exit codes), but inside this module's interpreter instead of a new process. The
    function run is the installed C(kairos) console script's entry point, found through
    the package metadata, so the module never imports the planner's modules by name.
  - Under Mitogen's strategy (ansible.cfg) that interpreter lives for the whole run, so
    the planner is imported once; a record or a guard took 0.2-0.4 s on the busy lab
    instead of 1.3-3.9 s as a process (bench/rollout.py, docs/executor.md).
  - Returns rc, stdout and stderr as M(ansible.builtin.command) does, and fails when rc is
    not 0 (judge it yourself with C(failed_when)).
  - Runs on the control host (delegated to localhost), whose Ansible Python has Kairos
    installed; elsewhere it fails, naming the interpreter.
  - Meant for the rollout's short commands, run per batch or per node (record, guard,
    preflight, rescue), and change_settings.yml's decision (adhoc). A plan's decision
    (prepare) and the long planning and collection runs keep their own process (the
    C(kairos_cli) variable, which may name another planner).
options:
  argv:
    description: The kairos arguments, without the program name (e.g. C([rollout, guard, ...])).
    type: list
    elements: str
    required: true
extends_documentation_fragment: [kairos, kairos.no_check]
"""

EXAMPLES = r"""
- name: Refuse the batch if the nodes down now leave a replica set below the CL
  kairos_command:
    argv: [rollout, guard, --rollout, "{{ kairos_rollout_file }}", --ring, live-ring.json,
           --down, "", --batch, cass1]
  delegate_to: localhost
  changed_when: false
"""

RETURN = r"""
rc:
  description: The command's exit code (2 for a refusal or bad input, as the CLI).
  returned: always
  type: int
stdout:
  description: What the command printed (JSON for the rollout commands), trailing newline stripped.
  returned: always
  type: str
stderr:
  description: Its errors; a crash's traceback, as the console script would print it.
  returned: always
  type: str
cmd:
  description: The command as it would be typed.
  returned: always
  type: list
"""

import contextlib
import io
import sys
import traceback
from importlib.metadata import entry_points

from ansible.module_utils.basic import AnsibleModule


def console_script():
    """The ``kairos`` console script's function, found through the installed package's
    metadata as the script itself finds it: the module depends on the published command,
    not on the planner's modules (docs/architecture.md, "Layers").

    Raises ImportError when Kairos is not installed in this Python.
    """
    found = entry_points(group="console_scripts", name="kairos")
    if not found:
        raise ImportError("no 'kairos' console script is installed")
    return next(iter(found)).load()


def run_kairos(kairos_main, argv):
    """(rc, stdout, stderr) of ``kairos argv``, ``kairos_main`` being the console script's
    function (:func:`console_script`)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = kairos_main(argv)
        except SystemExit as exc:  # argparse's usage errors and --help
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # reported as the console script would: a traceback, rc 1
            traceback.print_exc()
            rc = 1
    return rc, out.getvalue().rstrip("\r\n"), err.getvalue().rstrip("\r\n")


def main():
    module = AnsibleModule(
        argument_spec=dict(argv=dict(type="list", elements="str", required=True)),
        supports_check_mode=False,
    )
    argv = module.params["argv"]
    try:
        kairos_main = console_script()
    except ImportError as exc:
        module.fail_json(
            msg=f"the Kairos planner cannot be imported by {sys.executable} ({exc}): run "
            "kairos_command on the control host, in the Python Kairos is installed in"
        )
    rc, stdout, stderr = run_kairos(kairos_main, argv)
    result = dict(rc=rc, stdout=stdout, stderr=stderr, cmd=["kairos", *argv])
    if rc != 0:
        module.fail_json(msg=stderr or f"kairos {' '.join(argv[:2])} exited with {rc}", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
