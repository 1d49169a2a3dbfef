"""The parser every command uses (argparse, with errors on one line and exit status 2), and the name it goes by."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn


def program() -> str:
    """The command's name in usage lines and in the commands engram prints: ``engram`` when it runs as the console
    script ``engram`` or as ``python -m engram``, else ``train_rl.py``."""
    script = Path(sys.argv[0])
    as_engram = script.stem == "engram" or (script.name == "__main__.py" and script.parent.name == "engram")
    return "engram" if as_engram else "train_rl.py"


def invocation() -> list[str]:
    """The words that start a command as the user typed it: ``engram`` or ``python train_rl.py``."""
    return ["engram"] if program() == "engram" else ["python", "train_rl.py"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``train_rl.py: error: argument --n-envs: ...``),
    exit status 2, like every other bad input (docs/validation.md)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"{self.prog}: error: {text} (see --help)", file=sys.stderr)
        sys.exit(2)
