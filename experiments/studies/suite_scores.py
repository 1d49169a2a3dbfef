"""Suite scores: each finished run's final and best evaluation, the normalised score that puts every task of a
suite on one [0, 1] scale, and the (runs × tasks) matrices of a possibly partial study that rliable aggregates.

- **MMER** (Morad et al. 2023, POPGym): the *maximum mean episodic reward*, the highest mean episode return of
  any of the run's evaluations. Here it is taken over the deterministic evaluations a run logs during training
  (`evaluations.csv`) and its final one (`summary.json`); POPGym took it over the stochastic policy's
  training episodes. Like POPGym's, it is the maximum of noisy estimates, so it is biased upwards by the
  evaluation noise (32 episodes in the POPGym suite study): read it beside the final return.
- **Normalised score**, what the suite aggregates:

  - POPGym tasks (`popgym-*` ids; episode returns in [-1, 1]): `0.5·R + 0.5`, so [-1, 1] maps to [0, 1]
    and the numbers read against the POPGym paper's. PositionOnlyCartPole's returns lie in [0, 1], so its
    normalised score lies in [0.5, 1].
  - Tasks that report a success rate (MiniGrid Memory, T-Maze): the success rate itself, not the return.
    MiniGrid's return is already in [0, 1] but it is `1 − 0.9·steps/max_steps` on success, so a perfect
    agent scores below 1 by an amount that depends on the maze and the step limit; the success rate is the
    share of episodes solved, reaches 1 when every episode is, and is the score the MiniGrid target of the
    suite study (success ≥ 0.9) and engram's other studies use. Its best over the evaluations is the MMER's
    counterpart.
  - Any other task (engram's return-scored tasks, Memory Gym): no normalised score; a suite leaves it out.

- **A partial study** (runs still landing, or backbones run on part of the tasks): the aggregate compares the
  backbones with at least one finished run, over the tasks where each of them has at least one
  (`suite_matrices` names the tasks left out and why). A backbone finished on fewer tasks than the rest is set
  aside when that keeps more (backbone, task) cells, with two backbones or more left to compare: one run on
  one task does not shrink everyone's aggregate to that task. rliable's stratified bootstrap needs, per
  backbone, the same number of runs on every task, which also weighs every task the same: a backbone's matrix
  keeps its `k` lowest-seeded finished runs per task, `k` the fewest it has on any included task. Runs that
  are not finished (pending, unfinished, diverged, failed) are never scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from experiments.studies.runs import FINISHED, Run

POPGYM_PREFIX = "popgym-"
"""the ids of POPGym's tasks (:mod:`envs.registry`'s ``popgym`` family)"""


def is_popgym(env_id: str) -> bool:
    """Whether `env_id` is a POPGym task, whose episode returns lie in [-1, 1]."""
    return env_id.startswith(POPGYM_PREFIX)


def popgym_normalised(episode_return: float) -> float:
    """POPGym's normalisation of a return in [-1, 1] to [0, 1]: `0.5·R + 0.5` (Morad et al. 2023)."""
    return 0.5 * episode_return + 0.5


def normalised_score(env_id: str, episode_return: float, success_rate: float | None) -> float | None:
    """The [0, 1] score of one evaluation (or of the best of a run's): `0.5·R + 0.5` for a POPGym task, the
    success rate for a task that reports one, else `None` (see the module doc)."""
    if is_popgym(env_id):
        return popgym_normalised(episode_return)
    return success_rate


def normalisation_name(env_id: str, success: bool) -> str | None:
    """What `normalised_score` is for a task, as the report names it; `None` where there is none."""
    if is_popgym(env_id):
        return "0.5·MMER + 0.5"
    return "best success rate" if success else None


@dataclass(frozen=True)
class RunScores:
    """The final and best deterministic evaluations of one finished run."""

    seed: int
    final_return: float
    """the mean episode return of the final evaluation (``summary.json``)"""
    best_return: float
    """the MMER: the highest mean return of any evaluation, the final one included"""
    final_success: float | None
    """the final evaluation's success rate (``None`` where the task reports none)"""
    best_success: float | None
    """the highest success rate of any evaluation, the final one included"""

    def normalised(self, env_id: str, final: bool = False) -> float | None:
        """The run's normalised MMER (`normalised_score` of its best evaluation), or with `final` of its final one."""
        if final:
            return normalised_score(env_id, self.final_return, self.final_success)
        return normalised_score(env_id, self.best_return, self.best_success)


def _best(logged: np.ndarray, final: float) -> float:
    finite = logged[np.isfinite(logged)]
    return max(float(finite.max()), final) if finite.size else final


def run_scores(run: Run) -> RunScores | None:
    """The scores of a finished run (`RunScores`); `None` for a run that is not finished."""
    if run.state() != FINISHED:
        return None
    assert run.summary is not None
    final_return = float(run.summary["final_mean_return"])
    final_success = run.summary.get("final_success_rate")
    best_success = None
    if final_success is not None:
        final_success = float(final_success)
        best_success = _best(run.curve(success=True)[1], final_success)
    return RunScores(int(run.config.get("seed", 0)), final_return, _best(run.curve(success=False)[1], final_return),
                     final_success, best_success)


@dataclass
class Suite:
    """The normalised MMER of the tasks and backbones that can be compared (a partial study's included)."""

    scores: dict[str, np.ndarray]
    """backbone → ``(k × tasks)`` normalised MMER, columns in :attr:`tasks`' order (rliable's layout)"""
    tasks: list[str]
    left_out: dict[str, str] = field(default_factory=dict)
    """task → why it is not in the aggregate"""
    not_compared: list[str] = field(default_factory=list)
    """backbones without a finished run on any task with a normalised score"""
    set_aside: dict[str, int] = field(default_factory=dict)
    """backbone → the number of tasks it finished, for backbones left out of the aggregate to keep more tasks"""
    unbalanced: dict[str, int] = field(default_factory=dict)
    """backbone → finished runs of included tasks left out so that every task has as many of its runs"""


def suite_matrices(normalised: Mapping[str, Mapping[str, Sequence[tuple[int, float]]] | None]) -> Suite:
    """The suite's score matrices from `task → backbone → [(seed, normalised MMER) of each finished run]`
    (`None` for a task without a normalised score; a backbone with no finished run may be absent or empty).

    The compared backbones are those with a finished run on some task that has a normalised score, less those
    set aside for having finished fewer tasks (see the module doc); a task is included when every compared
    backbone has a finished run on it; each backbone keeps, per included task,
    its `k` lowest-seeded runs, `k` the fewest it has on an included task (see the module doc)."""
    scored = {task: {b: sorted(runs) for b, runs in by_backbone.items() if runs}
              for task, by_backbone in normalised.items() if by_backbone is not None}
    backbones = list(dict.fromkeys(b for by_backbone in scored.values() for b in by_backbone))
    every = list(dict.fromkeys(b for by_backbone in normalised.values() if by_backbone for b in by_backbone))
    covered = {b: sum(b in by_backbone for by_backbone in scored.values()) for b in backbones}
    set_aside: dict[str, int] = {}
    while len(backbones) > 2:
        fewest = min(reversed(backbones), key=covered.__getitem__)  # the latest of those with the fewest tasks
        kept = [b for b in backbones if b != fewest]
        if len(kept) * _shared(scored, kept) <= len(backbones) * _shared(scored, backbones):
            break
        backbones, set_aside[fewest] = kept, covered[fewest]
    left_out = {task: "no normalised score (neither a POPGym task nor a success rate)"
                for task, by_backbone in normalised.items() if by_backbone is None}
    tasks = []
    for task, by_backbone in scored.items():
        missing = [b for b in backbones if b not in by_backbone]
        if missing:
            left_out[task] = "no finished run yet of " + ", ".join(missing)
        else:
            tasks.append(task)
    scores, unbalanced = {}, {}
    for backbone in backbones if tasks else []:
        k = min(len(scored[task][backbone]) for task in tasks)
        scores[backbone] = np.array([[value for _, value in scored[task][backbone][:k]] for task in tasks],
                                    dtype=np.float64).T
        dropped = sum(len(scored[task][backbone]) - k for task in tasks)
        if dropped:
            unbalanced[backbone] = dropped
    return Suite(scores, tasks, left_out, [b for b in every if b not in backbones and b not in set_aside],
                 set_aside=set_aside, unbalanced=unbalanced)


def _shared(scored: Mapping[str, Mapping[str, object]], backbones: Sequence[str]) -> int:
    """The number of tasks on which every one of `backbones` has a finished run."""
    return sum(all(b in by_backbone for b in backbones) for by_backbone in scored.values())

