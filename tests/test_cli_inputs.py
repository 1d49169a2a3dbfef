"""Bad command-line input of every kind ends a command with exit status 2 and one line naming the flag, before
anything is created (docs/validation.md): a `ConfigError` a command lets through, `--gym-packages` that swallows
`list`'s WHAT, `--hyperparams` without `--env`, an empty path, more threads than cores, a file where a run
directory goes, and a malformed `--env-kwargs` or empty `--env`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import train_rl
from experiments.config import ConfigError
from experiments.exits import run_command
from experiments.replay import load_agent
from experiments.rules import PathName, Threads, usable_cores
from experiments.run_dir import RunDirectory
from experiments.writable import check_output

TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--backbone", "mlp", "--n-envs", "2", "--threads", "1",
        "-n", "32", "--eval-freq", "0", "--checkpoint-freq", "0", "--n-eval-episodes", "2",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "n_eval_envs=2"]
RUN = "TMaze-v0__ppo-mlp__0"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run (32 steps) that the evaluate and inspect rows read."""
    log_dir = tmp_path_factory.mktemp("runs")
    assert train_rl.main([*TINY, "--log-dir", str(log_dir)]) == 0
    return log_dir / RUN


def _files(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    """Run `argv`: exit status 2 and one line on stderr holding each of `expected`."""
    capsys.readouterr()
    assert train_rl.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err
    return err


def test_a_config_error_that_a_command_lets_through_exits_2_on_one_line(capsys):
    def command(argv: list[str]) -> int:
        raise ConfigError("key='x': expected\nsomething")

    assert run_command(command, []) == 2
    assert capsys.readouterr().err == "error: key='x': expected something\n"


def test_list_refuses_gym_packages_that_are_no_module_names(capsys):
    _refused(["list", "envs", "--gym-packages", ""], capsys, "--gym-packages[0]=''", "a module name")


def test_list_refuses_a_what_swallowed_by_gym_packages(capsys):
    _refused(["list", "--gym-packages", "json", "envs"], capsys, "--gym-packages=['json', 'envs']",
             "list envs --gym-packages MODULE", "-- envs")
    capsys.readouterr()
    assert train_rl.main(["list", "--gym-packages", "json", "--", "learners"]) == 0
    assert "ppo" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["evaluate", "RUN", "-n", "1"], ["inspect", "RUN", "-n", "1", "--out", "OUT"]])
@pytest.mark.parametrize("value", ["nosuch", "", "none"])
def test_hyperparams_without_env_is_refused(run, command, value, capsys, tmp_path):
    before = _files(run.parent)
    argv = [{"RUN": str(run), "OUT": str(tmp_path / "out")}.get(word, word) for word in command]
    _refused([*argv, "--hyperparams", value], capsys, f"--hyperparams={value!r}: only with --env")
    assert _files(run.parent) == before
    assert not any(tmp_path.iterdir())


def test_hyperparams_without_env_is_refused_in_python(run):
    with pytest.raises(ConfigError, match="hyperparams='nosuch': only with env"):
        load_agent(run, hyperparams="nosuch")


@pytest.mark.parametrize(("argv", "flag"), [
    (["inspect", "RUN", "--out", ""], "--out"),
    (["evaluate", "RUN", "--record", ""], "--record"),
    (["evaluate", ""], "RUN_DIR_OR_MODEL"),
    (["inspect", ""], "RUN_DIR_OR_MODEL"),
])
def test_an_empty_path_is_refused(run, argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where an empty path would write
    before = _files(run.parent)
    _refused([str(run) if word == "RUN" else word for word in argv], capsys, f"{flag}='': expected a non-empty path")
    assert _files(run.parent) == before
    assert not any(tmp_path.iterdir())


def test_the_empty_output_path_is_refused_by_the_shared_rule():
    for directory in (False, True):
        with pytest.raises(ConfigError, match="--out='': expected a non-empty path"):
            check_output("--out", "", directory=directory)
    with pytest.raises(ConfigError, match="path='': expected a non-empty path"):
        load_agent("")
    PathName().check("--out", ".")


@pytest.mark.parametrize("command", ["train", "evaluate", "inspect"])
def test_more_threads_than_cores_are_refused(run, command, capsys, tmp_path):
    too_many = str(usable_cores() + 1)
    argv = {"train": [*TINY, "--log-dir", str(tmp_path / "runs")],
            "evaluate": ["evaluate", str(run), "-n", "1"],
            "inspect": ["inspect", str(run), "-n", "1", "--out", str(tmp_path / "out")]}[command]
    before = _files(run.parent)
    _refused([*argv, "--threads", too_many], capsys, f"threads={too_many}: expected",
             f"at most the cores this process may use ({usable_cores()})")
    assert _files(run.parent) == before
    assert not any(tmp_path.iterdir())


def test_the_thread_rule_takes_zero_to_the_cores():
    for good in (0, 1, usable_cores()):
        Threads().check("threads", good)
    for bad in (-1, usable_cores() + 1, 99999, 2**40, 1.5, True):
        with pytest.raises(ConfigError, match="at most the cores this process may use"):
            Threads().check("threads", bad)


@pytest.mark.parametrize("resume", [False, True])
def test_a_file_where_the_run_directory_goes_is_refused(resume, capsys, tmp_path):
    (tmp_path / RUN).write_text("a file\n")
    _refused([*TINY, "--log-dir", str(tmp_path), *(["--resume"] if resume else [])], capsys,
             f"run directory {str(tmp_path / RUN)!r} is a file", "--log-dir")
    assert os.listdir(tmp_path) == [RUN]
    assert (tmp_path / RUN).read_text() == "a file\n"
    with pytest.raises(ConfigError, match="is a file"), RunDirectory(tmp_path / RUN).lock():
        pass


@pytest.mark.parametrize("command", [["evaluate", "RUN", "-n", "1"], ["inspect", "RUN", "-n", "1", "--out", "OUT"],
                                     [*TINY, "--log-dir", "OUT"]])
def test_a_malformed_env_kwargs_names_the_flag(run, command, capsys, tmp_path):
    argv = [{"RUN": str(run), "OUT": str(tmp_path / "out")}.get(word, word) for word in command]
    _refused([*argv, "--env-kwargs", "foo"], capsys, "--env-kwargs: override 'foo' is not of the form")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["evaluate", "inspect"])
def test_an_empty_env_is_named_once(run, command, capsys):
    err = _refused([command, str(run), "-n", "1", "--env", ""], capsys, "--env='': expected a non-empty string")
    assert "env_id" not in err
    with pytest.raises(ConfigError, match="^env='': expected a non-empty string") as raised:
        load_agent(run, env="")
    assert "env_id" not in str(raised.value)
