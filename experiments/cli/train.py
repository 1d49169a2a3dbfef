"""``train_rl.py [train]`` and ``train_rl.py study FILE``: one run, or a seed study of several.

Settings come from, in increasing precedence: defaults, the tuned entry for the env in the learner's hyper-parameter
file (configs/hyperparams/<algo>.yml; --hyperparams none: none; docs/hyperparams.md), ``--config FILE.yaml``, flags,
and ``-p dotted.key=value`` overrides (e.g. ``-p gtrxl.memory_length=32 ppo.learning_rate=1e-3``). The entry applied
is named on one line (stderr) and recorded in the run's config.yaml.
Exit status: 0 done, 1 a write failed (a full disk, a read-only file system: the file and errno named), 2 bad
input (the message names it and the valid choices; also a run directory that another process is writing or that
already holds a run), 3 training stopped on a non-finite loss, gradient or parameter (the message names them, the
step, and the last checkpoint if there is one), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM)
(docs/run-directories.md).

Seed studies (docs/studies.md): several backbones or seeds, ``--study NAME`` or a study
file run every combination as an independent run under ``{log_dir}/{study}/``, in parallel, and
write a report; rerunning the same command resumes the study. Exit status 3 there means some runs
diverged or failed (the report counts them), 130 that the study was interrupted::

    python train_rl.py --backbone gtrxl trxl-i lstm --seed 0 1 2 3 4 --env TMaze-v0 --workers 2
    python train_rl.py study configs/studies/demo.yaml [--launcher ray --ray-address auto]
    python train_rl.py report runs/TMaze-v0__ppo
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from typing import Any

from experiments.cli.parser import Distinct, OneLineParser, Wrappers, invocation, program, real, whole
from experiments.config import DEFAULT_REPS, FIELDS, field_default
from experiments.config_files import config_path
from experiments.exits import error_line
from experiments.studies.launchers import DEFAULT_MAX_RETRIES, LAUNCHERS


class RegistryKey:
    """An argparse `type` that accepts the keys of a registry, imported on first use: `--help` never
    imports it (argparse's `choices` would, to list them), a given value is checked as `choices` does."""

    def __init__(self, module: str, registry: str) -> None:
        self.module, self.registry = module, registry

    def __call__(self, value: str) -> str:
        names = list(getattr(importlib.import_module(self.module), self.registry))
        if value not in names:
            raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(names)})")
        return value


# flag → RunConfig field; the help text is the field's docstring
FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--algo": ("algo", {"type": RegistryKey("agents", "ALGOS"), "metavar": "ALGO"}),
    "--backbone": ("backbone", {"type": RegistryKey("policies.registry", "BACKBONES"), "nargs": "+", "action": Distinct,
                                "metavar": "BACKBONE"}),
    "--env": ("env", {}),
    "--gym-packages": ("gym_packages", {"nargs": "+", "action": Distinct, "metavar": "MODULE"}),
    "--env-wrapper": ("env_wrapper", {"nargs": "+", "action": Wrappers, "metavar": "WRAPPER"}),
    "--vec-env": ("vec_env", {"type": RegistryKey("envs.registry", "VEC_ENVS"), "metavar": "{dummy,subproc,torch}"}),
    "--seed": ("seed", {"type": whole, "nargs": "+", "action": Distinct}),
    "--total-timesteps": ("total_timesteps", {"type": real}),
    "--n-envs": ("n_envs", {"type": whole}),
    "--device": ("device", {}),
    "--threads": ("threads", {"type": whole}),
    "--precision": ("precision", {"type": RegistryKey("agents", "PRECISIONS"), "metavar": "PRECISION"}),
    "--log-dir": ("log_dir", {}),
    "--eval-freq": ("eval_freq", {"type": whole}),
    "--n-eval-episodes": ("n_eval_episodes", {"type": whole}),
    "--checkpoint-freq": ("checkpoint_freq", {"type": whole}),
    "--stop-when-solved": ("stop_when_solved", {"type": whole}),
    "--solved-lr-factor": ("solved_lr_factor", {"type": real}),
    "--solved-lr-streak": ("solved_lr_streak", {"type": whole}),
    "--hyperparams": ("hyperparams", {"metavar": "FILE|none"}),
}
LISTED = {"algo": "learners", "backbone": "backbones", "env": "envs", "hyperparams": "hyperparams"}
"""fields whose valid values ``train_rl.py list`` shows"""


def make_parser(study_file: bool = False) -> argparse.ArgumentParser:
    """The training parser; with `study_file`, that of `train_rl.py study FILE`."""
    parser = OneLineParser(prog=f"{program()} study" if study_file else f"{program()} [train]",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    if study_file:
        parser.add_argument("file", help="study file (YAML: name, config, settings, tasks, backbones, seeds), or the "
                                         "name of a shipped one (demo, studies/demo)")
    parser.add_argument("--config", "-c", help=f"YAML file, or the name of a shipped one (demo, configs/demo.yaml; "
                                               f"{program()} list configs)")
    for flag, (name, extra) in FLAGS.items():
        names = [flag, "-n"] if flag == "--total-timesteps" else [flag]
        listed = f"; {program()} list {LISTED[name]}" if name in LISTED else ""
        parser.add_argument(*names, dest=name, default=None,
                            help=f"{FIELDS[name].metadata['doc']}{listed} (default: {field_default(FIELDS[name])})",
                            **extra)
    parser.add_argument("--env-kwargs", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="environment keyword arguments")
    parser.add_argument("-p", "--param", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="dotted overrides, e.g. gtrxl.memory_length=32 ppo.learning_rate=1e-3")
    parser.add_argument("--resume", action="store_true", help="continue the run from its last checkpoint")
    parser.add_argument("--progress", "-P", action="store_true",
                        help="show a progress bar also when the output is not a terminal (on a terminal it shows "
                             "by default; not in CI, logs or studies)")
    parser.add_argument("--verbose", "-v", type=whole, default=0, help="SB3 verbosity (0, 1, 2)")
    study = parser.add_argument_group("seed studies (several backbones or seeds, --study, or a study file)")
    study.add_argument("--study", help="study name: runs go to {log_dir}/{study}/ (default: {env}__{algo}, or "
                                       "the study file's name)")
    study.add_argument("--workers", type=whole, help="parallel runs of the local launcher, one torch thread each "
                                                   "(default: one per run, at most one per CPU core)")
    study.add_argument("--launcher", choices=LAUNCHERS, default="local",
                       help="local: a process pool on this machine; ray: Ray tasks (pip install '.[ray]')")
    study.add_argument("--ray-address", help="address of a running Ray cluster (default: start a local Ray)")
    study.add_argument("--retry-failed", action="store_true", help="rerun runs that diverged or failed")
    study.add_argument("--max-retries", type=whole, default=DEFAULT_MAX_RETRIES,
                       help="times a run whose worker or node is lost is retried from its last checkpoint, "
                            "0 or more (default: %(default)s)")
    study.add_argument("--no-report", dest="report", action="store_false", help="skip the report at the end")
    study.add_argument("--reps", type=whole, default=DEFAULT_REPS,
                       help=f"bootstrap resamples of the report (default: {DEFAULT_REPS})")
    parser.set_defaults(study_actions=[action for action in study._group_actions if action.dest != "study"])
    return parser


def check_study_options(args: argparse.Namespace) -> None:
    """Refuse (`ConfigError`) what would be ignored: a study's option given to a single run, and `--ray-address`
    without `--launcher ray`."""
    from envs.rules import shown
    from experiments.config import ConfigError

    if args.ray_address is not None and args.launcher != "ray":
        raise ConfigError(f"--ray-address={shown(args.ray_address)}: only with --launcher ray (the local launcher "
                          "starts no Ray)")
    if not is_study(args):
        for action in args.study_actions:
            value = getattr(args, action.dest)
            if value != action.default:
                given = action.option_strings[0] + ("" if action.nargs == 0 else f"={shown(value)}")
                raise ConfigError(f"{given}: an option of seed studies, and this is one run; give several --backbone "
                                  "or --seed values, --study NAME or a study file, or leave it out")


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The run settings given as flags, except --backbone and --seed (which may list several)."""
    from experiments.config import parse_override

    flags = {name: getattr(args, name) for _, (name, _) in FLAGS.items()
             if getattr(args, name) is not None and name not in ("backbone", "seed")}
    flags.update({f"env_kwargs.{k}": v for k, v in (parse_override(text, "--env-kwargs") for text in args.env_kwargs)})
    return flags


def is_study(args: argparse.Namespace) -> bool:
    """A study file, a study name, or several backbones or seeds make a study."""
    return hasattr(args, "file") or bool(args.study) or len(args.backbone or []) > 1 or len(args.seed or []) > 1


def config_from_args(args: argparse.Namespace) -> Any:
    """The `RunConfig` of a single run: defaults < hyper-parameter entry < --config <
    flags < -p overrides; validated (docs/validation.md). The entry applied is named on stderr."""
    from experiments.config import build_config
    from experiments.hyperparams import applied_line
    from experiments.validation import validate

    flags = flags_from_args(args)
    flags.update({name: getattr(args, name)[0] for name in ("backbone", "seed") if getattr(args, name)})
    config = build_config(config_path(args.config), flags, args.param)
    validate(config)
    line = applied_line([config.hyperparams])
    if line is not None:
        print(line, file=sys.stderr)
    return config


def grid_from_args(args: argparse.Namespace) -> Any:
    """The `Grid` of a study: flags over the study file (if any); --backbone and
    --seed make the grid."""
    from experiments.studies.study import Grid

    chosen = {"config_file": config_path(args.config), "flags": flags_from_args(args), "params": args.param,
              "backbones": args.backbone or [], "seeds": args.seed or [], "name": args.study}
    return Grid.from_file(config_path(args.file, "studies"), **chosen) if hasattr(args, "file") else Grid(**chosen)


def progress_bar(args: argparse.Namespace) -> bool:
    """A progress bar on a terminal, or anywhere with `--progress` (not in CI, logs or studies by default)."""
    return args.progress or sys.stdout.isatty()


def train_one(config: Any, args: argparse.Namespace) -> None:
    """A single run, in this process."""
    from experiments.run_dir import RunDirectory
    from experiments.training import train

    summary = train(config, resume=args.resume, progress_bar=progress_bar(args), verbose=args.verbose)
    directory = RunDirectory.of(config).path
    rate, stochastic = summary["final_success_rate"], summary["final_stochastic_success_rate"]
    print(f"{config.run_name()}: mean return {summary['final_mean_return']:.3f}"
          + ("" if rate is None else f", success rate {rate:.2f} (stochastic policy {stochastic:.2f})")
          + f" after {summary['env_steps']} steps ({summary['steps_per_second']:.0f} steps/s)")
    print(f"  summary:     {directory / 'summary.json'}")
    print(f"  tensorboard: tensorboard --logdir {directory}")
    print(f"  evaluate:    {' '.join(invocation())} evaluate {directory}")


def _run(argv: list[str], study_file: bool) -> int:
    args = make_parser(study_file).parse_args(argv)
    from agents import NonFiniteError
    from experiments.config import ConfigError
    from experiments.evaluation import StalledEvaluationError
    from experiments.exits import advise_on_signal
    from experiments.studies.launchers import LauncherError
    from experiments.validation import check_cli_options

    try:
        check_cli_options(vars(args))
        check_study_options(args)
        if is_study(args):
            from experiments.studies.study import run_study

            command = shlex.join([*invocation(), *(["study"] if study_file else []), *argv])
            return run_study(grid_from_args(args), command, args.launcher, args.workers, args.ray_address,
                             args.retry_failed, args.report, args.reps, args.verbose,
                             max_retries=args.max_retries)
        advise_on_signal("rerun the same command with --resume to continue")
        train_one(config_from_args(args), args)
    except (ConfigError, StalledEvaluationError) as error:
        print(error_line(error), file=sys.stderr)
        return 2
    except LauncherError as error:
        print(error_line(error), file=sys.stderr)
        return 1
    except NonFiniteError as error:
        print(f"training stopped: {error}", file=sys.stderr)
        return 3
    return 0


def main(argv: list[str]) -> int:
    """`train_rl.py [train] [OPTIONS]`: one run, or a study when several backbones or seeds are given."""
    return _run(argv, study_file=False)


def study_main(argv: list[str]) -> int:
    """`train_rl.py study FILE [OPTIONS]`."""
    return _run(argv, study_file=True)

