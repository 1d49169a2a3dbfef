"""``train_rl.py plot RUN_DIRS... [--out FILE.png] [--group-by KEY ...]``: learning curves of any runs.

Every run directory at or below the given paths is read (once, however many of the paths hold it); runs are grouped
by configuration keys (``backbone``, ``algo``, ``env``, ``task`` = env with its keyword arguments, ``seed``, or any
run setting such as ``n_envs``), and the figure is the study report's
(:func:`experiments.studies.plotting.curves_figure`): per group the mean and a 95 % bootstrap band over its
finished runs, every run as a thin line.

The figure goes to a new file: ``--out`` names one that must not exist yet (a file is never overwritten); without
it, ``curves.png`` in the current directory, or ``curves-2.png``, ... when an earlier plot holds that name.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from experiments.cli.parser import Distinct, OneLineParser, program, whole
from experiments.config import DEFAULT_REPS, REPS, ConfigError
from experiments.exits import error_line
from experiments.rules import PathName
from experiments.studies.runs import Run, counted, find_runs, readable, task_label

DEFAULT_OUT = Path("curves.png")
"""the figure's file without --out (the first free one of curves-2.png, ... when it is taken)"""
DEFAULT_GROUPING = ("algo", "backbone", "task")
"""the keys grouped by when none is given: those whose values differ between the runs"""


def make_parser() -> argparse.ArgumentParser:
    """The parser of `train_rl.py plot`."""
    parser = OneLineParser(prog=f"{program()} plot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", metavar="RUN_DIR",
                        help="run directories, or directories holding runs")
    parser.add_argument("--out", "-o", metavar="FILE", help=(
        f"the new image file to write; an existing one is refused, never overwritten (default: {DEFAULT_OUT}, or "
        f"{DEFAULT_OUT.stem}-2{DEFAULT_OUT.suffix}, ... when it exists)"))
    parser.add_argument("--group-by", nargs="+", action=Distinct, metavar="KEY",
                        help="configuration keys that make a group: backbone, algo, env, task, seed or any run "
                             "setting, section.key inside a section (ppo.gamma) "
                             f"(default: those of {', '.join(DEFAULT_GROUPING)} that differ between the runs)")
    parser.add_argument("--stochastic", action="store_true", help="plot the stochastic policy's evaluations")
    parser.add_argument("--title", help="figure title (default: the runs' task when they share one)")
    parser.add_argument("--reps", type=whole, default=DEFAULT_REPS,
                        help="bootstrap resamples of the band (default: %(default)s)")
    parser.add_argument("--seed", type=whole, default=0, help="seed of the bootstrap (default: %(default)s)")
    return parser


MISSING = "-"
"""the label of a run whose configuration lacks a key other runs have (`ppo.gamma` of a V-MPO run)"""


def config_value(run: Run, key: str) -> Any:
    """`run`'s value of `key`: `task` is the env with its keyword arguments, others are config keys, dotted for a
    key inside a section (`ppo.gamma`); `MISSING` for a key the run's configuration lacks."""
    if key == "task":
        return task_label(run.config)
    value: Any = run.config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def group_runs(runs: list[Run], keys: list[str]) -> dict[str, list[Run]]:
    """Runs by the values of `keys` (a label `v1 / v2`), in the order first seen; a key no run has is refused."""
    for key in keys:
        if all(config_value(run, key) == MISSING for run in runs):
            raise KeyError(f"--group-by {key!r}: not a run setting of any of the runs; valid keys: task, "
                           + ", ".join(runs[0].config) + " (or section.key, e.g. ppo.gamma)")
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[" / ".join(str(config_value(run, key)) for key in keys)].append(run)
    return dict(groups)


def check_image_path(flag: str, path: str) -> None:
    """Refuse (`ConfigError` naming `flag`) a file name whose suffix is no image format matplotlib writes."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(path).suffix.lstrip(".").lower() not in formats:
        raise ConfigError(f"{flag}={path!r}: expected a file name ending in an image format: "
                          f"{', '.join('.' + f for f in sorted(formats))}")


def varying_keys(runs: list[Run], candidates: tuple[str, ...] = DEFAULT_GROUPING) -> list[str]:
    """The `candidates` whose values differ between `runs` (`backbone` when none does)."""
    keys = [key for key in candidates if len({str(config_value(run, key)) for run in runs}) > 1]
    return keys or ["backbone"]


def runs_at(paths: list[str]) -> list[Run]:
    """The runs at or below `paths` that plot can read, each once (by its resolved directory), in the order given;
    every run it cannot read beside them is named on one line of stderr. `ConfigError` naming a path that holds
    none (`check_readable`)."""
    from experiments.studies.report import RUN_EXPECTED, check_readable

    runs: dict[Path, Run] = {}
    for given in paths:
        PathName().check("RUN_DIR", given)
    for path in map(Path, paths):
        if not path.is_dir():
            why = "it is a file" if path.exists() else "it does not exist"
            raise ConfigError(f"RUN_DIR {str(path)!r} holds no run that plot can read: {why}; expected {RUN_EXPECTED}")
        found = find_runs(path)
        check_readable(found, "plot", "RUN_DIR", path)
        for run in readable([run for run in found if run.directory.resolve() not in runs], "plot"):
            runs[run.directory.resolve()] = run
    return list(runs.values())


def main(argv: list[str]) -> int:
    """Write the figure to a new file; exit status 2 when a path holds no run that plot can read, a grouping key is
    unknown, `--reps` is outside `REPS`, or `--out` exists already or cannot be written."""
    options = make_parser().parse_args(argv)
    from envs.rules import Range
    from experiments.writable import check_new_file, check_output, free_name, write_new_file

    out = Path(options.out) if options.out is not None else free_name(DEFAULT_OUT)
    try:
        REPS.check("--reps", options.reps)
        Range(0, 2**32 - 1, integer=True).check("--seed", options.seed)  # numpy's seeds
        check_output("--out", options.out if options.out is not None else out)
        check_image_path("--out", str(out))
        check_new_file("--out", out)
        runs = runs_at(options.paths)
        groups = group_runs(runs, options.group_by or varying_keys(runs))
    except ConfigError as error:
        print(error_line(error), file=sys.stderr)
        return 2
    except KeyError as error:
        print(error_line(error.args[0]), file=sys.stderr)
        return 2
    from envs.atomic import made_folders, save_figure
    from experiments.studies.plotting import curves_figure

    success = all(run.has_success() for run in runs)
    tasks = {task_label(run.config) for run in runs}
    title = options.title or (tasks.pop() if len(tasks) == 1 else f"{len(tasks)} tasks")
    figure = curves_figure(groups, success, title, options.reps, options.seed, options.stochastic)
    with made_folders(out.parent):  # gone again when the figure does not fit
        while True:
            try:
                write_new_file(out, lambda tmp: save_figure(figure, tmp))
                break
            except FileExistsError:  # made by another process while the figure was drawn
                if options.out is not None:
                    print(f"error: --out {str(out)!r}: made by another process meanwhile; a file is never overwritten",
                          file=sys.stderr)
                    return 2
                out = free_name(out)
    print(f"{out}: {counted(len(runs), 'run')} in {counted(len(groups), 'group')}: "
          + ", ".join(f"{name} ({len(members)})" for name, members in groups.items()))
    return 0
