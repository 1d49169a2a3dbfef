"""`train_rl.py report DIRECTORY`: `report.md` and figures of a study, from the files on disk."""

from __future__ import annotations

import argparse
import sys

from experiments.cli.parser import Distinct, OneLineParser, program, real, whole
from experiments.config import DEFAULT_REPS
from experiments.exits import error_line


def make_parser() -> argparse.ArgumentParser:
    """The parser of `train_rl.py report`."""
    parser = OneLineParser(prog=f"{program()} report", description=(
        "Write report.md and PNG figures of a study (or of any directory of runs) from the files on disk."))
    parser.add_argument("directory", metavar="DIR", help="the study directory, e.g. runs/TMaze-v0__ppo")
    parser.add_argument("--out", metavar="DIR", help=(
        "where to write the report (default: the study directory; a run directory's report needs --out); a "
        "report.md there that the report did not write, "
        "or a figure that its earlier report there does not show, is refused and never replaced, and so is a DIR "
        "at or inside a run directory, or inside a study or tune study directory other than the one reported"))
    parser.add_argument("--reps", type=whole, default=DEFAULT_REPS,
                        help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--solve-threshold", type=real,
                        help="score that counts as solving a task (default: the runs' success_threshold)")
    parser.add_argument("--seed", type=whole, default=0, help="seed of the bootstrap (default: %(default)s)")
    parser.add_argument("--env", nargs="+", action=Distinct, metavar="PATTERN", help=(
        "report only the runs of these env ids (shell patterns, e.g. 'popgym-*'); needs --out"))
    return parser


def main(argv: list[str]) -> int:
    """`train_rl.py report DIRECTORY`; exit status 2 when there is no run there that a report can read, or `--out`
    (or the study directory) cannot be written, holds a file the report did not write, or is a place that belongs
    to a run, or to another study or tune study (`experiments.studies.report.check_report_place`)."""
    parser = make_parser()
    options = parser.parse_args(argv)
    if options.env and options.out is None:
        parser.error(f"--env {' '.join(options.env)}: a report of some of the tasks needs --out DIR, so that it does "
                     "not replace the study's own report")
    from experiments.config import ConfigError
    from experiments.studies.report import build_report, check_analysis, check_report_place
    from experiments.validation import check_cli_options
    from experiments.writable import check_output

    try:
        check_cli_options(vars(options))
        check_analysis(options.reps, options.solve_threshold, options.seed, options.env,
                       ("--reps", "--solve-threshold", "--seed", "--env"))
        if options.out is not None:
            check_report_place(options.out, options.directory, ("DIR", "--out"))  # names the owner the report's way
            check_output("--out", options.out, directory=True)
        path = build_report(options.directory, options.out, options.reps, options.solve_threshold, options.seed,
                            options.env, arguments=("DIR", "--out"))
    except (FileNotFoundError, ConfigError) as error:
        print(error_line(error), file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0
