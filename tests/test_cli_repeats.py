"""Options that take several values (in every command: ``train``, ``tune``, ``report``, ``plot``, ...) refuse a value
given twice, on one line with exit status 2, before anything is read or created; an option given twice adds its values
to the first ones. KEY=VALUE lists (``-p``, ``--env-kwargs``) are layers instead: a key given again overrides."""

from __future__ import annotations

import argparse

import pytest

import train_rl
from experiments.cli import evaluate, inspect, listing, plot, report, train
from experiments.cli.parser import Distinct
from experiments.studies import tune
from lm import workbench


@pytest.mark.parametrize("argv,message", [
    (["plot", "nowhere", "--group-by", "seed", "seed"], "argument --group-by: 'seed' is given twice"),
    (["plot", "nowhere", "--group-by", "seed", "--group-by", "backbone", "seed"], "'seed' is given twice"),
    (["list", "envs", "envs"], "argument WHAT: 'envs' is given twice"),
    (["list", "envs", "--gym-packages", "m", "m"], "argument --gym-packages: 'm' is given twice"),
    (["lm", "eval", "nowhere", "--memory-length", "8", "8"], "argument --memory-length: 8 is given twice"),
    (["lm", "eval", "nowhere", "--knn-weight", "0.5", ".5"], "argument --knn-weight: 0.5 is given twice"),
    (["lm", "eval", "nowhere", "--exit-threshold", "0.9", "--exit-threshold", "0.9"], "0.9 is given twice"),
    (["evaluate", "nowhere", "--env-wrapper", "W", "W"], "argument --env-wrapper: 'W' is given twice"),
    (["inspect", "nowhere", "--gym-packages", "m", "--gym-packages", "m"], "--gym-packages: 'm' is given twice"),
    (["--backbone", "gru", "gru"], "argument --backbone: 'gru' is given twice"),
    (["--seed", "0", "--seed", "0"], "argument --seed: 0 is given twice"),
    (["report", "nowhere", "--env", "Cart*", "Cart*"], "argument --env: 'Cart*' is given twice"),
    (["tune", "--space", "ppo", "ppo"], "argument --space: 'ppo' is given twice"),
])
def test_a_value_given_twice_is_refused_on_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        train_rl.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_an_option_given_twice_adds_its_values_in_order():
    options = plot.make_parser().parse_args(["r", "--group-by", "seed", "--group-by", "backbone", "task"])
    assert options.group_by == ["seed", "backbone", "task"]
    options = workbench.make_parser().parse_args(["eval", "r", "--memory-length", "8", "--memory-length", "16"])
    assert options.memory_length == [8, 16]
    assert workbench.make_parser().parse_args(["eval", "r"]).memory_length == []
    options = inspect.make_parser().parse_args(["r", "--env-kwargs", "length=5", "--env-kwargs", "length=6"])
    assert options.env_kwargs == ["length=5", "length=6"]  # the later one wins, as in train
    options = evaluate.make_parser().parse_args(["r", "--env-wrapper"])
    assert options.env_wrapper == [] and evaluate.make_parser().parse_args(["r"]).env_wrapper is None


REPEATABLE = {"enqueue": "each --enqueue is one trial", "paths": "plot reads a run once however many paths name it"}
"""options of several values where a value may come twice, and why"""


def parsers() -> list[argparse.ArgumentParser]:
    """The parsers of the commands whose options may take several values, subcommands included."""
    found = [evaluate.make_parser(), inspect.make_parser(), plot.make_parser(), listing.make_parser(),
             train.make_parser(), train.make_parser(study_file=True), report.make_parser(), tune.make_parser()]
    for parser in [workbench.make_parser()]:
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found += list(action.choices.values())
    return found


def test_every_option_of_several_values_refuses_repeats():
    for parser in parsers():
        for action in parser._actions:
            if action.dest in REPEATABLE or action.metavar == "KEY=VALUE":  # KEY=VALUE: layers of settings
                continue
            if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
                assert isinstance(action, Distinct), (parser.prog, action.dest)
