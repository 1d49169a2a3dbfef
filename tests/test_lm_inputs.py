"""Bad input to ``train_rl.py lm``: a training run that meets a non-finite value stops with status 3 and one line,
its checkpoints intact; data too small for the settings, or a run too large for the memory, is refused with status 2
and one line before anything is created; the options of ``lm eval`` and ``lm sample`` whose valid values depend on
the run (``--knn-k``, ``--memory-length``, ``--segments``, ``--exit-threshold``, the run directory itself) are checked
against it before anything is loaded or evaluated."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch

import lm.workbench as workbench
import train_rl
from agents import NonFiniteError
from experiments.config import ConfigError
from lm.data import python_split_bytes
from lm.workbench import build_lm_config, check_retrieval, load_run, read_lm_run, read_prompt, train_lm
from policies.lm.model import MemoryLanguageModel

TINY = ["data=copy", "steps=4", "segment_length=8", "batch_size=2", "copy_tokens=2000", "copy_vocab=16",
        "eval_segments=2", "eval_every=2", "checkpoint_every=2", "d_embed=16", "backbone_options.d_model=32",
        "backbone_options.n_layers=1", "backbone_options.n_heads=2", "backbone_options.memory_length=16", "threads=1"]
"""a language-model run of four steps that trains in a second"""


def lm(capsys, *argv: object) -> tuple[int, str, str]:
    """``train_rl.py lm ARGV``: its status, stdout and stderr."""
    capsys.readouterr()
    status = train_rl.main(["lm", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    return err.strip()


def trained(root: Path, *settings: str) -> Path:
    """The directory of a tiny run trained under `root` with `settings` over `TINY`."""
    config = build_lm_config(None, [*TINY, f"log_dir={root}", *settings])
    train_lm(config)
    return config.directory()


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory) -> Path:
    return trained(tmp_path_factory.mktemp("lm"))


@pytest.fixture(scope="module")
def bytes_run(tmp_path_factory) -> Path:
    return trained(tmp_path_factory.mktemp("lm"), "data=python", "max_bytes=20000")


# --- a non-finite value stops training: status 3, one line, the run's checkpoints intact


def poison_training_loss(monkeypatch, from_call: int) -> None:
    """Make the training loss NaN from the `from_call`-th training segment on (evaluation is left alone)."""
    loss, calls = MemoryLanguageModel.loss, []

    def poisoned(self, *args, **kwargs):
        value, state, aux = loss(self, *args, **kwargs)
        if self.training:
            calls.append(1)
            if len(calls) >= from_call:
                value = value * float("nan")
        return value, state, aux

    monkeypatch.setattr(MemoryLanguageModel, "loss", poisoned)


def test_a_nan_training_loss_stops_the_run_with_status_3_and_its_last_checkpoint_intact(tmp_path, capsys,
                                                                                       monkeypatch):
    """Mutation caught: without the guard the run finishes with status 0, NaN rows and a NaN checkpoint."""
    poison_training_loss(monkeypatch, from_call=5)
    argv = ["train", "-p", *TINY, "steps=8", f"log_dir={tmp_path}"]
    status, out, err = lm(capsys, *argv)
    run = tmp_path / "copy__lm-trxl__0"
    assert status == 3 and out == ""
    assert one_line(err) == (f"training stopped: non-finite training loss (nan) at step 5; the last checkpoint before "
                             f"it is '{run / 'checkpoints' / 'lm_4.pt'}' (step 4)")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["lm_2.pt", "lm_4.pt"]
    assert not (run / "summary.json").exists()
    weights = torch.load(run / "checkpoints" / "lm_4.pt", weights_only=False)["model"]
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())
    rows = list(csv.DictReader((run / "evaluations.csv").open()))
    assert [row["step"] for row in rows] == ["2", "4"] and all(math.isfinite(float(row["train_loss"])) for row in rows)

    monkeypatch.undo()  # the run resumes from its last good checkpoint
    assert lm(capsys, *argv, "--resume")[0] == 0
    assert [row["step"] for row in csv.DictReader((run / "evaluations.csv").open())] == ["2", "4", "6", "8"]


def test_a_huge_learning_rate_stops_at_the_first_step_whose_parameters_overflow(tmp_path, capsys):
    status, _, err = lm(capsys, "train", "-p", *TINY, "learning_rate=1e30", f"log_dir={tmp_path}")
    assert status == 3
    line = one_line(err)
    assert line.startswith("training stopped: non-finite parameter norm after step 1: finite values whose norm "
                           "overflows in ") and line.endswith("no checkpoint was saved before it "
                                                              f"('{tmp_path / 'copy__lm-trxl__0' / 'checkpoints'}' "
                                                              "holds none)")


def test_the_python_api_raises_non_finite_error(tmp_path, monkeypatch):
    poison_training_loss(monkeypatch, from_call=1)
    with pytest.raises(NonFiniteError, match=r"non-finite training loss \(nan\) at step 1; no checkpoint"):
        train_lm(build_lm_config(None, [*TINY, f"log_dir={tmp_path}"]))


def test_fine_tuning_in_eval_that_diverges_stops_with_status_3(copy_run, capsys):
    status, _, err = lm(capsys, "eval", copy_run, "--spalm-steps", 2, "--spalm-lm-lr", "1e30",
                        "--datastore-segments", 2, "--knn-k", 4)
    assert status == 3 and one_line(err).startswith("fine-tuning stopped: non-finite parameter norm after "
                                                    "fine-tuning segment 1 of 2")


# --- data too small for the settings: refused before anything is created


@pytest.mark.parametrize(("settings", "message"), [
    (["data=python", "max_bytes=17"], "data=python: a stream of 17 tokens is too short for 2 rows of segments of 8 "
                                      "tokens (the train split; max_bytes=17); expected batch_size × (segment_length "
                                      "+ 1) <= 17, here batch_size=2 × 9 = 18"),
    (["copy_tokens=17"], "data=copy: a stream of 17 tokens is too short for 2 rows of segments of 8 tokens (the train "
                         "split; copy_tokens=17); expected batch_size × (segment_length + 1) <= 17"),
    (["segment_length=2000"], "(the train split; copy_tokens=2000); expected batch_size × (segment_length + 1) <= "
                              "2000, here batch_size=2 × 2001 = 4002"),
    (["batch_size=1000"], "too short for 1000 rows of segments of 8 tokens (the train split"),
    (["future_targets=8"], "future_targets=8: future head k predicts the token k + 2 steps ahead inside a segment of "
                           "segment_length + 1 = 9 tokens; expected future_targets <= segment_length - 1 = 7"),
    (["copy_distance=1001"], "copy_distance=1001: a block and its copy take 2 × copy_distance tokens; expected "
                             "copy_distance <= copy_tokens // 2 = 1000 (copy_tokens=2000)"),
    (["data=associative-recall", "recall_tokens=18", "segment_length=2", "batch_size=1"],
     "recall_tokens=18: a record of recall_pairs=8 pairs takes 2 × recall_pairs + 3 = 19 tokens; expected "
     "recall_tokens >= 19"),
    (["data=associative-recall", "recall_pairs=16"], "recall_pairs=16: a record holds distinct keys, of which "
     "recall_vocab=32 has (recall_vocab - 1) // 2 = 15; expected recall_pairs <= 15"),
])
def test_data_too_small_for_the_settings_is_refused_before_anything_is_created(tmp_path, capsys, settings, message):
    """Mutation caught: the python corpus was read only once the run directory existed, so a short one left a run
    directory behind it and named no setting."""
    status, _, err = lm(capsys, "train", "-p", *TINY, f"log_dir={tmp_path / 'runs'}", *settings)
    assert status == 2 and message in one_line(err)
    assert not (tmp_path / "runs").exists()


def test_the_validation_split_is_checked_too(tmp_path):
    """The standard library's validation files (every tenth) hold fewer bytes than its training files: rows that
    fit the training split but not the validation split are refused, from the file sizes alone."""
    valid = python_split_bytes("validation")
    segment = valid // 2  # two rows of it do not fit the validation split, they fit the training split
    with pytest.raises(ConfigError, match=f"a stream of {valid} tokens is too short for 2 rows of segments of "
                                          rf"{segment} tokens \(the validation split; all of its files; max_bytes="):
        train_lm(build_lm_config(None, [*TINY, "data=python", f"max_bytes={3 * valid}", f"segment_length={segment}",
                                        f"log_dir={tmp_path}"]))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("value, shown", [("5", "5"), ("[1, 2]", "[1, 2]"), ("abc", "'abc'")])
def test_backbone_options_that_are_no_mapping_are_refused_in_one_line(value, shown, tmp_path, capsys):
    status, _, err = lm(capsys, "train", "-p", "data=copy", f"backbone_options={value}", f"log_dir={tmp_path}")
    assert status == 2 and one_line(err) == f"error: backbone_options={shown}: expected a mapping"
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("settings", "named"), [
    (["copy_tokens=2147483647"], "copy_tokens=2147483647: this would need about"),
    (["copy_vocab=2147483647"], "copy_vocab=2147483647"),
    (["backbone_options.memory_length=100000000"], "batch_size=2, backbone_options.memory_length=100000000: this "
                                                   "would need about"),
    (["data=associative-recall", "recall_vocab=2000000", "recall_tokens=100000"], "recall_vocab=2000000"),
])
def test_a_run_larger_than_the_memory_is_refused_naming_its_settings(tmp_path, capsys, monkeypatch, settings, named):
    """Mutation caught: these allocated until the machine ran out (status 1 with a traceback, or killed)."""
    monkeypatch.setattr(workbench, "available_host_memory", lambda: 1 << 30)
    status, _, err = lm(capsys, "train", "-p", *TINY, f"log_dir={tmp_path / 'runs'}", *settings)
    assert status == 2 and named in one_line(err) and "but 1.0 GiB is available" in err
    assert not (tmp_path / "runs").exists()


# --- options of lm eval and lm sample checked against the run before it loads


@pytest.fixture
def nothing_loads(monkeypatch) -> None:
    """Fail the test if a checkpoint is read."""
    monkeypatch.setattr(workbench, "_load_checkpoint", lambda *args: pytest.fail("a checkpoint was loaded"))


@pytest.mark.parametrize(("options", "message"), [
    (["--knn-weight", "0.5", "--knn-k", "100000", "--datastore-segments", "2"],
     "--knn-k=100000: expected an integer in [1, 32] (the datastore's entries: --datastore-segments=2 × "
     "batch_size=2 × segment_length=8 of the run)"),
    (["--spalm-steps", "2", "--knn-k", "33", "--datastore-segments", "2"],
     "--knn-k=33: expected an integer in [1, 32]"),
    (["--knn-weight", "0.5", "--datastore-segments", "1"], "--knn-k=32: expected an integer in [1, 16]"),
    (["--memory-length", "16", "100000000"], "--memory-length=100000000: this would need about"),
    (["--knn-weight", "0.5", "--knn-k", "4", "--datastore-segments", "2000000000"],
     "--datastore-segments=2000000000, batch_size=2, segment_length=8: this would need about"),
])
def test_eval_options_that_depend_on_the_run_are_refused_before_it_loads(copy_run, capsys, monkeypatch, nothing_loads,
                                                                          options, message):
    """Mutation caught: ``--knn-k`` was checked by the datastore's search, after the plain evaluation had printed,
    as ``k must be in 1..32``."""
    monkeypatch.setattr(workbench, "available_host_memory", lambda: 1 << 30)
    status, out, err = lm(capsys, "eval", copy_run, *options)
    assert status == 2 and out == "" and message in one_line(err)


@pytest.mark.parametrize("threshold", ["-1", "0", "1.5"])
def test_an_exit_threshold_outside_0_1_is_refused_naming_the_flag(copy_run, capsys, nothing_loads, threshold):
    """The threshold is the probability of a layer's most probable next token: at or below 0 every position
    leaves after the first layer, above 1 none leaves early."""
    status, out, err = lm(capsys, "eval", copy_run, "--exit-threshold", threshold)
    assert status == 2 and out == ""
    assert f"--exit-threshold[0]={float(threshold)}: expected a number in (0, 1]" in one_line(err)


@pytest.mark.parametrize(("options", "message"), [
    (["--knn-k", "4"], "--knn-k=4: takes effect only with --knn-weight or --spalm-steps; give one too"),
    (["--datastore-segments", "2"], "--datastore-segments=2: takes effect only with --knn-weight or --spalm-steps"),
    (["--spalm-lm-lr", "0.001"], "--spalm-lm-lr=0.001: takes effect only with --spalm-steps; give it too"),
    (["--knn-weight", "0.5", "--spalm-lm-lr", "0.001"], "--spalm-lm-lr=0.001: takes effect only with --spalm-steps"),
])
def test_an_eval_option_without_the_one_it_needs_is_refused_naming_both(copy_run, capsys, nothing_loads, options,
                                                                          message):
    status, out, err = lm(capsys, "eval", copy_run, *options)
    assert status == 2 and out == "" and message in one_line(err)


def test_eval_options_not_given_keep_their_defaults():
    args = workbench.make_parser().parse_args(["eval", "run", "--knn-weight", "0.5"])
    workbench.resolve_eval_options(args)
    assert (args.knn_k, args.datastore_segments, args.spalm_lm_lr) == (32, 256, 0.0)


def test_the_python_api_checks_k_against_the_datastore(copy_run):
    with pytest.raises(ConfigError, match=r"k=33: expected an integer in \[1, 32\]"):
        check_retrieval(read_lm_run(copy_run), 33, 2)


def test_memory_lengths_and_exits_a_backbone_cannot_take_are_refused_before_any_evaluation(tmp_path, capsys):
    recurrent = trained(tmp_path, "backbone=lstm", "backbone_options={hidden_size: 16}")
    status, out, err = lm(capsys, "eval", recurrent, "--memory-length", 8)
    assert status == 2 and out == ""
    assert one_line(err) == ("error: --memory-length=[8]: the run's backbone lstm has no memory_length; expected no "
                             "--memory-length")
    status, out, err = lm(capsys, "eval", recurrent, "--exit-threshold", 0.5)
    assert status == 2 and out == "" and "--exit-threshold=[0.5]: early exits need a stack" in one_line(err)

    linformer = trained(tmp_path, "backbone_options.attention=linformer", "backbone_options.memory_length=8")
    status, out, err = lm(capsys, "eval", linformer, "--memory-length", 8, 16)  # 8 evaluates, 16 cannot
    assert status == 2 and out == ""
    assert "--memory-length=16: the weights of the run do not fit {'memory_length': 16}" in one_line(err)
    with pytest.raises(ConfigError, match=r"memory_length=16: .*key_projection"):
        load_run(linformer, memory_length=16)


def test_segments_without_a_scored_token_are_refused_before_any_evaluation(tmp_path, capsys):
    """Associative recall scores only each record's answer (every 19th token): one segment of two targets holds
    none."""
    run = trained(tmp_path, "data=associative-recall", "recall_tokens=2000", "segment_length=2", "batch_size=1",
                  "eval_segments=32")
    status, out, err = lm(capsys, "eval", run, "--segments", 1)
    assert status == 2 and out == ""
    assert "--segments=1: the first 1 validation segments of data=associative-recall hold no scored token" in err


def test_a_run_directory_that_is_not_an_lm_run_is_named(tmp_path, capsys, copy_run):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "file").write_text("x")
    rl_run = tmp_path / "rl"
    rl_run.mkdir()
    (rl_run / "config.yaml").write_text("algo: ppo\nbackbone: gtrxl\nenv: TMaze-v0\n")
    unstarted = tmp_path / "unstarted"
    unstarted.mkdir()
    (unstarted / "config.yaml").write_text((copy_run / "config.yaml").read_text())
    for command in ("eval", "sample"):
        for path, message in ((tmp_path / "missing", f"run='{tmp_path / 'missing'}': no such directory; expected an "
                                                     "LM run directory"),
                              (tmp_path / "file", f"run='{tmp_path / 'file'}': is a file; expected an LM run"),
                              ("", "run='': expected a non-empty string (an LM run directory)"),
                              (empty, "is not an LM run directory (no config.yaml)"),
                              (rl_run, "is a training run of train_rl.py, not a language-model run"),
                              (unstarted, "has no checkpoint yet")):
            status, out, err = lm(capsys, command, path)
            assert status == 2 and out == "" and message in one_line(err), (command, path)


def test_sample_refuses_a_run_without_byte_data_before_it_loads(copy_run, capsys, nothing_loads):
    status, _, err = lm(capsys, "sample", copy_run)
    assert status == 2 and one_line(err) == (f"error: run='{copy_run}': sampling text needs byte-level data "
                                             "(data=python), this run has data=copy")


@pytest.mark.parametrize("options", [["--temperature", "1e-300"], ["--prompt", "\udcff\udcfe"],
                                     ["--prompt", "x" * 1000]])
def test_sample_takes_any_temperature_bytes_and_long_prompts(bytes_run, capsys, options):
    """A tiny temperature divided the logits into NaN; a prompt of bytes that are not UTF-8 (as the shell passes
    them) failed to encode; a long prompt was one segment, its attention quadratic in its length."""
    status, out, err = lm(capsys, "sample", bytes_run, "-n", 3, *options)
    assert status == 0 and err == "" and out


def test_a_prompt_is_read_segment_by_segment(bytes_run, monkeypatch):
    config, model = load_run(bytes_run)
    lengths, hidden_states = [], MemoryLanguageModel.hidden_states

    def spy(self, tokens, *args, **kwargs):
        lengths.append(tokens.shape[0])
        return hidden_states(self, tokens, *args, **kwargs)

    monkeypatch.setattr(MemoryLanguageModel, "hidden_states", spy)
    last, _ = read_prompt(model, b"a" * 20 + b"b", config.segment_length)
    assert lengths == [8, 8, 4] and last.tolist() == [ord("b")]


def test_resume_without_a_checkpoint_says_it_starts_from_step_0(tmp_path, capsys):
    status, _, err = lm(capsys, "train", "-p", *TINY, f"log_dir={tmp_path}", "--resume")
    assert status == 0 and "--resume: nothing to resume in" in err and "starting from step 0" in err


# --- settings: an LM's own example and defaults


def test_an_empty_config_file_is_refused_with_an_lm_setting_as_its_example(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    status, out, err = lm(capsys, "train", "-c", empty)
    assert status == 2 and out == ""
    assert one_line(err) == (f"error: config file {str(empty)!r} is empty; expected a YAML mapping of settings, e.g. "
                             "'backbone: gtrxl'")


def test_another_backbone_starts_from_its_own_default_options(tmp_path, capsys):
    """The LM's default options are trxl's (`LM_BACKBONE_OPTIONS`); another backbone given none takes its own
    defaults, and options given key by key go on top of them, before or after the backbone is named."""
    assert workbench.LMConfig(backbone="gru").backbone_options == {}
    assert build_lm_config(None, ["backbone=gru"]).backbone_options == {}
    assert build_lm_config(None, ["backbone_options.hidden_size=16", "backbone=gru"]).backbone_options == {
        "hidden_size": 16}
    assert build_lm_config(None, ["backbone_options.memory_length=16"]).backbone_options == {
        **workbench.LM_BACKBONE_OPTIONS["trxl"], "memory_length": 16}
    status, _, err = lm(capsys, "train", "-p", "backbone=gru", "data=copy", "steps=2", "segment_length=8",
                        "batch_size=2", "copy_tokens=2000", "eval_segments=2", "eval_every=2", "checkpoint_every=2",
                        "threads=1", f"log_dir={tmp_path}")
    assert status == 0, err
    assert (tmp_path / "copy__lm-gru__0" / "summary.json").is_file()


@pytest.mark.parametrize(("argv", "key"), [
    (["train", "-p", *TINY, "learning_rate=1e39"], "learning_rate=1e+39"),
    (["eval", "RUN", "--spalm-steps", "2", "--spalm-lr", "1e39"], "--spalm-lr=1e+39"),
])
def test_a_learning_rate_float32_cannot_hold_is_refused_before_anything_is_made(argv, key, tmp_path, capsys, copy_run):
    argv = [str(copy_run) if word == "RUN" else word for word in argv]
    if argv[0] == "train":
        argv.append(f"log_dir={tmp_path / 'runs'}")
    status, _, err = lm(capsys, *argv)
    assert status == 2 and one_line(err).startswith(f"error: {key}: expected a number in (0, 3.40282e+38]")
    assert not (tmp_path / "runs").exists()


def test_an_lm_run_whose_config_is_no_yaml_is_named_by_every_command(tmp_path, capsys):
    run = trained(tmp_path)
    (run / "config.yaml").write_text("garbage: [\n")
    for argv in (["eval", run], ["sample", run]):
        status, _, err = lm(capsys, *argv)
        assert status == 2 and f"config file '{run / 'config.yaml'}' is not valid YAML at line 2" in one_line(err)


def test_a_full_disk_under_tensorboard_ends_training_in_one_line_naming_the_run(tmp_path, capsys, monkeypatch):
    import lm.workbench as workbench

    class FullDisk:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(workbench, "SummaryWriter", FullDisk)
    status, _, err = lm(capsys, "train", "-p", *TINY, f"log_dir={tmp_path}")
    assert status == 1
    assert one_line(err) == (f"error: cannot write '{tmp_path / 'copy__lm-trxl__0'}': [Errno 28] No space left on "
                             "device")
