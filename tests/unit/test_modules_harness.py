"""Run a custom module's main() as Ansible does, and hold every module's docs to its arguments.

:func:`run_module` hands the module its arguments through AnsibleModule (check and diff
mode too) and returns what the module passed to exit_json, or raises :class:`ModuleFailed`
with what it passed to fail_json. Both are the values before Ansible masks no_log values
in its output, so a test sees a secret the module would put in its result.

The tests here hold for every module in library/: the rendered documentation (with its
doc fragments, doc_fragments/) states exactly the options, types, defaults and check-mode
support of the module's argument_spec.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.loader import fragment_loader
from ansible.utils.plugin_docs import get_docstring

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "library"
MODULES = sorted(p.stem for p in LIBRARY.glob("*.py"))
FIXTURES = Path(__file__).parent / "fixtures"
#: The password every module test passes; it must never come back in a result.
SECRET = "Kair0s-s3cret"


class ModuleExited(Exception):
    """The module called exit_json; ``result`` holds its keyword arguments."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("exit_json")
        self.result = result


class ModuleFailed(Exception):
    """The module called fail_json; the exception's text is its ``msg``."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


def _exit_json(_module: Any, **result: Any) -> None:
    raise ModuleExited(result)


def _fail_json(_module: Any, msg: str, **result: Any) -> None:
    raise ModuleFailed({"msg": msg, **result})


def run_module(
    name: str, args: dict[str, Any], *, check_mode: bool = False, diff: bool = False
) -> dict[str, Any]:
    """Run ``library/<name>.py``'s main() with ``args``; return its exit_json result.

    Raises
    ------
    ModuleFailed
        The module (or AnsibleModule's argument validation) called fail_json.
    """
    module = importlib.import_module(name)
    if Path(module.__file__ or "").parent != LIBRARY:
        # A module_utils file of the same name came first on sys.path (a bench script
        # imported by a test puts module_utils/ there): the test must run library's.
        raise AssertionError(f"{name} was imported from {module.__file__}, not {LIBRARY}")
    wrapped = {**args, "_ansible_check_mode": check_mode, "_ansible_diff": diff}
    with (
        patch_module_args(wrapped),
        mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json),
    ):
        try:
            module.main()
        except ModuleExited as done:
            return done.result
    raise AssertionError(f"{name}.main() returned without exit_json or fail_json")


def refused(name: str, args: dict[str, Any], message: str) -> dict[str, Any]:
    """Run module ``name``, which must fail with ``message`` (a regex); return its result."""
    with pytest.raises(ModuleFailed, match=message) as failed:
        run_module(name, args)
    return failed.value.result


def assert_no_secret(*values: Any) -> None:
    """Fail when :data:`SECRET` appears anywhere in ``values`` (results, messages, argv)."""
    text = json.dumps(values, default=str)
    assert SECRET not in text


# ------------------------------------------------------------------ docs vs spec
class _SpecRead(Exception):
    pass


def argument_spec_of(name: str) -> tuple[dict[str, Any], bool]:
    """(argument_spec, supports_check_mode) that ``name``'s main() builds AnsibleModule with."""
    seen: dict[str, Any] = {}

    def init(_self: Any, argument_spec: dict[str, Any], **kwargs: Any) -> None:
        seen.update(spec=argument_spec, check=kwargs.get("supports_check_mode", False))
        raise _SpecRead

    module = importlib.import_module(name)
    with mock.patch.object(basic.AnsibleModule, "__init__", init), pytest.raises(_SpecRead):
        module.main()
    return seen["spec"], seen["check"]


def rendered_doc(name: str) -> dict[str, Any]:
    """DOCUMENTATION as ansible-doc renders it, doc fragments merged in."""
    fragment_loader.add_directory(str(REPO / "doc_fragments"))
    doc, _, _, _ = get_docstring(str(LIBRARY / f"{name}.py"), fragment_loader, is_module=True)
    return doc


@pytest.mark.parametrize("name", MODULES)
def test_documented_options_are_the_argument_spec(name: str) -> None:
    spec, supports_check_mode = argument_spec_of(name)
    doc = rendered_doc(name)
    assert sorted(doc["options"]) == sorted(spec)
    for option, arg in spec.items():
        documented = doc["options"][option]
        assert documented.get("description"), f"{name}: {option} has no description"
        for key, default in (("type", "str"), ("required", False), ("default", None),
                             ("elements", None), ("choices", None)):
            assert documented.get(key, default) == arg.get(key, default), f"{name}: {option}.{key}"
    assert doc["short_description"] and doc["author"] == "Kairos"
    assert doc["attributes"]["check_mode"]["support"] == ("full" if supports_check_mode else "none")


@pytest.mark.parametrize("name", MODULES)
def test_passwords_are_no_log(name: str) -> None:
    spec, _ = argument_spec_of(name)
    for option, arg in spec.items():
        if "password" in option:
            assert arg.get("no_log") is True, f"{name}: {option} is not no_log"


def test_a_module_that_neither_exits_nor_fails_is_reported() -> None:
    with (
        mock.patch("kairos_lock.main", lambda: None),
        pytest.raises(AssertionError, match="without exit_json or fail_json"),
    ):
        run_module("kairos_lock", {"path": "/nonexistent/lock", "owner": "a"})
