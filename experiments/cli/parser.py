"""The parser every command uses (argparse, with errors on one line and exit status 2), and the name it goes by."""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

RST_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def program() -> str:
    """The command's name in usage lines and in the commands engram prints: `engram` when it runs as the console
    script `engram` or as `python -m engram`, else `train_rl.py`."""
    script = Path(sys.argv[0])
    as_engram = script.stem == "engram" or (script.name == "__main__.py" and script.parent.name == "engram")
    return "engram" if as_engram else "train_rl.py"


def invocation() -> list[str]:
    """The words that start a command as the user typed it: `engram` or `python train_rl.py`."""
    return ["engram"] if program() == "engram" else ["python", "train_rl.py"]


def plain_text(text: str) -> str:
    """Docstring markup as terminal text: `x` → x, `B` → B, `a.f` → a.f, a closing `::` → `:`."""
    text = RST_ROLE.sub(lambda m: m.group(2).split(".")[-1] if m.group(1) else m.group(2), text)
    return re.sub(r"(?<=\S)::$", ":", text.replace("``", ""), flags=re.MULTILINE)


def whole(text: str) -> int:
    """The `type` of a count flag: the integer `text` writes, also as a whole float (`1e3`, `2.0`), as `-p` and a
    configuration file read it; refused with the text as typed otherwise."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not number.is_integer():
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
    return int(number)


def real(text: str) -> float:
    """The `type` of a number flag: `float(text)`, refused with the text as typed where it is not a number, or a
    number too large for a float (`1e999`, which `float` reads as inf)."""
    from experiments.rules import beyond_float

    if beyond_float(text):
        raise argparse.ArgumentTypeError(f"{text!r} is too large for a float (at most about 1.8e308)")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line (`train_rl.py: error: argument --n-envs: ...`),
    exit status 2, like every other bad input (docs/validation.md)."""

    def format_help(self) -> str:
        return plain_text(super().format_help())

    def error(self, message: str) -> NoReturn:
        text = " ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"{self.prog}: error: {text} (see --help)", file=sys.stderr)
        sys.exit(2)


class Distinct(argparse.Action):
    """The action of every option that takes several values but KEY=VALUE lists: each occurrence adds its values to
    those before (`--group-by seed --group-by task`), and a value given twice is refused on one line (`'seed' is
    given twice`). A KEY=VALUE list (`-p`, `--env-kwargs`) extends instead, and a key given again overrides."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        items = [*(getattr(namespace, self.dest) or []), *values]
        for index, value in enumerate(items):
            if value in items[:index]:
                raise argparse.ArgumentError(self, f"{value!r} is given twice; give each value once")
        setattr(namespace, self.dest, items)


class Wrappers(Distinct):
    """`--env-wrapper`: each value a wrapper as `-p` writes it, or a list of them in one argument, as rl-zoo3's
    files write `env_wrapper` (`"[envs.wrappers.MaskVelocity, {gymnasium.wrappers.TimeLimit: {max_episode_steps:
    50}}]"`); the lists are read as their wrappers, in order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from experiments.config import parse_value

        read = [parse_value(text) for text in values]
        super().__call__(parser, namespace, [w for value in read for w in (value if isinstance(value, list)
                                                                           else [value])], option_string)


def first_seed(given: int | None, default: int, count: int, count_flag: str) -> int:
    """The seed of a command's first episode, `--seed` if `given` else `default` (the run's evaluation seed);
    `ConfigError` naming `--seed` unless episode i's seed, `seed + i` for i below `count` (the value of
    `count_flag`), is one numpy takes, at most 2**32 - 1."""
    from envs.rules import Range

    flag = "--seed" if given is not None else "--seed (default: the run's evaluation seed)"
    note = f"episode i is seeded seed + i, at most 2**32 - 1, with {count_flag} {count}" if count > 1 else ""
    seed = default if given is None else given
    Range(0, 2**32 - count, integer=True, note=note).check(flag, seed)
    return seed


def add_env_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """The environment options of the commands that load a trained agent (`evaluate`, `inspect`): `--env` and
    its keyword arguments, wrappers, hyper-parameter entry and packages, in place of the run's."""
    parser.add_argument("--env", help=f"{verb} another environment: an id or module.path:EnvClass (its keyword "
                                      "arguments start empty; needed for a saved .zip without a run's config.yaml)")
    parser.add_argument("--env-kwargs", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="environment keyword arguments over the run's, e.g. length=40")
    parser.add_argument("--env-wrapper", nargs="*", action=Wrappers, metavar="WRAPPER",
                        help="wrappers of each copy in place of the run's (none given: no wrapper), as in training")
    parser.add_argument("--hyperparams", metavar="FILE|none",
                        help="only with --env: the hyper-parameter entry whose env_kwargs (and env_wrapper) --env "
                             "starts from, found as training finds it (default: auto: configs/hyperparams/<algo>.yml; "
                             "none: none)")
    parser.add_argument("--gym-packages", nargs="+", action=Distinct, default=[], metavar="MODULE",
                        help="modules to import first (e.g. ones registering the --env id), besides the run's")


def check_env_options(options: argparse.Namespace) -> None:
    """Refuse (`ConfigError`, one line naming the flag) what `add_env_options` and the model's path take that is
    not valid, before a model is loaded: an empty `RUN_DIR_OR_MODEL`, an `--env` that is no env setting,
    `--env-kwargs` not of the form KEY=VALUE, `--gym-packages` that are no module names, and `--hyperparams`
    without `--env`, which it would not change: a run's environment settings are those of its config.yaml, made
    from the entry it names."""
    from envs.imports import MODULE_NAMES
    from envs.rules import shown
    from experiments.config import FIELDS, ConfigError, parse_override
    from experiments.rules import PathName

    PathName().check("RUN_DIR_OR_MODEL", options.path)
    if options.env is not None:
        FIELDS["env"].metadata["rule"].check("--env", options.env)
    for text in options.env_kwargs:
        parse_override(text, "--env-kwargs")
    MODULE_NAMES.check("--gym-packages", options.gym_packages)
    if options.hyperparams is not None and options.env is None:
        raise ConfigError(f"--hyperparams={shown(options.hyperparams)}: only with --env (the run's environment "
                          "settings are those of its config.yaml, made from the entry it names)")
