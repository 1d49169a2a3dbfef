"""Every command validates its input as ``train`` does (docs/validation.md): a bad value, device, path, damaged
file, repeated key or oversized value ends the command with exit status 2 and one line naming the key or flag, the
value (at most about 100 characters of it) and what is valid, before anything is created. Each row runs through
``train_rl.main`` (CUDA hidden, so ``--device cuda`` is missing on every machine); one row per command also runs in
a real process (:func:`test_each_command_refuses_bad_input_in_a_real_process`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train_rl
from experiments.cli.train import config_from_args, make_parser
from experiments.config import ConfigError
from experiments.replay import load_agent
from experiments.studies.tune_space import load_space
from lm.workbench import LMConfig, build_lm_config, train_lm

REPO = Path(__file__).resolve().parents[1]
TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "2", "--threads", "1", "-n", "64",
        "--eval-freq", "32", "--checkpoint-freq", "32", "--n-eval-episodes", "2",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4", "gtrxl.d_model=16",
        "gtrxl.n_heads=2", "gtrxl.memory_length=4", "n_eval_envs=2"]
RUN = "TMaze-v0__ppo-gtrxl__0"
LM = ["lm", "train", "-p", "data=copy", "log_dir=OUT/lm", "steps=2", "segment_length=8", "batch_size=2",
      "copy_tokens=2000", "backbone_options.d_model=16", "backbone_options.n_heads=2", "backbone_options.n_layers=1",
      "backbone_options.memory_length=8", "eval_segments=1"]
"""a language-model run of two steps, which each ``lm train`` row spoils with one setting"""
TUNE = ["tune", "--env", "TMaze-v0", "--env-kwargs", "length=3", "-n", "64", "--trials", "1", "--tune-seeds", "1",
        "--log-dir", "OUT/tune"]
BIG = "[" + ", ".join(["1"] * 3000) + "]"
BOMB = "\n".join(["env_kwargs:", "  length:", "    - &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
                  *(f"    - &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefg", "bcdefgh", strict=True))])
FILES = {
    "corrupt.zip": b"PK\x03\x04 not a zip",
    "dup.yaml": b"n_envs: 4\nn_envs: 8\n",
    "dup_sections.yaml": b"ppo:\n  n_steps: 16\nn_envs: 2\nppo:\n  gamma: 0.9\n",
    "bomb.yaml": BOMB.encode(),
    "deep.yaml": b"env_kwargs: " + b"[" * 3000 + b"]" * 3000 + b"\n",
    "study_dup.yaml": b"seeds: 1\nseeds: 2\n",
    "gamma_high.yaml": b"ppo.gamma: {type: uniform, low: 0.9, high: 1.5}\n",
    "gamma_choice.yaml": b"ppo.gamma: {type: categorical, choices: [0.9, 7]}\n",
    "n_steps_zero.yaml": b"ppo.n_steps: {type: int, low: 0, high: 64}\n",
    "lr_template.yaml": b"ppo.learning_rate: {type: log_uniform, low: 1.0e-4, high: 1.0e-3, template: \"lin_-{}\"}\n",
    "space_dup.yaml": b"ppo.gamma: {type: uniform, low: 0.9, high: 0.99}\nppo.gamma: {type: uniform, low: 0, high: 1}",
    "lm_dup.yaml": b"steps: 2\nsteps: 3\n",
    "a_file": b"not a directory\n",
}
"""files the rows name as {name} (their folder is OUT)"""

CASES: list[tuple[list[str], str]] = [
    # train: damaged models, strict files, oversized values
    (["-p", "init_from=OUT/corrupt.zip"], "init_from='OUT/corrupt.zip': 'OUT/corrupt.zip' does not load: it is not a "
                                          "whole zip file (File is not a zip file)"),
    (["-p", "init_from=OUT/truncated.zip"], "init_from='OUT/truncated.zip': 'OUT/truncated.zip' does not load"),
    (["--config", "OUT/dup.yaml"], "config file 'OUT/dup.yaml' is not valid YAML at line 2, column 1: key 'n_envs' "
                                   "repeats the one at line 1"),
    (["--config", "OUT/dup_sections.yaml"], "at line 4, column 1: key 'ppo' repeats the one at line 1"),
    (["--config", "OUT/bomb.yaml"], "its aliases expand to more than 100,000 values"),
    (["--config", "OUT/deep.yaml"], "its collections are nested deeper than can be read"),
    (["-p", f"env_kwargs.length={BIG}"], "env_kwargs.length=[1, 1, 1"),
    (["-p", "env_kwargs.penalty=nan"], "env_kwargs.penalty='nan': expected a finite number"),
    (["--backbone", "lstm", "-p", "init_from=OUT/gtrxl.zip"], "init_from='OUT/gtrxl.zip' holds a policy of another "
                                                              "architecture: missing backbone.rnn."),
    (["--backbone", "lstm", "--seed", "0", "1", "--log-dir", "OUT/s", "-p", "init_from=OUT/gtrxl.zip"],
     "init_from='OUT/gtrxl.zip' holds a policy of another architecture: missing backbone.rnn."),
    ([*TUNE, "--backbone", "lstm", "-p", "init_from=OUT/gtrxl.zip"], "init_from='OUT/gtrxl.zip' holds a policy of "
                                                                     "another architecture: missing backbone.rnn."),
    (["-p", f"ppo.n_steps={BIG}"], "ppo.n_steps=[1, 1, 1"),
    (["-p", "ppo.gamma=" + "9" * 400], "ppo.gamma=9999"),
    (["-p", "seed=" + "9" * 5000], "seed='9999"),
    (["-p", "ppo={n_steps: 1, n_steps: 2}"], "key 'n_steps' repeats the one at line 1"),
    # names and paths longer than the file system takes, in every command that writes
    ([*TINY, "--log-dir", "OUT/" + "a" * 300], "the name 'aaaaaaaaaaaaaaaaaaaaaaa…' is 300 bytes; expected names of at "
                                              "most 255 bytes"),
    ([*TINY, "--log-dir", "OUT" + "/abcdefgh" * 500], "the path is "),
    ([*TINY, "--log-dir", "OUT/ /x"], "the name ' ' it would make begins or ends with white space"),
    ([*TINY, "--seed", "0", "1", "--study", "b" * 300], "at most 255 bytes) (the study directory under --log-dir)"),
    (["plot", "RUN", "--out", "OUT/" + "c" * 300 + ".png"], "--out='OUT/cccc"),
    (["evaluate", "RUN", "--record", "OUT/" + "d" * 300 + ".gif"], "expected names of at most 255 bytes"),
    (["report", "RUNS", "--out", "OUT/" + "e" * 300], "expected names of at most 255 bytes"),
    ([*TUNE[:-1], "OUT/" + "f" * 300], "expected names of at most 255 bytes"),
    # overrides: a key with an empty part; a message that says what is expected once
    ([*TINY, "-p", "ppo.=3"], "override 'ppo.=3' is not of the form dotted.key=value"),
    ([*TINY, "-p", "env_wrapper=5"], "env_wrapper=5: env_wrapper entry 5: expected an import path such as envs."
                                     "wrappers.MaskVelocity, or a one-key mapping {import.path: {keyword: value}}"),
    # an empty file name, which is no file (the current folder)
    ([*TINY, "--config", ""], "config file '': an empty name; expected a file path or the name of a shipped run "
                              "config (demo, "),
    ([*TINY, "--hyperparams", ""], "config file '': an empty name; expected a file path or the name of a shipped "
                                   "hyper-parameter file (ppo, vmpo)"),
    (["study", ""], "config file '': an empty name; expected a file path or the name of a shipped study file"),
    # what a run would ignore: a study's option given to one run, a Ray address without Ray
    ([*TINY, "--workers", "2"], "--workers=2: an option of seed studies, and this is one run"),
    ([*TINY, "--no-report"], "--no-report: an option of seed studies, and this is one run"),
    ([*TINY, "--seed", "0", "1", "--ray-address", "foo:1"], "--ray-address='foo:1': only with --launcher ray"),
    # an env keyword the env takes, with a value it does not list
    (["--env", "CartPole-v1", "--backbone", "mlp", "-n", "64", "--env-kwargs", "render_mode=foo"],
     "env_kwargs.render_mode='foo': expected one of the env's render modes, human, rgb_array"),
    # study
    (["study", "OUT/study_dup.yaml"], "config file 'OUT/study_dup.yaml' is not valid YAML at line 2, column 1: key "
                                      "'seeds' repeats the one at line 1"),
    # evaluate
    (["evaluate", "RUN", "--device", "foo"], "--device='foo': expected auto, cpu, cuda, cuda:N or mps"),
    (["evaluate", "RUN", "--device", "cuda"], "--device='cuda': CUDA is not available on this machine"),
    (["evaluate", "RUN", "--env-kwargs", "length=abc"], "env_kwargs.length='abc': expected an integer"),
    (["evaluate", "RUN", "--env-kwargs", f"length={BIG}"], "env_kwargs.length=[1, 1, 1"),
    (["evaluate", "RUN", "--record", "OUT/a_file/x.gif"], "--record 'OUT/a_file/x.gif': 'OUT/a_file' is a file"),
    (["evaluate", "RUN", "--record", "OUT"], "--record 'OUT': unknown video format"),
    (["evaluate", "RUN", "--fps", "nan", "--record", "OUT/x.gif"], "--fps=nan: expected a positive number"),
    (["evaluate", "RUN", "--fps", "1e9", "--record", "OUT/x.gif"], "--fps=1e+09: expected a positive number of "
                                                                   "frames per second, at most 1000"),
    (["evaluate", "RUN", "--fps", "3"], "--fps=3: takes effect only with --render or --record"),
    (["evaluate", "RUN", "--record-episodes", "2"], "--record-episodes=2: takes effect only with --render or --record"),
    (["evaluate", "RUN", "--seed", "-1"], "--seed=-1: expected an integer in [0, 4294967295]"),
    (["evaluate", "OUT/corrupt.zip", "--env", "TMaze-v0"], "model 'OUT/corrupt.zip' does not load: it is not a whole "
                                                           "zip file"),
    (["evaluate", "OUT/truncated.zip", "--env", "TMaze-v0"], "model 'OUT/truncated.zip' does not load"),
    # plot and report
    (["plot", "RUN", "--out", "OUT/a_file/c.png"], "--out 'OUT/a_file/c.png': 'OUT/a_file' is a file"),
    (["plot", "RUN", "--out", "OUT"], "--out 'OUT': is a directory; expected a file to write"),
    (["plot", "RUN", "--reps", "0"], "--reps=0: expected an integer in [1, 50000]"),
    (["plot", "RUN", "--seed", "-1"], "--seed=-1: expected an integer in [0, 4294967295]"),
    (["report", "RUNS", "--solve-threshold", "nan"], "--solve-threshold=nan: expected a finite number"),
    (["report", "RUNS", "--out", "OUT/a_file"], "--out 'OUT/a_file': 'OUT/a_file' is a file"),
    # list
    (["list", "everything"], "argument WHAT: invalid choice: 'everything'"),
    # tune: its options and every value a search space can give
    ([*TUNE, "--timeout", "-5"], "--timeout=-5.0: expected a number > 0"),
    ([*TUNE, "--trials", "0"], "--trials=0: expected an integer >= 1"),
    ([*TUNE, "--space", "OUT/gamma_high.yaml"], "search space 'OUT/gamma_high.yaml', ppo.gamma (high): ppo.gamma=1.5: "
                                                "expected a number in [0, 1]"),
    ([*TUNE, "--space", "OUT/gamma_choice.yaml"], "search space 'OUT/gamma_choice.yaml', ppo.gamma (choice 2 of 2): "
                                                  "ppo.gamma=7.0: expected a number in [0, 1]"),
    ([*TUNE, "--space", "OUT/n_steps_zero.yaml"], "ppo.n_steps (low): ppo.n_steps=0: expected an integer >= 1"),
    ([*TUNE, "--space", "OUT/lr_template.yaml"], "ppo.learning_rate (low): ppo.learning_rate=lin_-0.0001_0.0: "),
    ([*TUNE, "--space", "OUT/space_dup.yaml"], "key 'ppo.gamma' repeats the one at line 1"),
    # lm train, eval and sample
    ([*LM, "steps=abc"], "steps='abc': expected an integer"),
    ([*LM, "steps=-1"], "steps=-1: expected an integer >= 1"),
    ([*LM, "batch_size=0"], "batch_size=0: expected an integer >= 1"),
    ([*LM, "learning_rate=nan"], "learning_rate=nan: expected a number in (0, 3.40282e+38]"),
    ([*LM, "device=cuda"], "device='cuda': CUDA is not available on this machine"),
    ([*LM, "device=foo"], "device='foo': expected auto, cpu, cuda, cuda:N or mps"),
    ([*LM, "backbone_options.d_model=0"], "backbone_options.d_model=0: expected an integer >= 1"),
    ([*LM, "backbone_options.colour=1"], "unknown option 'colour' in backbone_options of trxl; valid options: "),
    ([*LM, "backbone_options.n_heads=3"], "n_heads=3: expected a divisor of d_model=16"),
    ([*LM, "copy_vocab=1"], "copy_vocab=1: expected an integer >= 2"),
    ([*LM, "segment_length=5000"], "data=copy: a stream of 2000 tokens is too short for 2 rows of segments of 5000"),
    ([*LM, "data=wiki"], "data='wiki': expected one of python, copy, associative-recall"),
    ([*LM, "colour=1"], "unknown LM setting(s) 'colour'; valid: "),
    (["lm", "train", "-c", "OUT/lm_dup.yaml"], "key 'steps' repeats the one at line 1"),
    (["lm", "eval", "LM_RUN", "--segments", "0"], "--segments=0: expected an integer >= 1"),
    (["lm", "eval", "LM_RUN", "--knn-weight", "2"], "--knn-weight[0]=2.0: expected a number in [0, 1]"),
    (["lm", "sample", "LM_RUN", "-n", "-5"], "-n=-5: expected an integer >= 1"),
    (["lm", "sample", "LM_RUN", "--temperature", "0"], "--temperature=0.0: expected a number > 0"),
    (["lm", "sample", "LM_RUN", "--prompt", ""], "--prompt='': expected a non-empty string (the text to continue)"),
]
"""(argv, what the one line on stderr holds); OUT, RUN, RUNS and LM_RUN stand for the test's folder, a finished run,
the folder of runs and a finished language-model run"""


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finished run, its folder, a finished language-model run and a truncated copy of the run's model."""
    root = tmp_path_factory.mktemp("made")
    assert train_rl.main([*TINY, "--log-dir", str(root / "runs")]) == 0
    lm = [word.replace("OUT", str(root)) for word in LM]
    assert train_rl.main(lm) == 0
    data = (root / "runs" / RUN / "model.zip").read_bytes()
    (root / "truncated.zip").write_bytes(data[: len(data) // 2])
    return {"RUN": root / "runs" / RUN, "RUNS": root / "runs", "LM_RUN": root / "lm" / "copy__lm-trxl__0",
            "TRUNCATED": root / "truncated.zip"}


def spelled(argv: list[str], made: dict[str, Path], out: Path) -> list[str]:
    """``argv`` with the words RUN, RUNS and LM_RUN, and OUT wherever it is, replaced by their paths."""
    return [str(made[word]) if word in ("RUN", "RUNS", "LM_RUN") else word.replace("OUT", str(out)) for word in argv]


def exit_status(argv: list[str]) -> int:
    """``train_rl.main(argv)``'s exit status, also where argparse exits."""
    try:
        return train_rl.main(argv)
    except SystemExit as exit:
        return int(exit.code)


def snapshot(*folders: Path) -> set[Path]:
    return {path for folder in folders for path in folder.rglob("*")}


@pytest.fixture
def out(tmp_path: Path, made: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder of :data:`FILES` (and of the truncated model, and the whole one as `gtrxl.zip`); CUDA hidden."""
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "truncated.zip").write_bytes(made["TRUNCATED"].read_bytes())
    (tmp_path / "gtrxl.zip").write_bytes((made["RUN"] / "model.zip").read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    return tmp_path


def case_id(argv: list[str]) -> str:
    """A row's test id: its last words, each long one cut."""
    return " ".join(word if len(word) < 30 else word[:12] + "..." for word in argv)[-60:]


@pytest.mark.parametrize("argv, message", CASES, ids=[case_id(argv) for argv, _ in CASES])
def test_bad_input_exits_2_with_one_line_naming_it_and_creates_nothing(argv, message, made, out, capsys):
    before = snapshot(out, made["RUNS"].parent)
    code = exit_status(spelled(argv, made, out))
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert spelled([message], made, out)[0] in lines[0]
    assert len(lines[0]) < 400, "a value is shown in at most about 100 characters"
    assert snapshot(out, made["RUNS"].parent) == before, "nothing is created for a refused input"


PROCESS_CASES = {
    "train": ["--config", "OUT/dup.yaml"],
    "study": ["study", "OUT/study_dup.yaml"],
    "evaluate": ["evaluate", "RUN", "--device", "foo"],
    "plot": ["plot", "RUN", "--out", "OUT/a_file/c.png"],
    "report": ["report", "RUNS", "--out", "OUT/a_file"],
    "list": ["list", "everything"],
    "tune": [*TUNE, "--space", "OUT/gamma_choice.yaml"],
    "lm": [*LM, "steps=abc"],
}
"""one row of :data:`CASES` per command, run as ``python train_rl.py ...``"""


@pytest.mark.parametrize("command", PROCESS_CASES)
def test_each_command_refuses_bad_input_in_a_real_process(command, made, out):
    argv = PROCESS_CASES[command]
    message = next(message for case, message in CASES if case == argv)
    before = snapshot(out, made["RUNS"].parent)
    process = subprocess.run([sys.executable, str(REPO / "train_rl.py"), *spelled(argv, made, out)], cwd=out,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    lines = process.stderr.strip().splitlines()
    assert process.returncode == 2, process.stderr
    assert len(lines) == 1 and "Traceback" not in process.stderr
    assert spelled([message], made, out)[0] in lines[0]
    assert snapshot(out, made["RUNS"].parent) == before


def test_the_python_api_raises_what_the_command_line_prints(made, out):
    rows = [
        (lambda: load_agent(made["RUN"], device="foo"), "device='foo': expected auto, cpu, cuda, cuda:N or mps"),
        (lambda: load_agent(out / "corrupt.zip", env="TMaze-v0"), "does not load: it is not a whole zip file"),
        (lambda: build_lm_config(None, ["steps=abc"]), "steps='abc': expected an integer"),
        (lambda: train_lm(LMConfig(batch_size=0, log_dir=str(out / "lm"))), "batch_size=0: expected an integer >= 1"),
        (lambda: load_space([out / "gamma_high.yaml"]).check(config_from_args(make_parser().parse_args(TINY))),
         "ppo.gamma (high): ppo.gamma=1.5: expected a number in [0, 1]"),
    ]
    for call, message in rows:
        with pytest.raises(ConfigError) as raised:
            call()
        assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not (out / "lm").exists()


def test_a_rule_says_what_is_expected_once():
    """A rule whose cause already says what is valid does not say it again (mutation caught: the env wrapper rule
    appended its own description after the wrapper parser's)."""
    from experiments.rules import EnvWrappers

    with pytest.raises(ConfigError) as refused:
        EnvWrappers().check("env_wrapper", 5)
    assert str(refused.value).count("expected") == 1, refused.value
