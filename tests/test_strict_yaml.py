"""Every YAML file engram reads is strict: a repeated key is refused naming it and both lines, an alias bomb or an
alias inside its own anchor is refused before anything reads it, and merge keys keep their meaning."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from experiments import strict_yaml
from experiments.config import ConfigError, build_config, load_yaml, parse_value
from experiments.studies.runs import Run
from experiments.studies.study import Grid
from experiments.studies.tune_space import load_space
from lm.workbench import build_lm_config

BOMB = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
                  *(f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True))])
"""nine levels of nine aliases: 387 million values once written out, in 400 bytes"""


@pytest.mark.parametrize("text, key, lines", [
    ("n_envs: 4\nn_envs: 8\n", "n_envs", (1, 2)),
    ("ppo:\n  n_steps: 16\nn_envs: 2\nppo:\n  gamma: 0.9\n", "ppo", (1, 4)),
    ("ppo:\n  n_steps: 16\n  gamma: 0.9\n  n_steps: 32\n", "ppo.n_steps", (2, 4)),
    ("tasks:\n  - env: TMaze-v0\n    env: CountRecall-v0\n", "tasks[0].env", (2, 3)),
    ("'a': 1\n\"a\": 2\n", "a", (1, 2)),  # one key, quoted two ways
    ("{a: 1, 'a': 2}", "a", (1, 1)),
])
def test_a_repeated_key_is_refused_naming_it_and_both_lines(text, key, lines):
    with pytest.raises(strict_yaml.StrictYAMLError) as raised:
        strict_yaml.load(text)
    assert raised.value.problem.startswith(f"key {key!r} repeats the one at line {lines[0]}")
    assert raised.value.problem_mark.line + 1 == lines[1]


def test_merge_keys_may_be_overridden_and_plain_documents_load_as_pyyaml_loads_them():
    text = "base: &base {n_steps: 16, gamma: 0.9}\nppo:\n  <<: *base\n  gamma: 0.99\nlist: [1, 2]\n"
    assert strict_yaml.load(text) == yaml.safe_load(text) == {
        "base": {"n_steps": 16, "gamma": 0.9}, "ppo": {"n_steps": 16, "gamma": 0.99}, "list": [1, 2]}
    assert strict_yaml.load("") is None


def test_an_alias_bomb_is_refused_at_once():
    started = time.perf_counter()
    with pytest.raises(strict_yaml.StrictYAMLError, match="aliases expand to more than 100,000 values"):
        strict_yaml.load(BOMB)
    assert time.perf_counter() - started < 1.0
    assert strict_yaml.load("a: &a [1, 2]\nb: [*a, *a]\n") == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(strict_yaml.StrictYAMLError, match=r"a\[0\] is an alias of the anchor it sits in"):
        strict_yaml.load("a: &a [*a]\n")


@pytest.mark.parametrize("reader, suffix", [
    (load_yaml, "run configuration"),
    (lambda path: Grid.from_file(path), "study file"),
    (lambda path: load_space([path]), "search space"),
    (lambda path: build_lm_config(path), "LM configuration"),
])
def test_every_reader_of_settings_files_uses_the_strict_loader(reader, suffix, tmp_path: Path):
    path = tmp_path / "settings.yaml"
    path.write_text("seeds: 2\nseeds: 3\n")
    with pytest.raises(ConfigError) as raised:
        reader(path)
    message = str(raised.value)
    assert message == (f"config file {str(path)!r} is not valid YAML at line 2, column 1: key 'seeds' repeats the one "
                       "at line 1 (a key may appear once in a mapping)"), suffix
    path.write_text(BOMB)
    with pytest.raises(ConfigError, match="aliases expand to more than") as raised:
        reader(path)
    assert len(str(raised.value)) < 300


def test_a_runs_own_files_and_command_line_values_are_read_strictly(tmp_path: Path):
    (tmp_path / "config.yaml").write_text("env: TMaze-v0\nenv: CountRecall-v0\n")
    assert "repeats the one at line 1" in Run(tmp_path).problem()
    with pytest.raises(ConfigError, match=r"^'\{n_steps: 1, n_steps: 2\}': key 'n_steps' repeats the one at line 1"):
        parse_value("{n_steps: 1, n_steps: 2}")


@pytest.mark.parametrize("text, read", [
    ("12:30:00", "12:30:00"), ("-1:30", "-1:30"), ("1:30.5", "1:30.5"),  # YAML 1.1's base 60: the text, no number
    ("017", 17), ("-017", -17), ("00", 0),  # YAML 1.1's octal: base 10, as Python's int and YAML 1.2 read it
    ("0x10", 16), ("1_000", 1000), ("0.5", 0.5),
])
def test_a_number_in_a_file_is_the_number_the_command_line_reads(text, read):
    assert strict_yaml.load(f"a: {text}") == {"a": read}


@pytest.mark.parametrize("text", ["12:30:00", "017", "0o17", "0x10", "4.0", "1e3", "1:30.5"])
def test_a_setting_in_a_file_and_on_the_command_line_is_one_value_or_one_refusal(text, tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text(f"seed: {text}\n")
    outcomes = []
    for door in (lambda: build_config(file), lambda: build_config(overrides=[f"seed={text}"])):
        try:
            outcomes.append(door().seed)
        except ConfigError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1]
