"""Whether a command can write where it will, checked before it does any work.

A command that writes a file the user names (`--out`, `--record`) checks first that the place can take it: a
directory that exists, or would be created inside one that exists, in which a file can be created now. A read-only
file system, an immutable directory or a missing permission is then refused before an evaluation or a bootstrap
runs, with the errno the system gave. The write itself may still fail later (a disk that fills meanwhile):
`envs.atomic` handles that.

Such a file is new: one that is there already (the user's, an earlier command's) is refused (`check_new_file`)
and never replaced, even when another process makes it while the command works (`write_new_file` links the
finished file into place, which fails rather than replace). A default name the user did not choose moves aside
instead (`free_name`: `curves-2.png`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from envs.atomic import WriteError, creation_error, nearest_existing, sync_directory, write_error
from experiments.config import ConfigError
from experiments.rules import PathName, check_name_lengths, unwritten_name
from experiments.run_dir import owners_of


def check_output(flag: str, path: str | Path, directory: bool = False) -> None:
    """Refuse (`ConfigError`, one line naming `flag`, the path and the errno or the owner) an output `path` that
    cannot be written: the empty path (`PathName`), a name it would make that is not as meant (`unwritten_name`: an
    unexpanded '~', white space around a name), a path at or inside a run directory (whose files it would mix
    with), a file asked for where a directory is (or, with `directory`, a directory asked for where a file is), a
    folder on the way that is a file, or a folder in which no file can be created now."""
    PathName().check(flag, path)
    check_name_lengths(flag, str(path))
    if (problem := unwritten_name(Path(path))) is not None:
        raise ConfigError(f"{flag} {str(path)!r}: {problem}; expected a path written out")
    for owner, kind, marker in owners_of(os.path.realpath(path)):
        if kind == "run directory":
            raise ConfigError(f"{flag} {str(path)!r}: would be inside the run directory {str(owner)!r} ({marker}), "
                              "whose files it would mix with; choose a path outside it")
    path = Path(path)
    if not directory and path.is_dir():
        raise ConfigError(f"{flag} {str(path)!r}: is a directory; expected a file to write")
    folder = nearest_existing((path if directory else path.parent).absolute())
    if not folder.is_dir():
        raise ConfigError(f"{flag} {str(path)!r}: {str(folder)!r} is a file; expected a path in a directory")
    error = creation_error(folder)
    if error is not None:
        raise ConfigError(f"{flag} {str(path)!r}: cannot write in {str(folder)!r}: [Errno {error.errno}] "
                          f"{error.strerror}")


def check_directory(directory: str | Path) -> None:
    """Raise `WriteError` naming `directory` when no file can be created in it (or the nearest folder of it
    that exists): a place the command writes to by itself, so a machine fault (exit status 1), not a bad input."""
    folder = nearest_existing(Path(directory).absolute())
    error = creation_error(folder)
    if error is not None:
        raise WriteError(error.errno, error.strerror, str(directory))


def check_new_file(flag: str, path: str | Path) -> None:
    """Refuse (`ConfigError`, one line naming `flag` and the path) an output file that is there already (a link
    too, even one that leads nowhere): a command never overwrites what it did not write."""
    if os.path.lexists(path):
        raise ConfigError(f"{flag} {str(path)!r}: already exists (a file is never overwritten); expected the name of "
                          "a new file")


def free_name(path: Path) -> Path:
    """`path` when nothing is there, else the first of `stem-2.suffix`, `stem-3.suffix`, ... that is free."""
    for n in itertools.count(1):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not os.path.lexists(candidate):
            return candidate
    raise AssertionError("unreachable")


def write_new_file(path: Path, write: Callable[[Path], None]) -> None:
    """Write the new file `path` with `write(temporary path)` (a writer that writes whole or not at all:
    `envs.atomic.save_figure`, `experiments.video.write_video`), then link it into place, which never
    replaces a file: `FileExistsError` when `path` exists by then. Other failures raise `WriteError` naming `path`;
    no temporary file is left."""
    path = Path(path)
    private = path.with_name(f".new-{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")  # short: any name fits
    try:
        try:
            write(private)
        except OSError as error:  # named after the file meant, not the temporary one
            raise (error if error.errno is None else WriteError(error.errno, error.strerror, str(path))) from error
        try:
            os.link(private, path)
        except FileExistsError:
            raise
        except OSError as error:
            raise write_error(error, path) from error
        sync_directory(path.parent)
    finally:
        with contextlib.suppress(OSError):
            private.unlink(missing_ok=True)
