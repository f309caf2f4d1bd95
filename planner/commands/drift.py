"""``kairos drift``: does each node run what Kairos recorded applied? (docs/drift.md)

Exit status: 0 every compared value agrees, 1 drift (or a node that could not be read),
2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import inputs

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
    p.add_argument("--plan", required=True, help="the plan file (its engine and cluster)")
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


def run(args: argparse.Namespace) -> int:
    from planner.executor import drift, rollout
    from planner.plan import load_plan

    plan = load_plan(args.plan)
    state = rollout.load_state(args.state or rollout.state_path_for(args.plan))
    tables = ([t for t in args.tables.split(",") if t] if args.tables
              else sorted({t for s in plan.steps for t in s.tables}))
    keys = drift.rendered_keys(plan, state)
    observed, errors, names = _observed(args, plan.engine, keys, tables)
    expected = drift.expected_values(plan, state, names)
    findings = drift.compare(expected, observed)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    report = drift.report(expected, findings, cluster=plan.cluster, now=now, errors=errors)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    bad = drift.drifted(findings)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        _print_text(args, plan, expected, findings, errors)
    return 1 if bad or errors else 0


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
