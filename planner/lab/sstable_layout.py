"""One table's SSTables saved on the local lab and put back before every run of an experiment.

A table's layout is state: how many SSTables a scan opens depends on the writes and the
compactions that came before, so two runs of the same configuration and mix differ by
which run preceded them (docs/calibration.md, "The layout is state"). bench/payoff.py
therefore starts every run from the same SSTables:

- :func:`save` snapshots the table on every node (``nodetool snapshot``) and keeps hard
  links to the snapshot's files in a directory of its own, outside Cassandra's, with
  ``layout.json`` (keyspace, table, each node's SSTables);
- :func:`restore` truncates the table (CQL, every replica), drops the snapshots the
  truncation took, links the saved files into a staging directory per node and imports
  them (``nodetool import``, which moves them into the table and invalidates the caches),
  then reads back each node's SSTable count (``nodetool tablestats``): a restore is done
  only when every node holds what was saved.

Hard links cost no copy and no space while the files are unchanged; Cassandra never writes
to an SSTable, so a saved layout stays intact while the table moves on. Lab only: it
finds each node's ``bin/nodetool`` and data directories under the lab directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner.errors import KairosError, ValidationError

#: The snapshot tag :func:`save` takes and clears again.
SNAPSHOT_TAG = "kairos-layout"
#: The record beside the saved files.
RECORD = "layout.json"
#: Files of a snapshot that are not SSTable components.
_NOT_SSTABLE = {"manifest.json", "schema.cql"}
NODETOOL_TIMEOUT = 600.0


@dataclass(frozen=True)
class LabNode:
    """A lab node: its name (the directory's), CQL address and directories."""

    name: str
    address: str
    home: Path
    data_dirs: tuple[Path, ...]

    def nodetool(self, *args: str, timeout: float = NODETOOL_TIMEOUT) -> str:
        """Run the node's ``bin/nodetool`` (the lab's, with its JMX port and login file)."""
        argv = [str(self.home / "bin" / "nodetool"), *args]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KairosError(f"{self.name}: nodetool {' '.join(args)}: {exc}") from None
        if proc.returncode != 0:
            # The message, not the JVM's stack frames under it.
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines()
                     if ln.strip() and not ln.lstrip().startswith("at ")]
            raise KairosError(f"{self.name}: nodetool {' '.join(args)} exited "
                              f"{proc.returncode}: {' | '.join(lines[:2])}")
        return proc.stdout

    def table_dir(self, keyspace: str, table: str) -> Path:
        """The table's live directory (``<data>/<keyspace>/<table>-<id>``): the newest, as a
        table dropped and created again leaves its old directory behind."""
        found = [d for data in self.data_dirs for d in (data / keyspace).glob(f"{table}-*")
                 if d.is_dir()]
        if not found:
            raise KairosError(f"{self.name}: no directory of {keyspace}.{table} under "
                              f"{', '.join(map(str, self.data_dirs))}")
        return max(found, key=lambda d: d.stat().st_mtime)


def lab_nodes(lab_dir: str | Path, hosts: Sequence[str]) -> list[LabNode]:
    """The lab nodes serving ``hosts`` (CQL addresses), from each node's cassandra.yaml.

    Raises
    ------
    ValidationError
        No node of the lab directory listens on one of ``hosts``.
    """
    import yaml

    root = Path(lab_dir)
    by_address: dict[str, LabNode] = {}
    for conf in sorted(root.glob("*/conf/cassandra.yaml")):
        home = conf.parent.parent
        doc = yaml.safe_load(conf.read_text()) or {}
        address = str(doc.get("rpc_address") or doc.get("listen_address") or "")
        dirs = tuple(Path(d) for d in doc.get("data_file_directories") or [home / "data" / "data"])
        by_address[address] = LabNode(home.name, address, home, dirs)
    missing = [h for h in hosts if h not in by_address]
    if missing:
        raise ValidationError(f"--lab-dir: {root}: no node listens on {', '.join(missing)} "
                              f"(found {', '.join(sorted(by_address)) or 'none'})")
    return [by_address[h] for h in hosts]


def sstable_count(tablestats: str) -> int:
    """``SSTable count`` from ``nodetool tablestats <ks>.<table>`` output."""
    m = re.search(r"^\s*SSTable count:\s*(\d+)\s*$", tablestats, re.MULTILINE)
    if m is None:
        raise KairosError("nodetool tablestats printed no 'SSTable count'")
    return int(m.group(1))


def _listing(node: LabNode, keyspace: str, table: str) -> str:
    """The table's data files on ``node``, with their sizes and ages: what an unexpected
    SSTable count is made of (a run stopped on one once; its cause is not known)."""
    try:
        files = sorted(node.table_dir(keyspace, table).glob("*-Data.db"))
        now = datetime.now(UTC).timestamp()
        return ", ".join(f"{f.name} ({f.stat().st_size} B, {now - f.stat().st_mtime:.0f} s old)"
                         for f in files) or "no data file"
    except (OSError, KairosError) as exc:
        return f"(cannot list the table's files: {exc})"


def _components(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in _NOT_SSTABLE)


def _data_files(files: Sequence[Path]) -> int:
    return sum(1 for p in files if p.name.endswith("-Data.db"))


def save(nodes: Sequence[LabNode], *, keyspace: str, table: str, dest: str | Path,
         log: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Save the table's SSTables on every node into ``dest`` (which must not hold a layout);
    the record written to ``dest``/layout.json."""
    out = Path(dest)
    if (out / RECORD).exists():
        raise ValidationError(f"--save-layout: {out} already holds a layout; remove it first")
    record: dict[str, Any] = {"keyspace": keyspace, "table": table, "nodes": {},
                              "saved_at": datetime.now(UTC).isoformat(timespec="seconds")}
    for node in nodes:
        node.nodetool("snapshot", "-t", SNAPSHOT_TAG, "-kt", f"{keyspace}.{table}")
        try:
            snap = node.table_dir(keyspace, table) / "snapshots" / SNAPSHOT_TAG
            files = _components(snap)
            target = out / node.name
            target.mkdir(parents=True, exist_ok=True)
            for f in files:
                os.link(f, target / f.name)
            count, size = _data_files(files), sum(f.stat().st_size for f in files)
        except OSError as exc:
            raise KairosError(f"{node.name}: cannot keep the snapshot's files in {out}: "
                              f"{exc}") from None
        finally:
            node.nodetool("clearsnapshot", "-t", SNAPSHOT_TAG, "--", keyspace)
        record["nodes"][node.name] = {"address": node.address, "sstables": count, "bytes": size}
        log(f"{node.name}: saved {count} SSTables ({size / 2**20:,.0f} MiB) of {keyspace}.{table}")
    (out / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


def read_record(src: str | Path, *, keyspace: str, table: str) -> dict[str, Any]:
    """The saved layout's record, checked against the table it is to restore."""
    path = Path(src) / RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValidationError(f"--layout: {path}: no saved layout ({exc}); save one with "
                              "--save-layout") from None
    if (record.get("keyspace"), record.get("table")) != (keyspace, table):
        raise ValidationError(f"--layout: {path}: saved from {record.get('keyspace')}."
                              f"{record.get('table')}, not {keyspace}.{table}")
    return dict(record)


def restore(nodes: Sequence[LabNode], *, keyspace: str, table: str, src: str | Path,
            truncate: Callable[[str], None],
            log: Callable[[str], None] = lambda msg: None) -> dict[str, int]:
    """Put the saved SSTables back in place of the table's; each node's SSTable count, read
    back. ``truncate(cql)`` runs the TRUNCATE (every replica must be up).

    Raises
    ------
    KairosError
        A node refused a step, or holds another number of SSTables than was saved.
    """
    root = Path(src).resolve()  # the node resolves the import's path, not this process
    record = read_record(root, keyspace=keyspace, table=table)
    saved: Mapping[str, Any] = record["nodes"]
    unknown = [n.name for n in nodes if n.name not in saved]
    if unknown:
        raise ValidationError(f"--layout: {root / RECORD}: nothing saved for {', '.join(unknown)}")
    truncate(f"TRUNCATE {keyspace}.{table}")
    counts: dict[str, int] = {}
    for node in nodes:
        snaps = node.table_dir(keyspace, table) / "snapshots"
        for snap in sorted(snaps.glob("truncated-*")) if snaps.is_dir() else []:
            node.nodetool("clearsnapshot", "-t", snap.name, "--", keyspace)
        # Staged as <keyspace>/<table>, the shape of a data directory: the only shape this
        # restore was tried with on the lab (tests/integration/test_sstable_layout.py).
        stage = root / ".stage" / node.name / keyspace / table
        shutil.rmtree(stage, ignore_errors=True)
        try:
            stage.mkdir(parents=True)
            for f in _components(root / node.name):
                os.link(f, stage / f.name)
        except OSError as exc:
            raise KairosError(f"{node.name}: cannot stage the saved files in {stage}: "
                              f"{exc}") from None
        # Anything the table holds after the TRUNCATE would stay beside the saved layout.
        held = sstable_count(node.nodetool("tablestats", f"{keyspace}.{table}"))
        if held:
            raise KairosError(f"{node.name}: {held} SSTable(s) of {keyspace}.{table} left after "
                              f"the TRUNCATE, before the import: {_listing(node, keyspace, table)}")
        node.nodetool("import", keyspace, table, str(stage))
        left = list(stage.iterdir())
        if left:
            raise KairosError(f"{node.name}: nodetool import left {len(left)} file(s) in {stage}")
        counts[node.name] = sstable_count(node.nodetool("tablestats", f"{keyspace}.{table}"))
        if counts[node.name] != saved[node.name]["sstables"]:
            raise KairosError(f"{node.name}: {counts[node.name]} SSTables of {keyspace}.{table} "
                              f"after the restore, {saved[node.name]['sstables']} saved: "
                              f"{_listing(node, keyspace, table)}")
    shutil.rmtree(root / ".stage", ignore_errors=True)
    log("restored the saved layout: " + ", ".join(f"{k} {v} SSTables" for k, v in counts.items()))
    return counts
