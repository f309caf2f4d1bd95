"""Shared test set-up: make the repo's module_utils/ and library/ importable like Ansible does."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import ansible.module_utils
import pytest

REPO = Path(__file__).resolve().parent.parent

# Modules import their shared code as ansible.module_utils.<name>, as Ansible ships it.
if str(REPO / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / "module_utils"))
if str(REPO / "library") not in sys.path:
    sys.path.insert(0, str(REPO / "library"))


@pytest.fixture(autouse=True, scope="session")
def _driver_log_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The drivers' log (module_utils/kairos_driverlog.py) of every test goes to a temporary
    file, not to the default under the home directory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KAIROS_DRIVER_LOG", str(tmp_path_factory.mktemp("driver") / "driver.log"))
        yield
