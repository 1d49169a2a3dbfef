"""How a command ends when the machine, not the input, stops it: a signal or a failing disk.

`run_command` runs every command of `train_rl.py` (docs/run-directories.md, "Exit statuses"):

- SIGINT (Ctrl-C) raises `KeyboardInterrupt` and SIGTERM `Terminated` (a `KeyboardInterrupt`, so every
  cleanup written for Ctrl-C runs for it too) wherever the process is, also when it was started with SIGINT
  ignored (a background job of a script); the command ends with `128 +` the signal's number: 130 and 143. A
  signal that some library swallowed still gives that status, never 0. A second signal while the first is being
  handled ends the process at once, as the signal's default action does. Whatever the interrupted code raises on its
  way out (a library's error about the half-written file it was saving) ends the command with that status too.
  The status comes with one line, `interrupted (SIGINT)`, ended by what to do next where the command said so
  (:func:`advise_on_signal`): `interrupted (SIGINT); rerun the same command with --resume to continue`, whichever
  of these ways the signal ended it.
- A write that fails for a reason of the machine (a full disk or quota, a read-only file system, an immutable file,
  no permission, an I/O error) ends it with status 1 and one line naming the file and the errno, no traceback:
  `error: cannot write 'runs/x/checkpoints/model_2048_steps.zip': [Errno 28] No space left on device`. So does any
  other error of the file system about a file it names (a folder that the system will not create, as under
  `/proc`): `error: cannot access '/proc/runs': [Errno 2] No such file or directory`.
- A bad input that a command lets through (a `ConfigError`) ends it with status 2 and its one line, as every
  command reports bad input itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from envs.atomic import WriteError
from envs.rules import ConfigError, one_line, short

EXIT_FAULT = 1
"""a write failed for a reason of the machine (:data:`FAULTS`)"""
EXIT_BAD_INPUT = 2
"""a bad input: a `ConfigError` (docs/validation.md)"""
SIGNALS = (signal.SIGINT, signal.SIGTERM)
FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO, errno.EACCES, errno.EPERM})
"""errnos of a machine fault: the disk or quota is full, the file system read-only, the file immutable or too
large, the device failing, or the file not ours to write"""
WRITE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
"""errnos that only a write gives"""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, like Ctrl-C's `KeyboardInterrupt`."""


def _words(signum: int) -> str:
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted (SIGINT)"


def is_fault(error: BaseException) -> bool:
    """Whether `error` is a failing write or a machine fault (`FAULTS`), not a mistake in the input."""
    return isinstance(error, WriteError) or (isinstance(error, OSError) and error.errno in FAULTS)


WORD_LIMIT = 300
"""the most characters an error line shows of one word: a value that escaped `envs.rules.shown` (a path, a repr)"""


def error_line(error: object) -> str:
    """The one line a command prints for `error`: `error: <message on one line>`, any word longer than
    `WORD_LIMIT` cut (a 200,000-character value is shown as its start)."""
    words = one_line(error).split(" ")
    return "error: " + " ".join(short(word, WORD_LIMIT) for word in words)


def fault_line(error: OSError) -> str:
    """One line naming the file and the errno: `cannot write 'path': [Errno 28] No space left on device`."""
    if isinstance(error, WriteError):
        return str(error)
    verb = "write" if error.errno in WRITE_FAULTS else "access"
    where = f" {error.filename!r}" if error.filename is not None else ""
    return f"cannot {verb}{where}: [Errno {error.errno}] {error.strerror}"


@dataclass
class Received:
    """The first signal received while `signals_raised` was active (`None`: none), and what the running command
    advises doing after one (`""`: nothing)."""

    signum: int | None = None
    advice: str = ""

    def line(self, signum: int) -> str:
        """The line that reports `signum`: its words, then the advice."""
        return f"{_words(signum)}; {self.advice}" if self.advice else _words(signum)


_running: list[Received] = []
"""the commands `run_command` is running, innermost last"""


def advise_on_signal(advice: str) -> None:
    """End the line that reports a signal ending the running command with `advice` (`rerun the same command with
    --resume to continue`); outside `run_command` nothing changes."""
    if _running:
        _running[-1].advice = advice


@contextlib.contextmanager
def signals_raised() -> Iterator[Received]:
    """While the block runs, SIGINT raises `KeyboardInterrupt` and SIGTERM `Terminated`, and the first of
    them is recorded; a second one ends the process as the signal's default action does. Outside the main thread
    (where Python cannot set handlers) nothing changes."""
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handle(signum: int, frame: object) -> None:
        if received.signum is not None:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        received.signum = signum
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, handle)
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _reported(received: Received, signum: int) -> int:
    """Print the line of `signum` and return its status."""
    print(received.line(signum), file=sys.stderr, flush=True)
    return 128 + signum


@contextlib.contextmanager
def thread_errors_kept_for_their_owner() -> Iterator[None]:
    """While the block runs, an exception that a thread keeps for the thread that owns it (tensorboard's event
    writer stores a full disk's `OSError` as its `exception`, raised again at the writer's next call) is not also
    printed as that thread's traceback: it ends the command once, where it is raised again."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or getattr(args.thread, "exception", None) is not args.exc_value:
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def run_command(command: Callable[[list[str]], int], argv: list[str]) -> int:
    """`command(argv)`'s exit status, with signals and machine faults ending it as the module doc says."""
    with signals_raised() as received, thread_errors_kept_for_their_owner():
        _running.append(received)
        try:
            status = command(argv)
        except KeyboardInterrupt as interrupt:
            status = _reported(received, signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
        except Exception as error:
            if received.signum is not None:  # what the interrupted code raised on its way out (a half-written zip)
                status = _reported(received, received.signum)
            elif isinstance(error, OSError) and (is_fault(error) or error.filename is not None):
                print(error_line(fault_line(error)), file=sys.stderr, flush=True)
                status = EXIT_FAULT
            elif isinstance(error, ConfigError):  # a bad input that the command did not catch itself
                print(error_line(error), file=sys.stderr, flush=True)
                status = EXIT_BAD_INPUT
            else:
                raise
        finally:
            _running.remove(received)
    if received.signum is not None and status != 128 + received.signum:  # a library swallowed the interrupt
        status = _reported(received, received.signum)
    return status
