"""`train_rl.py list [WHAT]`: one line per backbone, attention, position scheme, env id, config, learner or
hyper-parameter entry."""

from __future__ import annotations

import argparse
import sys

from experiments.catalogues import CATALOGUES
from experiments.cli.parser import Distinct, OneLineParser, plain_text, program
from experiments.exits import error_line


def make_parser() -> argparse.ArgumentParser:
    """The parser of `train_rl.py list`."""
    parser = OneLineParser(prog=f"{program()} list", description=(
        "List what exists, one line each with its summary, from the registries and the shipped configs."))
    # No ``choices=``: on Python 3.11 argparse checks the empty default of ``nargs="*"`` against them, so a bare
    # ``list`` would be refused; ``main`` checks the names instead.
    parser.add_argument("what", nargs="*", action=Distinct, metavar="WHAT",
                        help=f"one or more of: {', '.join(CATALOGUES)} (default: all)")
    parser.add_argument("--gym-packages", nargs="+", action=Distinct, default=[], metavar="MODULE",
                        help="modules to import first, so that envs lists the ids they register (after WHAT, or "
                             "ended by --: list envs --gym-packages my_envs)")
    return parser


def format_table(entries: dict[str, str]) -> list[str]:
    """`name  summary` lines, the summaries aligned and in plain text (no docstring markup)."""
    width = max((len(name) for name in entries), default=0)
    return [f"{name:<{width}}  {plain_text(text)}".rstrip() for name, text in entries.items()]


def check_not_swallowed(what: list[str], gym_packages: list[str]) -> None:
    """Refuse (`ConfigError`) `--gym-packages` values that name a catalogue when no WHAT is given: written after
    the option, `list --gym-packages my_envs envs` hands `envs` to it as a module, and would list everything."""
    from envs.rules import ConfigError, shown

    named = [name for name in gym_packages if name in CATALOGUES]
    if named and not what:
        raise ConfigError(f"--gym-packages={shown(gym_packages)}: {named[0]!r} is taken as a module here, so nothing "
                          f"is chosen to list; give WHAT first ({program()} list {named[0]} --gym-packages MODULE) "
                          f"or end the modules with -- ({program()} list --gym-packages MODULE -- {named[0]})")


def main(argv: list[str]) -> int:
    """Print the catalogues asked for (each under a heading when there are several)."""
    parser = make_parser()
    options = parser.parse_args(argv)
    what = options.what or list(CATALOGUES)
    unknown = [name for name in what if name not in CATALOGUES]
    if unknown:
        parser.error(f"argument WHAT: invalid choice: {unknown[0]!r} "
                     f"(choose from {', '.join(map(repr, CATALOGUES))})")
    if options.gym_packages:
        from envs.imports import ImportPathError, import_packages
        from envs.rules import ConfigError

        try:
            check_not_swallowed(options.what, options.gym_packages)
            import_packages(options.gym_packages, key="--gym-packages")
        except ImportPathError as error:
            print(f"error: --gym-packages: {error}", file=sys.stderr)
            return 2
        except ConfigError as error:
            print(error_line(error), file=sys.stderr)
            return 2
    for index, name in enumerate(what):
        try:
            entries = CATALOGUES[name]()
        except AttributeError as error:
            print(f"error: cannot list {name}: {error}", file=sys.stderr)
            return 1
        if len(what) > 1:
            print(("\n" if index else "") + f"{name}:")
        print("\n".join(format_table(entries)))
    return 0
