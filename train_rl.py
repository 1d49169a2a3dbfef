"""Train memory agents: ``python train_rl.py --algo ppo --backbone gtrxl --env TMaze-v0 --env-kwargs length=10``.

Settings come from, in increasing precedence: defaults, ``--config FILE.yaml``, flags, and
``-p dotted.key=value`` overrides (e.g. ``-p gtrxl.memory_length=32 ppo.learning_rate=1e-3``).
Exit status: 0 done, 2 bad input (the message names it and the valid choices), 3 training
stopped on a non-finite loss, gradient or parameter (the last good checkpoint is kept).

Seed studies (README.md, "Seed studies"): several backbones or seeds, ``--study NAME`` or a study
file run every combination as an independent run under ``{log_dir}/{study}/``, in parallel, and
write a report; rerunning the same command resumes the study. Exit status 3 there means some runs
diverged or failed (the report counts them), 130 that the study was interrupted::

    python train_rl.py --backbone gtrxl trxl-i lstm --seed 0 1 2 3 4 --env TMaze-v0 --workers 2
    python train_rl.py study configs/studies/demo.yaml [--launcher ray --ray-address auto]
    python train_rl.py report runs/TMaze-v0__ppo

Language models on the same backbones (``experiments/lm_workbench.py``)::

    python train_rl.py lm train -c configs/lm/python.yaml --progress
    python train_rl.py lm eval runs/lm/python__lm-trxl__0 --memory-length 128 256
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

import experiments.threads  # noqa: F401  (first: OMP_WAIT_POLICY=PASSIVE before torch loads OpenMP)
from agents import ALGOS, PRECISIONS, NonFiniteError
from experiments.config import FIELDS, ConfigError, RunConfig, build_config, parse_override
from experiments.launchers import LAUNCHERS, LauncherError
from experiments.lm_workbench import main as lm_main
from experiments.report import DEFAULT_REPS, build_report
from experiments.run_dir import run_dir
from experiments.study import Grid, run_study
from experiments.training import train
from policies.registry import BACKBONES

# flag → RunConfig field; the help text is the field's docstring
FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--algo": ("algo", {"choices": list(ALGOS)}),
    "--backbone": ("backbone", {"choices": list(BACKBONES), "nargs": "+"}),
    "--env": ("env", {}),
    "--seed": ("seed", {"type": int, "nargs": "+"}),
    "--total-timesteps": ("total_timesteps", {"type": float}),
    "--n-envs": ("n_envs", {"type": int}),
    "--device": ("device", {}),
    "--threads": ("threads", {"type": int}),
    "--precision": ("precision", {"choices": list(PRECISIONS)}),
    "--log-dir": ("log_dir", {}),
    "--eval-freq": ("eval_freq", {"type": int}),
    "--n-eval-episodes": ("n_eval_episodes", {"type": int}),
    "--checkpoint-freq": ("checkpoint_freq", {"type": int}),
    "--stop-when-solved": ("stop_when_solved", {"type": int}),
    "--solved-lr-factor": ("solved_lr_factor", {"type": float}),
    "--solved-lr-streak": ("solved_lr_streak", {"type": int}),
}


def _field_help() -> dict[str, str]:
    """Attribute docstrings of RunConfig, read from its source."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(RunConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            docs[node.target.id] = after.value.value  # type: ignore[union-attr]
    return docs


def make_parser(study_file: bool = False) -> argparse.ArgumentParser:
    """The training parser; with ``study_file``, that of ``train_rl.py study FILE``."""
    parser = argparse.ArgumentParser(prog="train_rl.py study" if study_file else None, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if study_file:
        parser.add_argument("file", help="study file (YAML: name, config, settings, tasks, backbones, seeds)")
    docs = _field_help()
    parser.add_argument("--config", "-c", help="YAML file (see configs/)")
    for flag, (name, extra) in FLAGS.items():
        names = [flag, "-n"] if flag == "--total-timesteps" else [flag]
        default = FIELDS[name].default
        parser.add_argument(*names, dest=name, default=None, help=f"{docs.get(name, '')} (default: {default})",
                            **extra)
    parser.add_argument("--env-kwargs", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="environment keyword arguments")
    parser.add_argument("-p", "--param", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="dotted overrides, e.g. gtrxl.memory_length=32 ppo.learning_rate=1e-3")
    parser.add_argument("--resume", action="store_true", help="continue the run from its last checkpoint")
    parser.add_argument("--progress", "-P", action="store_true", help="show a progress bar")
    parser.add_argument("--verbose", "-v", type=int, default=0, help="SB3 verbosity (0, 1, 2)")
    study = parser.add_argument_group("seed studies (several backbones or seeds, --study, or a study file)")
    study.add_argument("--study", help="study name: runs go to {log_dir}/{study}/ (default: {env}__{algo}, or "
                                       "the study file's name)")
    study.add_argument("--workers", type=int, help="parallel runs of the local launcher, one torch thread each "
                                                   "(default: one per run, at most one per CPU core)")
    study.add_argument("--launcher", choices=LAUNCHERS, default="local",
                       help="local: a process pool on this machine; ray: Ray tasks (pip install '.[ray]')")
    study.add_argument("--ray-address", help="address of a running Ray cluster (default: start a local Ray)")
    study.add_argument("--retry-failed", action="store_true", help="rerun runs that diverged or failed")
    study.add_argument("--no-report", dest="report", action="store_false", help="skip the report at the end")
    study.add_argument("--reps", type=int, default=DEFAULT_REPS, help="bootstrap resamples of the report")
    return parser


def make_report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train_rl.py report", description=(
        "Write report.md and PNG figures of a study (or of any directory of runs) from the files on disk."))
    parser.add_argument("directory", help="the study directory, e.g. runs/TMaze-v0__ppo")
    parser.add_argument("--out", help="where to write the report (default: the study directory)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS, help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--solve-threshold", type=float,
                        help="score that counts as solving a task (default: the runs' success_threshold)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: %(default)s)")
    return parser


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The run settings given as flags, except --backbone and --seed (which may list several)."""
    flags = {name: getattr(args, name) for _, (name, _) in FLAGS.items()
             if getattr(args, name) is not None and name not in ("backbone", "seed")}
    flags.update({f"env_kwargs.{k}": v for k, v in map(parse_override, args.env_kwargs)})
    return flags


def is_study(args: argparse.Namespace) -> bool:
    """A study file, a study name, or several backbones or seeds make a study."""
    return hasattr(args, "file") or bool(args.study) or len(args.backbone or []) > 1 or len(args.seed or []) > 1


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The configuration of a single run: defaults < --config < flags < -p overrides."""
    flags = flags_from_args(args)
    flags.update({name: getattr(args, name)[0] for name in ("backbone", "seed") if getattr(args, name)})
    return build_config(args.config, flags, args.param)


def grid_from_args(args: argparse.Namespace) -> Grid:
    """The runs of a study: flags over the study file (if any); --backbone and --seed make the grid."""
    chosen = {"config_file": args.config, "flags": flags_from_args(args), "params": args.param,
              "backbones": args.backbone or [], "seeds": args.seed or [], "name": args.study}
    return Grid.from_file(args.file, **chosen) if hasattr(args, "file") else Grid(**chosen)


def train_one(config: RunConfig, args: argparse.Namespace) -> None:
    """A single run, in this process."""
    summary = train(config, resume=args.resume, progress_bar=args.progress, verbose=args.verbose)
    directory = run_dir(config)
    rate, stochastic = summary["final_success_rate"], summary["final_stochastic_success_rate"]
    print(f"{config.run_name()}: mean return {summary['final_mean_return']:.3f}"
          + ("" if rate is None else f", success rate {rate:.2f} (stochastic policy {stochastic:.2f})")
          + f" after {summary['env_steps']} steps ({summary['steps_per_second']:.0f} steps/s)")
    print(f"  summary:     {directory / 'summary.json'}")
    print(f"  tensorboard: tensorboard --logdir {directory}")


def report_main(argv: list[str]) -> int:
    """``train_rl.py report DIRECTORY``."""
    options = make_report_parser().parse_args(argv)
    try:
        path = build_report(options.directory, options.out, options.reps, options.solve_threshold, options.seed)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    if argv[:1] == ["lm"]:
        return lm_main(argv[1:])
    if argv[:1] == ["tune"]:
        from experiments.tune import main as tune_main

        return tune_main(argv[1:])
    try:
        study_file = argv[:1] == ["study"]
        args = make_parser(study_file).parse_args(argv[1:] if study_file else argv)
        if is_study(args):
            return run_study(grid_from_args(args), shlex.join(["python", "train_rl.py", *argv]), args.launcher,
                             args.workers, args.ray_address, args.retry_failed, args.report, args.reps, args.verbose)
        train_one(config_from_args(args), args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except LauncherError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except NonFiniteError as error:
        print(f"training stopped: {error}\nthe last good checkpoint is kept in the run's checkpoints/ directory",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
