"""The parser every command uses: argparse, with errors on one line and exit status 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``train_rl.py: error: argument --n-envs: ...``),
    exit status 2, like every other bad input (docs/validation.md)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"{self.prog}: error: {text} (see --help)", file=sys.stderr)
        sys.exit(2)
