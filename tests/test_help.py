"""``train_rl.py --help`` answers without loading torch or SB3, names every command in its usage line, and
shows RunConfig's real defaults and docs (read from the dataclass, which imports no torch); a progress bar shows
on a terminal by default."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import train_rl
from experiments.cli import train as train_cli

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "stable_baselines3", "rliable", "agents")
TORCH_FREE = {"policies", "envs.rules"}
"""what help may load of :mod:`policies`: the package (its names load on first use) and the kinds of rule"""


def _loaded_after(argv: list[str]) -> tuple[str, list[str]]:
    """stdout of ``train_rl.py ARGV`` run in a fresh interpreter, and the heavy modules it loaded (any of
    :data:`HEAVY`, and of :mod:`policies` anything beyond :data:`TORCH_FREE`)."""
    code = ("import sys, runpy\nsys.argv = ['train_rl.py', *sys.argv[1:]]\ntry:\n"
            "    runpy.run_path('train_rl.py', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            f"print(sorted(({{m.partition('.')[0] for m in sys.modules}} & {set(HEAVY)!r})"
            f" | ({{m for m in sys.modules if m.partition('.')[0] == 'policies'}} - {TORCH_FREE!r})))")
    result = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=60)
    *output, loaded = result.stdout.rstrip("\n").split("\n")
    return "\n".join(output), ast.literal_eval(loaded)


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["study", "--help"], ["report", "--help"],
                                  ["evaluate", "--help"], ["list", "--help"], ["plot", "--help"],
                                  ["inspect", "--help"]])
def test_help_loads_neither_torch_nor_sb3(argv):
    output, loaded = _loaded_after(argv)
    assert "usage: train_rl.py" in output
    assert loaded == []


def test_usage_line_names_every_command():
    output, _ = _loaded_after(["--help"])
    usage = output.split("\n\n")[0]
    assert usage.startswith("usage: train_rl.py [train]")
    for name in ("train", "study", "report", "evaluate", "list", "plot", "inspect", "tune", "lm"):
        assert name in usage, name
    assert set(train_rl.COMMANDS) == {"train", "study", "report", "evaluate", "list", "plot", "inspect", "tune", "lm"}


def test_help_shows_the_real_defaults_and_docs_of_run_settings():
    """Each run setting's flag shows the field's own doc and default (mutation caught: a default changed in
    RunConfig but not in the help)."""
    from experiments.config import FIELDS, RunConfig, field_default
    from experiments.studies.report import DEFAULT_REPS

    helps = {action.dest: action for action in train_cli.make_parser(study_file=False)._actions}
    for name, _ in train_cli.FLAGS.values():
        assert helps[name].help.startswith(FIELDS[name].metadata["doc"]), name
        assert helps[name].help.endswith(f"(default: {field_default(FIELDS[name])})"), name
    assert FIELDS["n_envs"].metadata["doc"] == "parallel environment copies"
    assert f"(default: {RunConfig().n_envs})" in train_cli.make_parser().format_help()
    assert helps["reps"].default == DEFAULT_REPS


def test_registry_flags_are_checked_when_given():
    parser = train_cli.make_parser()
    assert parser.parse_args(["--algo", "vmpo", "--backbone", "lstm", "gtrxl"]).backbone == ["lstm", "gtrxl"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--backbone", "lstm", "transformer"])


@pytest.mark.parametrize("tty,flag,shown", [(True, [], True), (False, [], False), (False, ["--progress"], True)])
def test_progress_bar_on_a_terminal_by_default(tty, flag, shown, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    args = argparse.Namespace(progress=train_cli.make_parser().parse_args(flag).progress)
    assert train_cli.progress_bar(args) is shown
