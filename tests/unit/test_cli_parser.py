"""The console script builds the parser of the command it runs, and only that one."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from planner.cli import COMMAND_MODULES, build_parser, command_module, main


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The top-level parser's sub-command parsers, by name."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_a_command_alone_gets_the_same_parser_as_among_all(module: str) -> None:
    command = module.replace("_", "-")
    assert command_module(command) == module
    alone = _subparsers(build_parser(command))
    assert list(alone) == [command]
    assert alone[command].format_help() == _subparsers(build_parser())[command].format_help()


def test_no_command_or_an_unknown_one_gets_every_command() -> None:
    every = [m.replace("_", "-") for m in COMMAND_MODULES]
    assert list(_subparsers(build_parser())) == every
    assert list(_subparsers(build_parser("--help"))) == every
    assert list(_subparsers(build_parser("no-such-command"))) == every
    assert command_module("no-such-command") is None


def test_an_unknown_command_is_refused_naming_the_commands(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in err and "validate-plan" in err


def test_no_command_prints_every_command(capsys: pytest.CaptureFixture) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(m.replace("_", "-") in out for m in COMMAND_MODULES)


def test_explain_does_not_import_the_planning_pipeline() -> None:
    """The point of building one command's parser: ``kairos explain`` (and the executor's
    bookkeeping commands) no longer import the planner's search and models to start."""
    code = ("import sys; from planner.cli import build_parser; build_parser('explain'); "
            "print('planner.planning.pipeline' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip() == "False"
