"""Whether a command can write where it will, checked before it does any work.

A command that writes a file the user names (`--out`, `--record`) checks first that the place can take it: a
directory that exists, or would be created inside one that exists, in which a file can be created now. A read-only
file system, an immutable directory or a missing permission is then refused before an evaluation or a bootstrap
runs, with the errno the system gave. The write itself may still fail later (a disk that fills meanwhile):
`experiments.atomic` handles that.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from experiments.atomic import WriteError
from experiments.config import ConfigError
from experiments.rules import check_name_lengths, nearest_existing


def _try_create(folder: Path) -> OSError | None:
    """The error that creating a file in `folder` gives (`None`: it can be created); nothing is left there."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return error
    return None


def check_output(flag: str, path: str | Path, directory: bool = False) -> None:
    """Refuse (`ConfigError`, one line naming `flag`, the path and the errno) an output `path` that cannot
    be written: a file asked for where a directory is (or, with `directory`, a directory asked for where a file
    is), a folder on the way that is a file, or a folder in which no file can be created now."""
    check_name_lengths(flag, str(path))
    path = Path(path)
    if not directory and path.is_dir():
        raise ConfigError(f"{flag} {str(path)!r}: is a directory; expected a file to write")
    folder = nearest_existing((path if directory else path.parent).absolute())
    if not folder.is_dir():
        raise ConfigError(f"{flag} {str(path)!r}: {str(folder)!r} is a file; expected a path in a directory")
    error = _try_create(folder)
    if error is not None:
        raise ConfigError(f"{flag} {str(path)!r}: cannot write in {str(folder)!r}: [Errno {error.errno}] "
                          f"{error.strerror}")


def check_directory(directory: str | Path) -> None:
    """Raise `WriteError` naming `directory` when no file can be created in it (or the nearest folder of it
    that exists): a place the command writes to by itself, so a machine fault (exit status 1), not a bad input."""
    folder = nearest_existing(Path(directory).absolute())
    error = _try_create(folder)
    if error is not None:
        raise WriteError(error.errno, error.strerror, str(directory))
