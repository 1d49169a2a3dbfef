"""Files written whole or not at all, and writes that fail by naming the file and the reason.

Each file is written to a hidden temporary name in its own directory (`.summary.tmp.json`), flushed to disk
(`fsync`), renamed over its real name (`os.replace`, atomic on POSIX) and the directory is flushed too: a
process killed at any moment, or a machine that loses power, leaves either the previous version or the new one.
A write that fails (a full disk, a read-only file system, an immutable file, no permission) removes its temporary
file and raises `WriteError`, which names the file meant, not its temporary name, with the errno. Whether a file
can be created in a folder at all is asked before any work (`creation_error`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class WriteError(OSError):
    """A file could not be written; `filename` is the file meant and `errno`/`strerror` say why."""

    def __str__(self) -> str:
        return f"cannot write {self.filename!r}: [Errno {self.errno}] {self.strerror}"


_writes = itertools.count()


def temporary_name(path: Path) -> Path:
    """Where `path` is written before it is renamed into place: hidden, beside it, this write's own."""
    return path.with_name(f".{path.stem}.{os.getpid()}-{next(_writes)}.tmp{path.suffix}")


def _temporary_of(filename: Any, path: Path) -> bool:
    """Whether `filename` is a `temporary_name` of `path`."""
    name = Path(str(filename))
    return name.parent == path.parent and name.name.startswith(f".{path.stem}.") and name.name.endswith(
        f".tmp{path.suffix}")


def sync_directory(directory: Path) -> None:
    """Flush `directory`'s entries to disk (a rename or a new name in it survives a power loss)."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def replace_synced(tmp: Path, path: Path) -> None:
    """Flush `tmp` to disk, rename it over `path` (atomic on POSIX) and flush the directory, so
    that after a crash or power loss `path` holds either its old content or all of the new."""
    with tmp.open("rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_directory(path.parent)


def write_error(error: OSError, path: Path) -> OSError:
    """`error` as a `WriteError` naming `path` (an error without an errno, or already one, as it is)."""
    if isinstance(error, WriteError) or error.errno is None:
        return error
    return WriteError(error.errno, error.strerror, str(path))


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """The temporary path to write `path`'s new content to; when the block ends it is flushed and renamed over
    `path`. When the block or the rename fails (an exception, an interrupt) the temporary file is removed and
    `path` keeps its previous content; an `OSError` is raised as `WriteError` naming `path`."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        with _named_faults(path, tmp):
            yield tmp
            replace_synced(tmp, path)
    finally:
        _remove(tmp)  # gone already after a rename


def write_together(writers: dict[Path, Callable[[Path], None]]) -> None:
    """Write several files whole, or none of them: each writer writes its path's new content to a temporary path
    it is given, and only once every one is written and flushed are they renamed over their paths, in the order
    given (so a file that names others comes last). When a writer fails, every path keeps its previous content,
    and the `OSError` is raised as `WriteError` naming the path whose write failed."""
    staged = [(Path(path), temporary_name(Path(path)), write) for path, write in writers.items()]
    try:
        for path, tmp, write in staged:
            with _named_faults(path, tmp):
                write(tmp)
                with tmp.open("rb+") as handle:
                    os.fsync(handle.fileno())
        for path, tmp, _ in staged:
            with _named_faults(path, tmp):
                os.replace(tmp, path)
        for folder in dict.fromkeys(path.parent for path, _, _ in staged):
            sync_directory(folder)
    finally:
        for _, tmp, _ in staged:
            _remove(tmp)


@contextlib.contextmanager
def _named_faults(path: Path, tmp: Path) -> Iterator[None]:
    """A write of `path` through `tmp` whose failure names `path`: an `OSError` as `WriteError`, and another error
    (a writer that reports a failed write in its own words, as torch.save's RuntimeError) as the `WriteError` the
    folder gives for a small write now, where it gives one."""
    try:
        yield
    except OSError as error:
        if isinstance(error, WriteError) and (error.filename == str(tmp) or _temporary_of(error.filename, tmp)):
            raise WriteError(error.errno, error.strerror, str(path)) from error  # a writer's own atomic write
        raise write_error(error, path) from error
    except Exception as error:
        _remove(tmp)
        fault = _probe(path.parent)
        if fault is None:
            raise
        raise write_error(fault, path) from error


PROBE_BYTES = 1 << 16


def _probe(folder: Path) -> OSError | None:
    """The error the machine gives for a small write in `folder` now (a full disk), or `None` when it takes it."""
    probe = temporary_name(folder / ".probe")
    try:
        with open(probe, "wb") as handle:
            handle.write(bytes(PROBE_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        return error
    finally:
        _remove(probe)
    return None


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def save_figure(figure: Any, path: Path) -> None:
    """Write a matplotlib `figure` to `path` (a PNG, or the format its suffix names) whole or not at all."""
    with atomic_path(path) as tmp:
        draw_figure(figure, tmp)


def draw_figure(figure: Any, path: Path) -> None:
    """Draw a matplotlib `figure` into the file `path` (a PNG, or the format its suffix names), as it is written.
    Every text is drawn as written: a `$` in a title or a label a user chose is no mathtext to parse."""
    from matplotlib.text import Text

    for text in figure.findobj(Text):
        text.set_parse_math(False)
    figure.savefig(path, dpi=110, bbox_inches="tight")


def write_new(path: Path, text: str) -> None:
    """Write `text` to `path`, which must not exist: `FileExistsError` when it does, even when another process
    creates it meanwhile (the file is linked into place, which never replaces). Whole or not at all, as
    `atomic_path`."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        with tmp.open("w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
        sync_directory(path.parent)
    except FileExistsError:
        raise
    except OSError as error:
        raise write_error(error, path) from error
    finally:
        _remove(tmp)


CLAIM = ".claim"
"""the hidden file that marks a `new_directory` taken while its command writes there"""


@contextlib.contextmanager
def new_directory(path: Path) -> Iterator[Path]:
    """A directory of its own for one command's output while the block runs: `path` when it is new or empty, else
    the first of `path-2`, `path-3`, ... that is. A hidden `CLAIM` file, created exclusively, marks it taken until
    the block ends, so two processes never share one: an earlier output is never overwritten, nor mixed with a
    later one. When the block fails, a folder made here that is empty again is removed."""
    path = Path(path)
    for n in itertools.count(1):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir(parents=True)
            made = True
        except FileExistsError:
            made = False
        except OSError as error:
            raise write_error(error, candidate) from error
        try:
            os.close(os.open(candidate / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except (FileExistsError, NotADirectoryError):  # another's, or a file of that name
            continue
        except OSError as error:
            raise write_error(error, candidate) from error
        if any(entry.name != CLAIM for entry in candidate.iterdir()):  # an output finished before this claim
            (candidate / CLAIM).unlink()
            continue
        try:
            yield candidate
        except BaseException:
            (candidate / CLAIM).unlink(missing_ok=True)
            if made:
                _remove_empty([candidate], ())
            raise
        (candidate / CLAIM).unlink(missing_ok=True)
        return


@contextlib.contextmanager
def made_folders(path: Path, leftovers: tuple[str, ...] = (), kept_on: tuple[type[BaseException], ...] = ()
                 ) -> Iterator[Path]:
    """`path` as a folder, made with its missing parents; when the block fails (an exception, an interrupt), the
    folders this call made (`mkdir` succeeded here, not in another process meanwhile) are removed again, deepest
    first, each when it holds nothing but the files named in `leftovers` (a lock file): a command that fails leaves
    no empty folder behind, and never removes one it found. An exception of `kept_on` (another process holds the
    folder) removes nothing."""
    path = Path(path)
    made: list[Path] = []
    for folder in reversed([path, *path.parents]):  # outermost first
        if folder.is_dir():
            continue
        try:
            folder.mkdir()
            made.insert(0, folder)  # deepest first
        except FileExistsError:
            continue  # made by another process meanwhile, or a file: `path.mkdir` below names it
        except OSError as error:
            _remove_empty(made, leftovers)
            raise write_error(error, path) from error
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        _remove_empty(made, leftovers)
        raise write_error(error, path) from error
    try:
        yield path
    except kept_on:
        raise
    except BaseException:
        _remove_empty(made, leftovers)
        raise


def _remove_empty(folders: list[Path], leftovers: tuple[str, ...]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            if all(entry.name in leftovers for entry in folder.iterdir()):
                for name in leftovers:
                    (folder / name).unlink(missing_ok=True)
                folder.rmdir()


def creation_error(folder: Path) -> OSError | None:
    """The error that creating a file in the existing `folder` gives (`None`: one can be created); nothing is left
    there. A read-only file system, an immutable directory, a missing permission, a folder of the system's (`/proc`)
    refuse it."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return error
    return None


def nearest_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (a name too long to look up counts as missing)."""
    for folder in (path, *path.parents):
        try:
            if folder.exists():
                return folder
        except OSError:
            continue
    return Path(path.anchor or ".")
