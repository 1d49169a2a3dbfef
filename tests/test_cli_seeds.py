"""``inspect`` and ``evaluate`` seed episode i with ``seed + i``: a ``--seed`` whose episodes would pass numpy's
largest seed (2**32 - 1) is refused on one line naming it, the largest valid one and the count it depends on, as
``train`` narrows its seeds so that its evaluation seed stays in range."""

from __future__ import annotations

import pytest

import train_rl
from experiments.cli.parser import first_seed
from experiments.config import ConfigError

TOP = 2**32 - 1


@pytest.mark.parametrize("argv,message", [
    (["inspect", "nowhere", "--seed", str(TOP), "--episodes", "2"],
     f"--seed={TOP}: expected an integer in [0, {TOP - 1}] (episode i is seeded seed + i, at most 2**32 - 1, with "
     "--episodes 2)"),
    (["inspect", "nowhere", "--seed", str(TOP - 2)], f"--seed={TOP - 2}: expected an integer in [0, {TOP - 3}]"),
    (["evaluate", "nowhere", "--seed", str(TOP), "--record", "x.gif", "--record-episodes", "2"],
     f"--seed={TOP}: expected an integer in [0, {TOP - 1}] (episode i is seeded seed + i, at most 2**32 - 1, with "
     "--record-episodes 2)"),
    (["evaluate", "nowhere", "--seed", str(TOP - 1), "--render", "--record-episodes", "3"],
     f"--seed={TOP - 1}: expected an integer in [0, {TOP - 2}]"),
    (["evaluate", "nowhere", "--seed", str(TOP + 1)], f"--seed={TOP + 1}: expected an integer in [0, {TOP}]"),
])
def test_a_seed_whose_episodes_pass_numpys_largest_is_refused(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train_rl.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["inspect", "nowhere", "--seed", str(TOP - 1), "--episodes", "2"],
    ["evaluate", "nowhere", "--seed", str(TOP), "--n-envs", "2"],  # copies are seeded from SeedSequence, not seed + i
    ["evaluate", "nowhere", "--seed", str(TOP - 1), "--record", "x.gif", "--record-episodes", "2"],
])
def test_a_seed_whose_episodes_stay_in_range_is_taken(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train_rl.main(argv) == 2
    assert "neither a run directory nor a saved model" in capsys.readouterr().err  # past the seed's check


def test_a_runs_own_evaluation_seed_is_checked_too():
    assert first_seed(None, TOP - 1, 2, "--episodes") == TOP - 1
    assert first_seed(5, TOP, 2, "--episodes") == 5
    with pytest.raises(ConfigError, match=r"--seed \(default: the run's evaluation seed\)=4294967295: expected an "
                                          r"integer in \[0, 4294967294\]"):
        first_seed(None, TOP, 2, "--episodes")
