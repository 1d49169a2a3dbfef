"""``train_rl.py list``: one line per backbone, attention, position scheme, env id, config, learner and
hyper-parameter entry, with the summary its registry or file gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import policies
import train_rl
from agents import ALGOS
from envs import ENV_IDS
from experiments.catalogues import first_sentence, summary
from experiments.cli.parser import plain_text

REPO = Path(__file__).resolve().parents[1]


def listed(what: str, capsys) -> dict[str, str]:
    """``train_rl.py list WHAT`` as name → summary."""
    assert train_rl.main(["list", what]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {name: text.strip() for name, _, text in (line.partition("  ") for line in lines)}


@pytest.mark.parametrize("what,registry", [("backbones", policies.BACKBONES), ("attentions", policies.ATTENTIONS),
                                           ("learners", ALGOS)])
def test_every_registry_entry_is_listed_with_its_summary(what, registry, capsys):
    shown = listed(what, capsys)
    assert list(shown) == list(registry)
    for name, entry in registry.items():
        assert shown[name] == plain_text(summary(entry)) and shown[name], name
    if what == "backbones":
        assert shown["gtrxl"] == "GTrXL: TrXL-I with gating layers (Parisotto et al. 2020)"


def test_position_schemes_are_listed(capsys):
    assert list(listed("positions", capsys)) == list(policies.POSITIONS)


def test_envs_list_engram_tasks_with_summaries_and_gymnasium_ids(capsys):
    shown = listed("envs", capsys)
    assert shown["TMaze-v0"].startswith("Passive T-Maze (Ni et al. 2023")
    assert set(ENV_IDS) <= set(shown)
    assert shown["MiniGrid-MemoryS9-v0"].startswith("MiniGrid")
    assert any(name.startswith("popgym-") for name in shown)


def test_configs_list_every_yaml_with_its_first_sentence(capsys):
    shown = listed("configs", capsys)
    files = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "configs").rglob("*.yaml"))
    assert sorted(shown) == files
    assert shown["configs/demo.yaml"] == ("make demo: GTrXL learns the passive T-Maze of Ni et al. (2023) with a "
                                          "20-step corridor.")
    assert shown["configs/memory_chain.yaml"] == "MemoryChain (bsuite memory_len-like): one context bit at t=0, " \
                                                 "queried at t=8."


def test_hyperparams_list_every_entry_with_its_comment_and_conditions(capsys):
    shown = listed("hyperparams", capsys)
    assert {"configs/hyperparams/ppo.yml#MiniGrid-Memory*", "configs/hyperparams/ppo.yml#MiniGrid-MemoryS9-v0",
            "configs/hyperparams/ppo.yml#TMaze-v0", "configs/hyperparams/ppo.yml#Pendulum-v1",
            "configs/hyperparams/vmpo.yml#TMaze-v0"} <= set(shown)
    assert shown["configs/hyperparams/ppo.yml#TMaze-v0"] == (
        "Passive T-Maze with a corridor of 100 steps or more: the KL(U‖π) barrier at 0.003 and no entropy bonus. "
        "[when env_kwargs.length >= 100]")


def test_first_sentence_keeps_citations_and_cuts_long_ones():
    assert first_sentence("T-Maze of Ni et al. (2023), Sec. 3.\nThe next one.") == "T-Maze of Ni et al. (2023), Sec. 3."
    assert first_sentence("One.\n\nTwo.") == "One."
    long = first_sentence("word " * 40, width=30)
    assert len(long) <= 30 and long.endswith(" …")


def test_unknown_catalogue_exits_2_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_rl.main(["list", "models"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'models' (choose from 'backbones', 'attentions'" in capsys.readouterr().err


def test_bare_list_shows_every_catalogue_under_its_heading(capsys):
    assert train_rl.main(["list"]) == 0
    out = capsys.readouterr().out
    headings = [line[:-1] for line in out.splitlines() if line.endswith(":") and "  " not in line]
    assert headings == ["backbones", "attentions", "positions", "envs", "configs", "learners", "hyperparams"]
    assert "\ngtrxl  " in out and "configs/demo.yaml" in out


def test_listing_configs_loads_no_torch():
    code = ("import sys, train_rl\ntrain_rl.main(['list', 'configs'])\n"
            "print(sorted({'torch', 'stable_baselines3'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"
