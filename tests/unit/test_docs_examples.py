"""Examples in the docs stay valid against the code (regression: plan-file example drifted)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from planner.plan import validate_plan

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_plan_file_doc_example_is_a_valid_plan() -> None:
    text = (DOCS / "plan-file.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    validate_plan(yaml.safe_load(block.group(1)), known_hosts=["cass1", "cass2", "cass3"])
