"""``train_rl.py evaluate RUN_DIR_OR_MODEL``: score a trained agent, watch it, or record a video of it.

By default the run's own evaluation is repeated (its seed, episode count and parallel copies; the
most probable action), so a finished run scores what its ``summary.json`` says. ``--env`` and
``--env-kwargs`` score it elsewhere (a longer corridor: ``--env-kwargs length=40``); ``--env`` starts from the
environment settings of its hyper-parameter entry, as training does (``--hyperparams``). The model scored is named
(the final ``model.zip``, ``best_model.zip``, a checkpoint) with the step it was saved at. Results are
printed and written to ``evaluate_<date>-<time>.json`` in the run directory::

    python train_rl.py evaluate runs/TMaze-v0__ppo-gtrxl__0 --episodes 100 --both
    python train_rl.py evaluate runs/TMaze-v0__ppo-gtrxl__0/best_model.zip --env-kwargs length=40
    python train_rl.py evaluate runs/MiniGrid-MemoryS9-v0__ppo-gtrxl__0 --record memory.mp4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from experiments.cli.parser import OneLineParser, add_env_options, first_seed, program, real, whole
from experiments.exits import error_line

RECORD_EPISODES, FPS, MAX_FPS = 1, 4.0, 1000.0
"""episodes `--render` and `--record` play, and their frames per second by default and at most (a GIF holds a
frame at least a millisecond)"""


def make_parser() -> argparse.ArgumentParser:
    """The parser of `train_rl.py evaluate`."""
    parser = OneLineParser(prog=f"{program()} evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="RUN_DIR_OR_MODEL",
                        help="a run directory (its final model.zip) or a saved .zip (best_model.zip, a checkpoint)")
    parser.add_argument("--episodes", "-n", type=whole, help="episodes per policy (default: the run's n_eval_episodes)")
    policy = parser.add_mutually_exclusive_group()
    for name, text in (("deterministic", "the most probable action (the default; the run's score)"),
                       ("stochastic", "actions sampled from the policy, as in training"),
                       ("both", "the deterministic policy, then the stochastic one")):
        policy.add_argument(f"--{name}", dest="policy", action="store_const", const=name, help=text)
    add_env_options(parser, "score on")
    parser.add_argument("--seed", type=whole, help="seed of the environment copies and of sampled actions, and of "
                                                 "the episodes --render and --record play (the i-th: seed + i), at "
                                                 "most 2**32 - K with --record-episodes K (default: the run's "
                                                 "evaluation seed, its seed + 10000)")
    parser.add_argument("--n-envs", type=whole, help="parallel environment copies (default: the run's n_eval_envs)")
    parser.add_argument("--device", default="auto", help="torch device (default: %(default)s)")
    parser.add_argument("--threads", type=whole, default=1,
                        help="torch CPU threads, 0: every core (default: %(default)s)")
    parser.add_argument("--render", action="store_true",
                        help="show episodes as they are played: in the env's window (render mode human) where a "
                             "display is, else as its text (ansi; engram's tasks)")
    parser.add_argument("--record", metavar="FILE", help="record episodes to a video, FILE.gif or FILE.mp4: a new "
                                                         "file (an existing one is refused, never overwritten)")
    parser.add_argument("--record-episodes", type=whole,
                        help=f"episodes shown or recorded by --render and --record (default: {RECORD_EPISODES})")
    parser.add_argument("--fps", type=real, help=f"frames per second of --render and --record, at most {MAX_FPS:g} "
                                                 f"(default: {FPS:g})")
    return parser


def _check(options: argparse.Namespace) -> None:
    """Exit status 2, naming the flag and what is valid, for counts below one, more threads than cores, a frame rate
    that is not a positive number (at most `MAX_FPS`), `--record-episodes` or `--fps` without `--render` or
    `--record`, a device this machine lacks, a seed past numpy's for an episode shown
    (`first_seed`), an unknown video format, a video path that is empty,
    cannot be written or exists already, and environment options that are not valid (`check_env_options`)."""
    from envs.rules import Device, Range
    from experiments.cli.parser import check_env_options
    from experiments.rules import PathName, Threads
    from experiments.video import check_video_path
    from experiments.writable import check_new_file, check_output

    Threads().check("--threads", options.threads)  # as a run's threads
    for flag in ("record_episodes", "fps"):  # options of what --render and --record play
        if getattr(options, flag) is not None and not (options.render or options.record):
            raise ValueError(f"--{flag.replace('_', '-')}={getattr(options, flag):g}: takes effect only with --render "
                             "or --record")
    options.record_episodes = RECORD_EPISODES if options.record_episodes is None else options.record_episodes
    options.fps = FPS if options.fps is None else options.fps
    for flag in ("episodes", "n_envs", "record_episodes"):
        if getattr(options, flag) is not None:
            Range(1, integer=True).check(f"--{flag.replace('_', '-')}", getattr(options, flag))
    if not (0 < options.fps <= MAX_FPS):
        raise ValueError(f"--fps={options.fps:g}: expected a positive number of frames per second, at most "
                         f"{MAX_FPS:g}")
    Device().check("--device", options.device)
    if options.seed is not None:
        first_seed(options.seed, 0, shown_episodes(options), "--record-episodes")
    if options.record is not None:
        PathName().check("--record", options.record)  # before its format: the empty path names no file
        check_video_path(options.record)
        check_output("--record", options.record)
        check_new_file("--record", options.record)
    check_env_options(options)


def shown_episodes(options: argparse.Namespace) -> int:
    """The episodes `--render` and `--record` play, seeded `seed + i` (none played: one seed, the scoring's)."""
    return options.record_episodes if options.render or options.record else 1


def _summary_line(policy: str, result: Any) -> str:
    rate = "" if result.success_rate is None else f", success rate {result.success_rate:.2f}"
    return (f"  {policy + ':':<14} return {result.returns.mean():.3f} ± {result.returns.std():.3f}{rate}, "
            f"length {result.lengths.mean():.1f} ± {result.lengths.std():.1f}")


SHOWN_MODES = ("human", "ansi")
"""the render modes `--render` shows, in order of preference: the env's own window, its text printed on stdout"""


def render_mode(agent: Any) -> str:
    """`--render`'s mode: the first of `SHOWN_MODES` among the env's render modes (`metadata["render_modes"]`),
    `human` only where a display is (`experiments.replay.has_display`); `ConfigError` naming `--render`, the env
    and its modes when none fits."""
    from envs import make_env
    from envs.rules import ConfigError, shown
    from experiments.replay import has_display

    config = agent.config
    env = make_env(config.env, env_wrapper=config.env_wrapper, gym_packages=config.gym_packages, **config.env_kwargs)
    try:
        modes = list(env.metadata.get("render_modes") or [])
    finally:
        env.close()
    for mode in SHOWN_MODES:
        if mode in modes and (mode != "human" or has_display()):
            return mode
    if "human" in modes:
        raise ConfigError(f"--render: no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset) and "
                          f"env={shown(config.env)} has no text (ansi) mode; use --record FILE.gif")
    listed = ", ".join(map(str, modes)) or "(none)"
    raise ConfigError(f"--render: env={shown(config.env)} has the render modes {listed}; expected one of "
                      f"{', '.join(SHOWN_MODES)} (--record records rgb_array)")


def _show(agent: Any, player: Any, options: argparse.Namespace, seed: int, deterministic: bool) -> None:
    from experiments.replay import play

    for frame in play(agent, player, options.record_episodes, seed, deterministic):
        if player.render_mode == "ansi":
            print(f"{frame}\n")
        time.sleep(1 / options.fps)


def main(argv: list[str]) -> int:
    """Score the agent, then show or record it, then write the result (`evaluate_<date>.json`) last, so that a
    command that fails leaves none; exit status 2 on bad input."""
    options = make_parser().parse_args(argv)
    try:
        _check(options)
    except ValueError as error:
        print(error_line(error), file=sys.stderr)
        return 2
    import torch

    from envs import env_family
    from envs.rules import one_line
    from experiments.config import ConfigError
    from experiments.evaluation import StalledEvaluationError
    from experiments.footprint import check_copies_fit
    from experiments.replay import (
        POLICIES,
        check_agent_env,
        load_agent_with_env,
        open_player,
        play,
        result_record,
        score,
        write_result,
    )
    from experiments.training import torch_threads
    from experiments.video import write_video
    from experiments.writable import check_directory

    torch.set_num_threads(torch_threads(options.threads))
    try:
        agent = load_agent_with_env(options, options.device)
        check_agent_env(agent)
        check_directory(agent.directory)  # where the result goes: a fault found before the episodes are played
        seed = first_seed(options.seed, agent.eval_seed, shown_episodes(options), "--record-episodes")
        players = {flag: open_player(agent, mode(agent), f"--{flag}") for flag, mode in (
            ("render", render_mode), ("record", lambda _: "rgb_array")) if getattr(options, flag)}
        episodes = options.episodes or agent.config.n_eval_episodes
        n_envs = options.n_envs or agent.config.n_eval_envs
        check_copies_fit("--n-envs", n_envs, agent.model.policy, agent.model.observation_space,
                         env_family(agent.config.env))
        policies = POLICIES[options.policy or "deterministic"]
        results = score(agent, episodes, seed, n_envs, policies)
    except (ConfigError, StalledEvaluationError, TypeError) as error:
        print(error_line(error), file=sys.stderr)
        return 2
    kwargs_text = ", ".join(f"{k}={v}" for k, v in agent.config.env_kwargs.items())
    print(f"{agent.model_path} ({type(agent.model).__name__}, {agent.config.backbone}, "
          f"{agent.model.num_timesteps} steps) on {agent.config.env}" + (f" ({kwargs_text})" if kwargs_text else "")
          + f": {episodes} episodes per policy, seed {seed}, {n_envs} copies")
    print(f"  {'model:':<14} {agent.described()}")
    for policy, result in results.items():
        print(_summary_line(policy, result))
    deterministic = policies[0] == "deterministic"
    if options.render:
        _show(agent, players["render"], options, seed, deterministic)
    if options.record:
        frames = list(play(agent, players["record"], options.record_episodes, seed, deterministic))
        video = Path(options.record)
        try:
            write_video(frames, video, options.fps)
        except FileExistsError:
            print(f"error: --record {str(video)!r}: made by another process meanwhile; a file is never overwritten",
                  file=sys.stderr)
            return 2
        except ValueError as error:  # a frame the env rendered later that is no image
            print(f"error: --record {str(video)!r}: {one_line(error)}", file=sys.stderr)
            return 2
        print(f"  video:   {video} ({len(frames)} frames, {options.record_episodes} episode(s))")
    path = write_result(agent.directory, result_record(agent, results, episodes, seed, n_envs))  # the last write
    print(f"  written: {path}")
    return 0
