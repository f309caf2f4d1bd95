"""``kairos tune``: the best static configuration for one workload mix (static tuner)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner import inputs
from planner.engines import ENGINES
from planner.errors import ValidationError


def register(subparsers: Any) -> None:
    """Add the ``tune`` sub-command."""
    p = subparsers.add_parser(
        "tune",
        help="rank candidate configurations for a workload mix",
        description="Predict every candidate configuration's throughput for one operation "
        "mix with a performance model (the shipped prior unless --model is given) and print "
        "them best first.",
    )
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument(
        "--mix",
        required=True,
        help="class fractions, e.g. read=0.8,update=0.2 (missing classes are 0)",
    )
    p.add_argument("--model", metavar="MODEL.json", help="performance model (default: prior)")
    p.add_argument(
        "--keys", help="comma-separated parameters to vary (default: the space's grid keys)"
    )
    p.add_argument(
        "--current", metavar="JSON|FILE",
        help="current configuration (ties keep it): a JSON object, or a YAML/JSON file",
    )
    p.add_argument("--top", type=inputs.COUNT, default=10, help="rows to print (default 10)")
    p.set_defaults(func=run)


def parse_mix(text: str) -> dict[str, float]:
    """``"read=0.8,update=0.2"`` -> ``{"read": 0.8, "update": 0.2}``."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise ValidationError(f"mix: {part!r} is not class=fraction") from None
    return out


def _current(text: str | None, engine: str) -> dict[str, Any]:
    """``--current``: inline JSON when it starts with ``{``, else a file (planner.inputs)."""
    from planner.model.spaces import get_space, load_config

    if not text:
        return {}
    if not text.lstrip().startswith("{"):
        return load_config(text, engine=engine)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise ValidationError(f"--current: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValidationError("--current: expected a JSON object parameter -> value")
    try:
        return get_space(engine).normalize(data)
    except ValidationError as exc:
        raise ValidationError(f"--current: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Rank the candidates and print a table."""
    from planner.model.performance import load_default_model, load_model
    from planner.model.spaces import get_space
    from planner.model.tuner import rank_configs

    space = get_space(args.engine)
    model = load_model(args.model) if args.model else load_default_model(args.engine)
    keys = [k.strip() for k in args.keys.split(",")] if args.keys else None
    current = _current(args.current, args.engine)
    candidates = space.candidates(keys=keys, base=current)
    ranked = rank_configs(model, parse_mix(args.mix), space, candidates, current=current)
    varied = list(keys or space.grid_keys)
    print(f"model: {model.name} ({model.model_type}); mix: {args.mix}")
    if model.model_type == "prior":
        print(f"note: {model.info.get('label', 'prior model, not calibrated')}")
    print(f"{'rank':>4} {'ops/s':>10} {'± std':>9} {'changes':>7}  " + "  ".join(varied))
    for i, r in enumerate(ranked[: args.top], 1):
        values = "  ".join(str(r.config[k]) for k in varied)
        print(
            f"{i:>4} {r.prediction.ops_per_s:>10.0f} {r.prediction.std:>9.0f} "
            f"{r.changes:>7}  {values}"
        )
    return 0
