"""Shared test set-up: make the repo's module_utils/ and library/ importable like Ansible does."""

from __future__ import annotations

import sys
from pathlib import Path

import ansible.module_utils

REPO = Path(__file__).resolve().parent.parent

# Modules import their shared code as ansible.module_utils.<name>, as Ansible ships it.
if str(REPO / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / "module_utils"))
if str(REPO / "library") not in sys.path:
    sys.path.insert(0, str(REPO / "library"))
