"""Whole files written atomically, with a diff: what kairos_files and kairos_process share.

``files`` is a list of ``{path, content, mode}`` (the option FILES_ARG, documented once in
doc_fragments/kairos.py as ``kairos.files``): the files a rollout rendered on the control
host, written by one module run rather than a template task per file.
"""

from __future__ import annotations

import os
import stat
import tempfile

FILES_ARG = dict(
    files=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(
            path=dict(type="path", required=True),
            content=dict(type="str", required=True),
            mode=dict(type="str", default="0644"),
        ),
    )
)


def bad_modes(files):
    """Why some files[].mode is not octal, or '' when every one is."""
    bad = []
    for item in files:
        try:
            int(item["mode"], 8)
        except ValueError:
            bad.append(f"files[].mode {item['mode']!r} of {item['path']} is not octal")
    return "; ".join(bad)


def changes(files):
    """(files that differ in content or mode, the before/after diffs of their contents)."""
    differ, diff = [], []
    for item in files:
        try:
            with open(item["path"], encoding="utf-8") as handle:
                before = handle.read()
            mode = stat.S_IMODE(os.stat(item["path"]).st_mode)
        except FileNotFoundError:
            before, mode = None, None
        if before != item["content"] or mode != int(item["mode"], 8):
            differ.append(item)
        if before != item["content"]:
            diff.append({"before_header": item["path"], "after_header": item["path"],
                         "before": before or "", "after": item["content"]})
    return differ, diff


def write(item):
    """Replace the file atomically (a crash leaves the old or the new file, never half)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(item["path"]) or ".", prefix=".kairos-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(item["content"])
        os.chmod(tmp, int(item["mode"], 8))
        os.replace(tmp, item["path"])
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
