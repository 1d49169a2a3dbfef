"""The learning rate after solving: once a run's evaluations have reached the success threshold often enough in
a row (`solved_lr_streak`), its schedule is scaled by `solved_lr_factor` for the rest of training."""

from __future__ import annotations

from collections.abc import Callable

Schedule = Callable[[float], float]


class ScaledSchedule:
    """A learning-rate schedule times a constant factor: `lr(p) = factor · base(p)` at progress remaining `p`
    (SB3's schedule convention), the rate after solving (`solved_lr_factor`)."""

    def __init__(self, base: Schedule, factor: float) -> None:
        self.base, self.factor = base, factor

    def __call__(self, progress_remaining: float) -> float:
        return self.factor * self.base(progress_remaining)


def solved_schedule(schedule: Schedule, factor: float) -> Schedule:
    """`schedule` scaled by `factor` once: a schedule already scaled, or a factor of 1, leaves it as it is."""
    if factor == 1.0 or isinstance(schedule, ScaledSchedule):
        return schedule
    return ScaledSchedule(schedule, factor)
