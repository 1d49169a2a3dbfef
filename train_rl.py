"""Train memory agents: ``python train_rl.py --algo ppo --backbone gtrxl --env TMaze-v0 --env-kwargs length=10``.

Settings come from, in increasing precedence: defaults, ``--config FILE.yaml``, flags, and
``-p dotted.key=value`` overrides (e.g. ``-p gtrxl.memory_length=32 ppo.learning_rate=1e-3``).
Exit status: 0 done, 2 bad input (the message names it and the valid choices), 3 training
stopped on a non-finite loss, gradient or parameter (the last good checkpoint is kept).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agents import ALGOS, NonFiniteError
from agents.config import FIELDS, ConfigError, RunConfig, build_config, parse_override
from agents.run import run_dir, train
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
    "--log-dir": ("log_dir", {}),
    "--eval-freq": ("eval_freq", {"type": int}),
    "--n-eval-episodes": ("n_eval_episodes", {"type": int}),
    "--checkpoint-freq": ("checkpoint_freq", {"type": int}),
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


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    docs = _field_help()
    parser.add_argument("--config", "-c", help="YAML file (see configs/)")
    for flag, (name, extra) in FLAGS.items():
        names = [flag, "-n"] if flag == "--total-timesteps" else [flag]
        default = FIELDS[name].default
        parser.add_argument(*names, dest=name, default=None, help=f"{docs.get(name, '')} (default: {default})",
                            **extra)
    parser.add_argument("--env-kwargs", nargs="+", default=[], metavar="KEY=VALUE",
                        help="environment keyword arguments")
    parser.add_argument("-p", "--param", nargs="+", default=[], metavar="KEY=VALUE",
                        help="dotted overrides, e.g. gtrxl.memory_length=32 ppo.learning_rate=1e-3")
    parser.add_argument("--resume", action="store_true", help="continue the run from its last checkpoint")
    parser.add_argument("--progress", "-P", action="store_true", help="show a progress bar")
    parser.add_argument("--verbose", "-v", type=int, default=0, help="SB3 verbosity (0, 1, 2)")
    return parser


def configs_from_args(args: argparse.Namespace) -> list[RunConfig]:
    """One configuration per (backbone, seed) combination."""
    flags = {name: getattr(args, name) for _, (name, _) in FLAGS.items()
             if getattr(args, name) is not None and name not in ("backbone", "seed")}
    flags.update({f"env_kwargs.{k}": v for k, v in map(parse_override, args.env_kwargs)})
    base = build_config(args.config, flags, args.param)
    backbones = args.backbone or [base.backbone]
    seeds = args.seed or [base.seed]
    configs = []
    for backbone in backbones:
        for seed in seeds:
            configs.append(build_config(args.config, {**flags, "backbone": backbone, "seed": seed}, args.param))
    return configs


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        configs = configs_from_args(args)
        for config in configs:
            summary = train(config, resume=args.resume, progress_bar=args.progress, verbose=args.verbose)
            directory = run_dir(config)
            rate = summary["final_success_rate"]
            print(f"{config.run_name()}: mean return {summary['final_mean_return']:.3f}"
                  + ("" if rate is None else f", success rate {rate:.2f}")
                  + f" after {summary['env_steps']} steps ({summary['steps_per_second']:.0f} steps/s)")
            print(f"  summary:     {directory / 'summary.json'}")
            print(f"  tensorboard: tensorboard --logdir {directory}")
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except NonFiniteError as error:
        print(f"training stopped: {error}\nthe last good checkpoint is kept in the run's checkpoints/ directory",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
