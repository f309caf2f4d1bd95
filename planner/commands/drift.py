"""``kairos drift``: does each node run what Kairos recorded applied? (docs/drift.md)

Exit status: 0 every compared value agrees (or, with ``--adopted``, no plan is in force),
1 drift (or a node that could not be read), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import inputs
from planner.engines import ENGINES

OBSERVED_FILE = inputs.FileKind(what="observed values", max_bytes=inputs.STATE.max_bytes)


def register(subparsers: Any) -> None:
    """Add the ``drift`` sub-command."""
    p = subparsers.add_parser(
        "drift",
        help="compare what each node runs with the configuration recorded applied",
        description="Compose the plan's steps recorded applied in its state file, render "
        "them as the templates do, and compare each node's running values (Cassandra: "
        "system_views.settings and caches, the tables' compaction; Redis: CONFIG GET), and "
        "its rendered file when an --observed file carries it. Prints one line per drifted "
        "value; exits 1 on drift. Credentials as for `kairos collect`. See docs/drift.md.",
    )
    plan = p.add_mutually_exclusive_group(required=True)
    plan.add_argument("--plan", help="the plan file (its engine and cluster)")
    plan.add_argument("--adopted", metavar="STATE_DIR",
                      help="the plan in force: the one the autopilot adopted for --cluster and "
                      "--engine (STATE_DIR/<cluster>-<engine>-autopilot.json); when none is, "
                      "nothing is compared and the exit status is 0")
    p.add_argument("--cluster", help="with --adopted: the cluster whose plan is in force")
    p.add_argument("--engine", choices=ENGINES,
                   help="with --adopted: the engine whose plan is in force")
    p.add_argument("--state", help="rollout state file (default: <PLAN>.state.json)")
    p.add_argument("--hosts", help="comma-separated nodes to read: name=address[:port] "
                   "(names as in the plan; Cassandra port 9042, Redis 6379)")
    p.add_argument("--observed", metavar="FILE",
                   help="JSON {'nodes': {NODE: {'running': {...}, 'file': {...}, 'tables': "
                   "{...}}}} read elsewhere (playbooks/drift.yml), instead of --hosts")
    p.add_argument("--tables", help="Cassandra: keyspace.table,... whose compaction is read "
                   "(default: the tables of the plan's steps)")
    p.add_argument("--timeout", type=inputs.POSITIVE_DURATION, default=10.0,
                   help="per-node timeout in seconds (default 10)")
    p.add_argument("--all", action="store_true", help="print every compared value, not "
                   "only the drifted ones")
    p.add_argument("--json", action="store_true", help="print the drift report as JSON")
    p.add_argument("--report", metavar="FILE",
                   help="also write the report here (kairos metrics reads "
                   "<state dir>/drift-<cluster>-<engine>.json)")
    p.set_defaults(func=run)


def _observed(args: argparse.Namespace, engine: str, keys: list[str],
              tables: list[str]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    from planner.errors import ValidationError
    from planner.executor import drift, drift_read

    if args.observed:
        doc = inputs.load_json(args.observed, kind=OBSERVED_FILE)
        observed = drift.load_observed(doc, args.observed)
        errors = {str(k): str(v) for k, v in (doc.get("errors") or {}).items()}
        return observed, errors, sorted({*observed, *errors})
    if not args.hosts:
        raise ValidationError("drift: give --hosts (read the nodes) or --observed FILE")
    return drift_read.read_nodes(engine, args.hosts, keys, tables=tables, timeout=args.timeout)


def _plan_path(args: argparse.Namespace) -> Path | None:
    """The plan to compare against: --plan, or the one adopted in --adopted (None: none is)."""
    from planner.autopilot.decisions import adopted_plan
    from planner.errors import ValidationError

    if args.plan:
        if args.cluster or args.engine:
            raise ValidationError("--cluster and --engine go with --adopted "
                                  "(a --plan names its own cluster and engine)")
        return Path(args.plan)
    if not (args.cluster and args.engine):
        raise ValidationError("--adopted needs --cluster and --engine (whose plan is in force)")
    return adopted_plan(args.adopted, args.cluster, args.engine)


def _load(args: argparse.Namespace, path: Path) -> Any:
    """The plan at ``path``; an adopted one must be of --cluster and --engine."""
    from planner.autopilot.decisions import state_path
    from planner.errors import ValidationError
    from planner.plan import load_plan

    plan = load_plan(path)
    if args.adopted and (plan.cluster, plan.engine) != (args.cluster, args.engine):
        raise ValidationError(
            f"{state_path(args.adopted, args.cluster, args.engine)}: the adopted plan {path} "
            f"is of {plan.engine} cluster {plan.cluster!r}, not {args.engine} cluster "
            f"{args.cluster!r}")
    return plan


def run(args: argparse.Namespace) -> int:
    from planner.executor import drift, rollout

    path = _plan_path(args)
    if path is None:
        print(f"drift: no plan in force for {args.cluster} {args.engine} (none adopted in "
              f"{args.adopted}): nothing compared", file=sys.stderr if args.json else sys.stdout)
        return 0
    plan = _load(args, path)
    state = rollout.load_state(args.state or rollout.state_path_for(path))
    tables = ([t for t in args.tables.split(",") if t] if args.tables
              else sorted({t for s in plan.steps for t in s.tables}))
    keys = drift.rendered_keys(plan, state)
    observed, errors, names = _observed(args, plan.engine, keys, tables)
    expected = drift.expected_values(plan, state, names)
    findings = drift.compare(expected, observed)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    report = drift.report(expected, findings, cluster=plan.cluster, now=now, errors=errors)
    report["plan"] = str(path)
    if args.report:
        _write_report(Path(args.report), report)
    bad = drift.drifted(findings)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        if args.adopted:
            print(f"plan in force: {path}")
        _print_text(args, plan, expected, findings, errors)
    return 1 if bad or errors else 0


def _write_report(path: Path, report: dict[str, Any]) -> None:
    """Write the report whole or not at all (`kairos metrics` may read it meanwhile)."""
    from planner.errors import ValidationError

    if not path.parent.is_dir():
        raise ValidationError(f"--report {path}: directory {path.parent} does not exist")
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise ValidationError(f"--report {path}: {exc.strerror or exc}") from exc


def _print_text(args: argparse.Namespace, plan: Any, expected: Any, findings: Any,
                errors: dict[str, str]) -> None:
    from planner.executor import drift

    bad = drift.drifted(findings)
    through = expected.applied_through or "none (the plan's current_config)"
    print(f"{plan.engine} cluster '{plan.cluster}': {len(findings)} values compared on "
          f"{len(expected.settings)} nodes against the steps applied through {through}")
    if bad or args.all:
        print(drift.render_table(findings, all_rows=args.all))
    for node, error in sorted(errors.items()):
        print(f"{node}: not read: {error}", file=sys.stderr)
    print(f"drift: {len(bad)} value(s) on {len({f.node for f in bad})} node(s)" if bad
          else "no drift")
