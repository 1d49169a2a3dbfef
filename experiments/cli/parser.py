"""The parser every command uses (argparse, with errors on one line and exit status 2), and the name it goes by."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NoReturn

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


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line (`train_rl.py: error: argument --n-envs: ...`),
    exit status 2, like every other bad input (docs/validation.md)."""

    def format_help(self) -> str:
        return plain_text(super().format_help())

    def error(self, message: str) -> NoReturn:
        text = " ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"{self.prog}: error: {text} (see --help)", file=sys.stderr)
        sys.exit(2)
