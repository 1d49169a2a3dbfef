"""The suite part of the study report (experiments.studies.suite_scores): each run's final and best (MMER)
evaluation, the normalised score (0.5·R + 0.5 for POPGym, the success rate for MiniGrid), the suite's IQM and
P(X > Y), and a partial study that leaves out the tasks not every backbone has finished,
on synthetic run directories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rliable import metrics

from experiments.studies.report import Study, build_report
from experiments.studies.runs import Run
from experiments.studies.suite_scores import normalised_score, run_scores, suite_matrices
from tests.test_report import fake_run

REPS = 100
P1, P2, MG = "popgym-RepeatPreviousEasy-v0", "popgym-CountRecallEasy-v0", "MiniGrid-MemoryS11-v0"
BEST = {  # backbone → task → each seed's MMER (POPGym: a return in [-1, 1]; MiniGrid: the best success rate)
    "gtrxl": {P1: [0.9, 0.8, 1.0], P2: [0.2, 0.4, 0.0], MG: [1.0, 0.75, 0.9]},
    "gru": {P1: [0.5, 0.6, 0.4], P2: [-0.2, -0.4, -0.3], MG: [0.5, 0.6, 0.7]},
}


def popgym_run(root: Path, env: str, backbone: str, seed: int, best: float, **kwargs) -> Path:
    """A finished POPGym run whose evaluations peak at ``best`` in the middle and end 0.1 below it."""
    return fake_run(root, backbone, seed, best - 0.1, env=env, env_kwargs={}, success=False,
                    curve=[-1.0, best, best - 0.2], **kwargs)


def minigrid_run(root: Path, backbone: str, seed: int, best: float) -> Path:
    """A finished MiniGrid run whose best success rate is ``best`` (the final one when ``best`` is 0.75) and whose
    returns (0.9 × the success rate, as a step penalty would make them) never reach it."""
    curve, final = ([0.25, 0.5], 0.75) if best == 0.75 else ([0.25, best, best - 0.25], best - 0.05)
    return fake_run(root, backbone, seed, final, env=MG, env_kwargs={}, curve=curve,
                    returns=[0.9 * value for value in [*curve, final]])


def suite_study(root: Path) -> Path:
    for backbone, tasks in BEST.items():
        for env, bests in tasks.items():
            for seed, best in enumerate(bests):
                if env == MG:
                    minigrid_run(root, backbone, seed, best)
                else:
                    popgym_run(root, env, backbone, seed, best)
    return root


def normalised(backbone: str) -> np.ndarray:
    """The (seeds × tasks) normalised MMER of ``BEST``."""
    tasks = BEST[backbone]
    return np.array([[0.5 * b + 0.5 for b in tasks[P1]], [0.5 * b + 0.5 for b in tasks[P2]], tasks[MG]]).T


def test_mmer_is_the_best_evaluation_the_final_one_included(tmp_path):
    peaked = Run(popgym_run(tmp_path, P1, "gtrxl", 0, 0.6))
    scores = run_scores(peaked)
    assert (scores.final_return, scores.best_return) == pytest.approx((0.5, 0.6))
    assert scores.final_success is None and scores.best_success is None
    assert scores.normalised(P1) == pytest.approx(0.8)
    last = Run(fake_run(tmp_path, "gru", 0, 0.3, env=P1, env_kwargs={}, success=False, curve=[-0.5, 0.1]))
    assert run_scores(last).best_return == pytest.approx(0.3)  # the final evaluation is the best one
    unfinished = Run(fake_run(tmp_path, "lstm", 0, None, state="interrupted", env=P1, env_kwargs={}, success=False,
                              curve=[0.9]))
    assert run_scores(unfinished) is None  # listed, never scored


def test_popgym_returns_map_to_the_unit_interval_and_minigrid_scores_its_success_rate(tmp_path):
    assert [normalised_score(P1, r, None) for r in (-1.0, 0.0, 0.2, 1.0)] == pytest.approx([0.0, 0.5, 0.6, 1.0])
    assert normalised_score(MG, 0.93, 1.0) == 1.0
    assert normalised_score("MemoryChain-v0", 0.93, None) is None
    scores = run_scores(Run(minigrid_run(tmp_path, "gtrxl", 0, 0.9)))
    assert (scores.best_success, scores.final_success) == pytest.approx((0.9, 0.85))
    assert (scores.best_return, scores.final_return) == pytest.approx((0.81, 0.765))
    assert scores.normalised(MG) == pytest.approx(0.9)


def test_suite_iqm_pools_every_task_and_seed(tmp_path):
    study = Study.analyse(suite_study(tmp_path), reps=REPS)
    suite = study.suite
    assert sorted(suite.tasks) == sorted([P1, P2, MG])
    assert suite.left_out == {} and suite.unbalanced == {} and suite.not_compared == []
    order = [[P1, P2, MG].index(task) for task in suite.tasks]
    for backbone in BEST:
        assert np.allclose(suite.scores[backbone], normalised(backbone)[:, order])
    gtrxl = normalised("gtrxl")  # 0.5, 0.6, 0.7, 0.75, 0.9, 0.9, 0.95, 1, 1: the middle five
    iqm = study.suite_stats.estimates["gtrxl"]["iqm"]
    assert iqm.value == pytest.approx(0.84) == metrics.aggregate_iqm(gtrxl)
    assert iqm.low <= iqm.value <= iqm.high
    assert study.suite_stats.estimates["gru"]["mean"].value == pytest.approx(normalised("gru").mean())


def test_the_suite_scores_final_evaluations_beside_the_best(tmp_path):
    """A run that peaks and falls back (every POPGym run here ends 0.1 below its MMER; a MiniGrid run 0.05 below its
    best success rate) scores lower in the final aggregate than in the MMER one, by exactly that fall."""
    study = Study.analyse(suite_study(tmp_path), reps=REPS)
    order = [[P1, P2, MG].index(task) for task in study.suite.tasks]
    fall = np.array([[0.05, 0.05, 0.0 if best == 0.75 else 0.05] for best in BEST["gtrxl"][MG]])
    final = normalised("gtrxl") - fall
    assert np.allclose(study.suite_final_stats.scores["gtrxl"], final[:, order])
    assert study.suite_final_stats.estimates["gtrxl"]["mean"].value == pytest.approx(final.mean())
    text = build_report(tmp_path, reps=REPS).read_text()
    assert "### Suite: normalised final evaluation" in text and (tmp_path / "scores_suite_final.png").is_file()


def test_probability_of_improvement_is_one_when_gtrxl_dominates(tmp_path):
    path = build_report(suite_study(tmp_path), reps=REPS)
    improvement = Study.analyse(tmp_path, reps=REPS).suite_stats.improvement
    assert (improvement["gtrxl", "gru"].value, improvement["gtrxl", "gru"].low) == (1.0, 1.0)
    assert improvement["gru", "gtrxl"].value == 0.0
    text = path.read_text()
    assert "- P(gtrxl > gru) = 1.000 [1.000, 1.000]" in text
    assert (tmp_path / "scores_suite.png").stat().st_size > 1000
    assert (tmp_path / "improvement_suite.png").stat().st_size > 1000


def test_the_report_gives_final_best_and_normalised_scores_per_task_and_seed(tmp_path):
    text = build_report(suite_study(tmp_path), reps=REPS).read_text()
    assert "| popgym-RepeatPreviousEasy-v0 | 0.750 ± 0.041 (3/3) | 0.950 ± 0.041 (3/3) | yes |" in text  # gru first
    popgym_table = text.split("## popgym-RepeatPreviousEasy-v0")[1].split("### Reliability")[0]
    assert ("| backbone | finished | final return | final, normalised | best return (MMER) | "
            "normalised MMER (0.5·MMER + 0.5) |") in popgym_table
    assert ("| gtrxl | 3/3 | 0.800 ± 0.082 (0: 0.800, 1: 0.700, 2: 0.900) | 0.900 ± 0.041 (0: 0.900, 1: 0.850, "
            "2: 0.950) | 0.900 ± 0.082 (0: 0.900, 1: 0.800, 2: 1.000) | 0.950 ± 0.041 (0: 0.950, 1: 0.900, "
            "2: 1.000) |") in popgym_table
    minigrid_table = text.split("## MiniGrid-MemoryS11-v0")[1].split("### Reliability")[0]
    assert "| backbone | finished | final return | best return (MMER) | final success rate | best success rate |" in (
        minigrid_table)
    assert ("| gtrxl | 3/3 | 0.765 ± 0.073 (0: 0.855, 1: 0.675, 2: 0.765) | 0.795 ± 0.092 (0: 0.900, 1: 0.675, "
            "2: 0.810) | 0.850 ± 0.082 (0: 0.950, 1: 0.750, 2: 0.850) | 0.883 ± 0.103 (0: 1.000, 1: 0.750, "
            "2: 0.900) |") in minigrid_table


def test_a_partial_study_leaves_out_the_tasks_a_backbone_has_not_finished(tmp_path):
    suite_study(tmp_path)
    auto = "popgym-AutoencodeEasy-v0"
    popgym_run(tmp_path, auto, "gtrxl", 0, 0.1)
    fake_run(tmp_path, "gru", 0, None, state="interrupted", env=auto, env_kwargs={}, success=False, curve=[0.9])
    fake_run(tmp_path, "gru", 1, None, state="diverged", env=auto, env_kwargs={}, success=False, curve=[0.9])
    fake_run(tmp_path, "gru", 2, None, state="new", env=auto, env_kwargs={}, success=False)
    (tmp_path / f"{P1}__ppo-gru__2" / "summary.json").unlink()  # gru's seed 2 on P1 has not finished
    study = Study.analyse(tmp_path, reps=REPS)
    suite = study.suite
    assert suite.left_out == {auto: "no finished run yet of gru"}
    assert sorted(suite.tasks) == sorted([P1, P2, MG])
    order = [[P1, P2, MG].index(task) for task in suite.tasks]
    assert np.allclose(suite.scores["gru"], normalised("gru")[:2, order])  # two seeds everywhere: the lowest two
    assert suite.scores["gtrxl"].shape == (3, 3) and suite.unbalanced == {"gru": 2}
    text = build_report(tmp_path, reps=REPS).read_text()
    assert "| popgym-AutoencodeEasy-v0 | (0/3) | 0.550 ± 0.000 (1/1) | no: no finished run yet of gru |" in text
    assert "Aggregates over 3 of 4 tasks" in text and "gru: 2 finished runs left out to balance." in text
    assert (f"Not scored (not finished): diverged (1): {auto}__ppo-gru__1; unfinished (1): {auto}__ppo-gru__0; "
            f"pending (2): {auto}__ppo-gru__2, {P1}__ppo-gru__2.") in text


def test_a_backbone_run_on_one_task_is_set_aside_rather_than_shrinking_the_suite_to_it(tmp_path):
    """Three runs of a new backbone on the first task of a finished study: the aggregate keeps every task of the
    others and sets the newcomer aside (named, with its task count); where dropping it would keep fewer
    (backbone, task) cells, or leave one backbone, nothing is set aside."""
    runs = {b: [(seed, 0.5) for seed in range(3)] for b in ("gtrxl", "gru", "lstm")}
    suite = suite_matrices({P1: {**runs, "ffm": [(0, 0.9)]}, P2: runs, MG: runs})
    assert suite.tasks == [P1, P2, MG] and list(suite.scores) == ["gtrxl", "gru", "lstm"]
    assert suite.set_aside == {"ffm": 1} and suite.left_out == {} and suite.not_compared == []
    newcomers = {"ffm": [(0, 0.9)], "mingru": [(0, 0.7)]}  # two of them on two tasks: 5 × 2 cells beat 4 × 2
    suite = suite_matrices({P1: {**runs, **newcomers}, P2: {**runs, **newcomers}, MG: runs})
    assert suite.tasks == [P1, P2] and suite.set_aside == {}
    assert suite.left_out == {MG: "no finished run yet of ffm, mingru"}
    suite = suite_matrices({P1: {"gtrxl": [(0, 0.5)], "ffm": [(0, 0.9)]}, P2: {"gtrxl": [(0, 0.5)]}})
    assert suite.tasks == [P1] and suite.set_aside == {}
    suite_study(tmp_path)
    fake_run(tmp_path, "ffm", 0, 0.5, env=P1, env_kwargs={}, success=False, curve=[0.5])
    text = build_report(tmp_path, reps=REPS).read_text()
    assert ("Set aside from the aggregate, to keep the tasks the others share (finished on fewer tasks): "
            "ffm (1 task).") in text


def test_without_a_comparable_task_there_is_no_aggregate():
    suite = suite_matrices({P1: {"gtrxl": [(0, 0.9)], "gru": []}, MG: {"gru": [(1, 0.5)]},
                            "MemoryChain-v0": None, P2: {"lstm": []}})
    assert suite.tasks == [] and suite.scores == {}
    assert suite.left_out == {"MemoryChain-v0": "no normalised score (neither a POPGym task nor a success rate)",
                              P1: "no finished run yet of gru", MG: "no finished run yet of gtrxl",
                              P2: "no finished run yet of gtrxl, gru"}
    assert suite.not_compared == ["lstm"]


def test_tasks_without_a_normalised_score_make_no_suite(tmp_path):
    for seed in range(2):
        for length in (5, 10):
            fake_run(tmp_path / str(length), "gtrxl", seed, 0.5, env="MemoryChain-v0", env_kwargs={"length": length},
                     success=False, curve=[0.5])
    study = Study.analyse(tmp_path, reps=REPS)
    assert study.suite is None and study.suite_stats is None
