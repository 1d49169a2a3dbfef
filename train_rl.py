"""engram's command line: ``engram [COMMAND] ...`` (or ``python train_rl.py``, ``python -m engram``); ``train`` is
the default command.

Each command lives in its own module (``experiments/cli/``, ``experiments/studies/tune.py``,
``lm/workbench.py``) with ``main(argv) -> int``; this file only picks one and
imports it when called, so ``--help`` loads neither torch nor SB3::

    python train_rl.py --algo ppo --backbone gtrxl --env TMaze-v0 --env-kwargs length=10
    python train_rl.py --backbone gtrxl trxl-i lstm --seed 0 1 2 3 4 --env TMaze-v0 --workers 2
    python train_rl.py study configs/studies/demo.yaml [--launcher ray --ray-address auto]
    python train_rl.py report runs/TMaze-v0__ppo
    python train_rl.py evaluate runs/TMaze-v0__ppo-gtrxl__0 --episodes 100 --record tmaze.gif
    python train_rl.py list backbones
    python train_rl.py plot runs/TMaze-v0__ppo --group-by backbone --out curves.png
    python train_rl.py inspect runs/TMaze-v0__ppo-gtrxl__0 --episodes 4 --out inspect/gtrxl
    python train_rl.py lm train -c configs/lm/python.yaml --progress
    python train_rl.py lm eval runs/lm/python__lm-trxl__0 --memory-length 128 256
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NamedTuple, NoReturn

import experiments.threads  # noqa: F401  (first: OMP_WAIT_POLICY=PASSIVE before torch loads OpenMP)
from experiments.cli.parser import program
from experiments.exits import run_command


class Command(NamedTuple):
    """Where a command's ``main(argv) -> int`` lives, and what it does."""

    module: str
    function: str
    usage: str
    summary: str


COMMANDS: dict[str, Command] = {
    "train": Command("experiments.cli.train", "main", "[OPTIONS]",
                     "train one run, or a seed study of several backbones or seeds (the default command)"),
    "study": Command("experiments.cli.train", "study_main", "FILE [OPTIONS]", "run (or resume) a study file"),
    "report": Command("experiments.cli.report", "main", "DIR", "report.md and figures of a study's runs"),
    "evaluate": Command("experiments.cli.evaluate", "main", "RUN_DIR_OR_MODEL",
                        "score a trained agent over N episodes, render it or record a video"),
    "list": Command("experiments.cli.listing", "main", "[WHAT]",
                    "backbones, attentions, positions, envs, configs, learners or hyperparams, with a summary each"),
    "plot": Command("experiments.cli.plot", "main", "RUN_DIRS...", "learning curves of any runs as a PNG"),
    "inspect": Command("experiments.cli.inspect", "main", "RUN_DIR_OR_MODEL",
                       "what a trained agent's memory reads: saliency and attention maps over episodes"),
    "tune": Command("experiments.studies.tune", "main", "[OPTIONS]", "search hyper-parameters with Optuna"),
    "lm": Command("lm.workbench", "main", "{train,eval,sample} ...",
                  "language models on the same backbones"),
}


def overview() -> str:
    """``--help``'s head: the usage line with every command, and what each does."""
    prog = program()
    names = "{" + ",".join(name for name in COMMANDS if name != "train") + "}"
    width = max(len(f"{name} {command.usage}") for name, command in COMMANDS.items())
    lines = [f"usage: {prog} [train] [OPTIONS]\n       {prog} {names} ...", "", "commands:"]
    lines += [f"  {f'{name} {command.usage}':<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", f"{prog} COMMAND --help shows a command's options; the training options follow.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command named first in ``argv`` (``train`` when the first word is not a command) and return its exit
    status; a signal or a failing disk ends every command alike (:func:`experiments.exits.run_command`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(overview())
    name = argv[0] if argv[:1] and argv[0] in COMMANDS else "train"
    command = COMMANDS[name]

    def run(words: list[str]) -> int:
        return getattr(importlib.import_module(command.module), command.function)(words)

    return run_command(run, argv[1:] if argv[:1] == [name] else argv)


def run() -> NoReturn:
    """Run the command line's command and exit with its status: the console script ``engram``, ``python -m
    engram`` and ``python train_rl.py``."""
    try:
        sys.exit(main())
    except BrokenPipeError:  # the output was piped into head, less, ... which closed it early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    run()
