"""Where a run, a study and a tune study may be made: never inside a run, study or tune study directory they do not
belong to (at any depth), and a study's name never resolves to a run's directory. Each refusal exits 2 with one line
naming the option, the value and the owner, and creates nothing; resuming the same run or study, and a fresh folder,
still work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import train_rl
from experiments.config import ConfigError, build_config
from experiments.run_dir import TUNING, check_owner, owners_of
from experiments.training import train

RUN = "TMaze-v0__ppo-mlp__{}"
TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--backbone", "mlp", "-n", "64", "--threads", "1",
        "--eval-freq", "64", "--n-eval-episodes", "2", "--checkpoint-freq", "64",
        "-p", "n_envs=4", "n_eval_envs=2", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1",
        "ppo.segment_length=4", "mlp.hidden_size=8"]


def listing(root: Path) -> list[str]:
    """Every path under `root`, with each file's size and modification time."""
    return sorted(f"{p.relative_to(root)}" + ("" if p.is_dir() else f" {p.stat().st_size} {p.stat().st_mtime_ns}")
                  for p in root.rglob("*"))


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study `s` of two runs (seeds 0 and 1) under `root/`."""
    root = tmp_path_factory.mktemp("owned")
    assert train_rl.main([*TINY, "--log-dir", str(root), "--seed", "0", "1", "--study", "s", "--no-report"]) == 0
    return root


@pytest.fixture
def root(made: Path, tmp_path: Path) -> Path:
    """A copy of `made`, for a test to change."""
    shutil.copytree(made, tmp_path / "root")
    return tmp_path / "root"


def refused(root: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of `argv`, which must exit 2 and change nothing under `root`."""
    before = listing(root)
    capsys.readouterr()
    assert train_rl.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert listing(root) == before
    return err[-1]


@pytest.mark.parametrize(("where", "seeds", "owner", "marker"), [
    ("s", ["5"], "s", "study.yaml"),
    (f"s/{RUN.format(0)}", ["5"], f"s/{RUN.format(0)}", "run.lock"),
    (f"s/{RUN.format(0)}/deeper/still", ["5"], f"s/{RUN.format(0)}", "run.lock"),
    (f"s/{RUN.format(0)}", ["0", "1", "--study", "t"], f"s/{RUN.format(0)}", "run.lock"),
    ("s", ["0", "1", "--study", "u"], "s", "study.yaml"),
], ids=["run-in-study", "run-in-run", "run-deep-in-run", "study-in-run", "study-in-study"])
def test_a_run_or_study_inside_another_is_refused(made: Path, capsys: pytest.CaptureFixture[str], where: str,
                                                   seeds: list[str], owner: str, marker: str) -> None:
    line = refused(made, capsys, [*TINY, "--log-dir", str(made / where), "--seed", *seeds])
    assert line.startswith(f"error: --log-dir='{made / where}': ")
    assert f"directory '{made / owner}' ({marker})" in line
    assert "choose a --log-dir outside it" in line


def test_a_study_name_that_is_a_run_directory_is_refused(made: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(made, capsys, [*TINY, "--log-dir", str(made / "s"), "--seed", "0", "1", "--study", RUN.format(0)])
    assert line == (f"error: --study='{RUN.format(0)}': the study directory '{made / 's' / RUN.format(0)}' is the "
                    f"run directory '{made / 's' / RUN.format(0)}' (run.lock); choose another --study")


def test_a_tune_study_inside_a_run_is_refused(made: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inside = made / "s" / RUN.format(1)
    line = refused(made, capsys, ["tune", "--env", "TMaze-v0", "--env-kwargs", "length=3", "--backbone", "mlp",
                                  "-n", "64", "--log-dir", str(inside), "--trials", "1"])
    assert line.startswith(f"error: --log-dir='{inside}': the tune study directory ")
    assert f"inside the run directory '{inside}' (run.lock)" in line


def test_the_python_api_refuses_a_run_inside_a_study(made: Path) -> None:
    config = build_config(None, {"env": "TMaze-v0", "env_kwargs": {"length": 3}, "backbone": "mlp", "seed": 7,
                                 "log_dir": str(made / "s"), "total_timesteps": 64, "threads": 1}, [])
    before = listing(made)
    with pytest.raises(ConfigError, match=r"inside the study directory .* \(study\.yaml\)"):
        train(config)
    assert listing(made) == before


def test_resuming_the_same_study_and_run_still_works(root: Path) -> None:
    assert train_rl.main([*TINY, "--log-dir", str(root), "--seed", "0", "1", "--study", "s", "--no-report"]) == 0
    assert train_rl.main([*TINY, "--log-dir", str(root), "--seed", "0", "1", "2", "--study", "s",
                          "--no-report"]) == 0  # the same study, grown by a seed: its run is made inside it
    assert (root / "s" / RUN.format(2) / "summary.json").is_file()
    assert train_rl.main([*TINY, "--log-dir", str(root / "single"), "--seed", "3"]) == 0
    assert train_rl.main([*TINY, "--log-dir", str(root / "single"), "--seed", "3", "--resume"]) == 0


def test_a_fresh_folder_beside_a_study_still_works(root: Path) -> None:
    assert train_rl.main([*TINY, "--log-dir", str(root / "other"), "--seed", "4"]) == 0
    assert train_rl.main([*TINY, "--log-dir", str(root), "--seed", "0", "1", "--study", "v", "--no-report"]) == 0
    assert [owner for owner, _, _ in owners_of(root / "other" / RUN.format(4))] == [root / "other" / RUN.format(4)]


def test_a_study_run_belongs_to_its_study(made: Path) -> None:
    check_owner("run directory", made / "s" / RUN.format(0), "--log-dir", str(made / "s"))
    with pytest.raises(ConfigError, match="which it does not belong to"):
        check_owner("run directory", made / "s" / RUN.format(9), "--log-dir", str(made / "s"))


def test_a_trial_folder_holds_only_the_runs_its_tune_trains(tmp_path: Path, capsys) -> None:
    """A run made in a tune study's trial folder by `train` or `lm train` is refused; the tune's own trial runner
    (`TUNING`) makes its runs there (mutation caught: any run under a trial folder was taken for the tune's, and the
    tune's next trial then found a finished run in its place)."""
    tune = tmp_path / "tune" / "t"
    tune.mkdir(parents=True)
    (tune / "search.json").write_text("{}")
    trial = tune / "trial_0008"
    err = refused(tmp_path, capsys, [*TINY, "--log-dir", str(trial)])
    assert err.startswith(f"error: --log-dir={str(trial)!r}: the run directory ") and \
        f"would be inside the tune study directory {str(tune)!r} (search.json)" in err
    err = refused(tmp_path, capsys, ["lm", "train", "-p", "data=copy", "steps=2", f"log_dir={trial}"])
    assert f"would be inside the tune study directory {str(tune)!r}" in err
    token = TUNING.set(tune)
    try:
        check_owner("run directory", trial / RUN.format(0), "--log-dir", str(trial))
    finally:
        TUNING.reset(token)


def test_an_lm_run_inside_a_study_is_refused_naming_its_own_log_dir_key(root: Path, capsys) -> None:
    """`lm train` places its run with `-p log_dir=`, and its refusal names that key, not `--log-dir`."""
    line = refused(root, capsys, ["lm", "train", "-p", "data=copy", f"log_dir={root / 's'}", "steps=1",
                                  "segment_length=8", "batch_size=2", "copy_tokens=2000", "backbone_options.d_model=16",
                                  "backbone_options.n_heads=2", "backbone_options.n_layers=1"])
    assert line.startswith(f"error: log_dir={str(root / 's')!r}: the run directory ")
    assert f"would be inside the study directory {str(root / 's')!r} (study.yaml)" in line and "--log-dir" not in line


LM = ["lm", "train", "-p", "data=copy", "steps=1", "segment_length=8", "batch_size=2", "copy_tokens=2000",
      "backbone_options.d_model=16", "backbone_options.n_heads=2", "backbone_options.n_layers=1"]


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_of_the_other_command_in_a_runs_place_is_named_as_such(tmp_path, capsys, resume) -> None:
    """A language-model run where `train` puts its run, and a training run where `lm train` puts its own: each is
    refused naming what it holds and the command that reads it, new or resumed, and nothing changes (mutation
    caught: a missing option or a finished run named instead)."""
    lm_run, training_run = tmp_path / "a" / RUN.format(0), tmp_path / "b" / "copy__lm-trxl__0"
    for run, config in ((lm_run, "data: copy\nbackbone: trxl\n"), (training_run, "env: TMaze-v0\nalgo: ppo\n")):
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(config)
        (run / "run.lock").touch()
    line = refused(tmp_path, capsys, [*TINY, "--log-dir", str(tmp_path / "a"), *(["--resume"] if resume else [])])
    assert line == (f"error: run directory {str(lm_run)!r} holds a language-model run (`lm eval` reads it), not a "
                    "training run; choose another --log-dir or seed")
    line = refused(tmp_path, capsys, [*LM, f"log_dir={tmp_path / 'b'}", *(["--resume"] if resume else [])])
    assert line == (f"error: run directory {str(training_run)!r} holds a training run (`evaluate` reads it), not a "
                    "language-model run; choose another log_dir or seed")



@pytest.mark.parametrize("resume", [False, True])
def test_a_folder_holding_files_but_no_run_is_refused_and_left_as_it_was(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          resume: bool) -> None:
    folder = tmp_path / RUN.format(0)
    folder.mkdir()
    (folder / "evaluations.csv").write_text("a,b\n1,2\n")
    (folder / "summary.json").write_text('{"mine": 1}')
    line = refused(tmp_path, capsys, [*TINY, "--log-dir", str(tmp_path), *(["--resume"] if resume else [])])
    assert "holds files but no run (no run.lock)" in line
