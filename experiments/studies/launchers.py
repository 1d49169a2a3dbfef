"""Launchers: run `fn(item)` for every item, each in its own worker, and yield what happens as it
happens: `(index, result)` when an item is done, `(index, Lost(...))` when the worker running it
died before returning (killed, out of memory, its node lost), or `None` every `poll` seconds
while nothing happens (so the caller can refresh a progress display).

A lost item is run again, on any worker still alive, up to `max_retries` times; `renew(item)`
(called here, in the driver) gives the item to run again, e.g. one that resumes from the last
checkpoint. Only the lost item is retried: the other workers go on. An item lost once more than
`max_retries` allows is given up (`Lost.retried` is false) and the others still finish.

- `local`: worker processes `spawn`-ed here (torch and `fork` do not mix), at most
  `workers` at a time, each serving one item after another. A worker that dies is replaced by
  a new one. Each worker watches its parent and exits as soon as it is gone, so killing the
  study, even with SIGKILL, leaves no orphan training on. When the caller stops early (an
  exception, Ctrl-C), the workers are terminated. A worker interrupted by Ctrl-C (a terminal sends
  it to the whole process group) lets the interrupt unwind its run as in a single run, then exits
  with status 130 without a traceback; a Ctrl-C while it starts up waits until it can do so.
- `ray`: Ray tasks (`num_cpus=1`) on an existing cluster (`address`) or on a local instance
  started by `ray.init()`. Ray is imported only here, only when asked for. `connect` checks that
  the launcher can start (Ray is installed and the cluster answers, within about 25 s), so that a
  caller can check it before creating anything; `launch` connects too when that was not done. A
  task whose worker or node dies fails with a system error (not the task's own exception), and is
  resubmitted; Ray schedules it on any live node with a free CPU.

`fn` must be importable by name in the workers (a module-level function of an installed
package) and return a picklable value; it should catch its own errors (an exception it raises
stops the launch with `LauncherError`: it is a bug, not a lost worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from experiments.exits import is_fault

LAUNCHERS = ("local", "ray")
RAY_HINT = "the ray launcher needs Ray: pip install '.[ray]' (or pip install 'ray>=2.40')"
DEFAULT_MAX_RETRIES = 3
PARENT_POLL_SECONDS = 1.0
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): the signal a process gets when its parent dies
EXIT_INTERRUPTED = 128 + signal.SIGINT
"""the exit status of a local worker interrupted by Ctrl-C"""
RAY_CONNECT_SETTINGS = {
    "RAY_gcs_rpc_server_connect_timeout_s": "3",
    "RAY_py_gcs_connect_timeout_s": "5",
    "RAY_gcs_server_port_wait_time_s": "2",
}
"""Ray's settings (unless the environment sets them) that bound connecting to a cluster address that nobody
answers: two tries of about 12 s each, then `ray.init` raises (else it retries for many minutes)"""


@dataclass(frozen=True)
class Lost:
    """The worker running an item died before returning its result."""

    reason: str
    """how it was lost (the exit signal of a process, Ray's error)"""
    losses: int
    """how many times this item has been lost in this launch"""
    retried: bool
    """whether it runs again (else it was lost more than ``max_retries`` times and is given up)"""


Result = tuple[int, Any] | None


class LauncherError(RuntimeError):
    """A launcher cannot start, or an item raised in its worker; the message says what to do."""


def default_workers(n_runs: int) -> int:
    """One worker per run, at most one per CPU core."""
    return max(1, min(n_runs, os.cpu_count() or 1))


class Retries:
    """The items of a launch and how often each was lost: decides whether a lost item runs again."""

    def __init__(self, items: Sequence[Any], max_retries: int, renew: Callable[[Any], Any] | None = None) -> None:
        self.items = list(items)
        self.max_retries = max_retries
        self.renew = renew or (lambda item: item)
        self.losses = [0] * len(self.items)

    def lost(self, index: int, reason: str) -> Lost:
        """Count a loss of item `index`; when it may run again, renew the item to run."""
        self.losses[index] += 1
        retried = self.losses[index] <= self.max_retries
        if retried:
            self.items[index] = self.renew(self.items[index])
        return Lost(reason, self.losses[index], retried)


def _exit_with_parent(parent: int) -> None:
    """Worker set-up: one torch thread, and exit when the parent process is gone. On Linux the
    kernel kills the worker the moment the parent dies (`PR_SET_PDEATHSIG`), so not even a
    short run can finish in between; elsewhere a thread notices within `PARENT_POLL_SECONDS`
    (the children are re-parented, so `getppid` changes). Files are written atomically, so
    exiting at any moment loses nothing written."""
    import torch

    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _serve(connection: Connection, parent: int, fn: Callable[[Any], Any]) -> None:
    """A local worker's loop: receive an item, send back `(True, fn(item))` (or `(False,
    message)` when `fn` raised, the error itself for a machine fault); stop on `None`.

    The worker starts with SIGINT blocked (`_Worker`) and unblocks it here, so a Ctrl-C received while
    it started raises now. A Ctrl-C unwinds `fn` (its run ends as an interrupted single run does), then
    the worker exits with `EXIT_INTERRUPTED`, quietly: the driver, interrupted too, reports it."""
    try:
        _block_sigint(False)
        _exit_with_parent(parent)
        while (item := connection.recv()) is not None:
            try:
                reply = (True, fn(item))
            except Exception as error:  # sent to the driver, which stops the launch
                reply = (False, error if is_fault(error) else f"{type(error).__name__}: {error}")
            connection.send(reply)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not interrupt the exit
        sys.exit(EXIT_INTERRUPTED)


def _block_sigint(block: bool) -> None:
    """Block (or unblock) SIGINT in this thread: a blocked signal waits, it is not lost, and a process
    started meanwhile starts with it blocked (on platforms with signal masks)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK if block else signal.SIG_UNBLOCK, {signal.SIGINT})


class _Worker:
    """One spawned worker process and the driver's end of its pipe."""

    def __init__(self, context: Any, fn: Callable[[Any], Any]) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid(), fn))  # not daemonic: a run may fork
        _block_sigint(True)  # the worker starts with SIGINT blocked, until `_serve` handles it
        try:
            self.process.start()
        finally:
            try:
                _block_sigint(False)  # a Ctrl-C received meanwhile raises here
            except KeyboardInterrupt:
                if self.process.pid is not None:  # started, but the caller holds no handle on it to stop it
                    self.process.terminate()
                raise
        child.close()
        self.index: int | None = None
        """the item it runs (``None``: idle)"""

    def run(self, index: int, item: Any) -> None:
        """Send the worker an item; a worker that died while idle shows as lost in `reply`."""
        self.index = index
        with contextlib.suppress(OSError):
            self.connection.send(item)

    def reply(self) -> tuple[bool, Any] | str | None:
        """The worker's reply to its item, a string saying how it died before replying, or `None`
        while it still runs."""
        if self.connection.poll():
            try:
                return self.connection.recv()
            except (EOFError, OSError):
                pass
        elif self.process.is_alive():
            return None
        self.process.join()
        code = self.process.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
        return f"worker process {self.process.pid} died ({how})"

    def stop(self, terminate: bool) -> None:
        """Ask the worker to exit (or terminate it) and wait for it."""
        if terminate:
            self.process.terminate()
        else:
            with contextlib.suppress(OSError):  # the worker is already gone
                self.connection.send(None)
        self.process.join(5)
        self.connection.close()


def local_launch(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, poll: float,
                 retries: Retries) -> Iterator[Result]:
    """Run `fn` over `items` in at most `workers` spawned processes; a lost item runs again in a new one."""
    context = multiprocessing.get_context("spawn")
    queue = deque(range(len(items)))
    pool: list[_Worker] = []
    finished = False
    try:
        while queue or any(w.index is not None for w in pool):
            for worker in pool:
                if worker.index is None and queue:
                    index = queue.popleft()
                    worker.run(index, retries.items[index])
            while queue and len(pool) < workers:
                pool.append(_Worker(context, fn))
                index = queue.popleft()
                pool[-1].run(index, retries.items[index])
            busy = [w for w in pool if w.index is not None]
            if not wait([h for w in busy for h in (w.connection, w.process.sentinel)], timeout=poll):
                yield None
            for worker in busy:
                reply = worker.reply()
                if reply is None:
                    continue
                index, worker.index = worker.index, None
                if isinstance(reply, tuple):
                    ok, value = reply
                    if not ok:
                        if isinstance(value, OSError):  # a full disk: named as in a single run, exit status 1
                            raise value
                        raise LauncherError(f"item {index} raised in its worker: {value}")
                    yield index, value
                    continue
                pool.remove(worker)
                worker.connection.close()
                lost = retries.lost(index, reply)
                if lost.retried:
                    queue.appendleft(index)
                yield index, lost
        finished = True
    finally:
        for worker in pool:
            worker.stop(terminate=not finished)


def _first_sentences(text: str, count: int = 2) -> str:
    """The first `count` sentences of a message (Ray's go on with advice on debugging)."""
    return ". ".join(text.strip().splitlines()[0].split(". ")[:count]).rstrip(".")


@contextlib.contextmanager
def _ray_connect_settings(apply: bool) -> Iterator[None]:
    """While the block runs (if `apply`), the `RAY_CONNECT_SETTINGS` that the environment does not set are set
    there; they are removed after it, so that the processes of a Ray started later have Ray's defaults."""
    added = [name for name in RAY_CONNECT_SETTINGS if apply and name not in os.environ]
    os.environ.update({name: RAY_CONNECT_SETTINGS[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def connect(launcher: str, address: str | None = None) -> None:
    """Check that `launcher` can start, so that a caller can do it before creating anything: for `ray`,
    that Ray is installed, then connect to the cluster at `address` (else start a local Ray). Raises
    `LauncherError`, one line naming `--ray-address` and the cause, when it cannot."""
    if launcher not in LAUNCHERS:
        raise LauncherError(f"unknown launcher {launcher!r}; valid launchers: {', '.join(LAUNCHERS)}")
    if launcher != "ray":
        return
    if importlib.util.find_spec("ray") is None:
        raise LauncherError(RAY_HINT)
    with _ray_connect_settings(address is not None):  # Ray reads most of them when it is first imported
        import ray

        if ray.is_initialized():
            return
        try:
            ray.init(address=address, log_to_driver=True)
        except Exception as error:  # ConnectionError, RuntimeError, or ValueError for a malformed address
            what = f"connect to the Ray cluster at --ray-address {address}" if address else "start a local Ray"
            raise LauncherError(f"cannot {what}: {_first_sentences(str(error), 1)}") from None


def ray_launch(fn: Callable[[Any], Any], items: Sequence[Any], address: str | None, poll: float,
               retries: Retries) -> Iterator[Result]:
    """Run `fn` over `items` as Ray tasks of one CPU each (on `address`, else a local Ray; connected to
    first unless `connect` did it); a task lost with its worker or node is submitted again."""
    import ray

    connect("ray", address)
    remote = ray.remote(num_cpus=1, max_retries=0)(fn)
    refs = {remote.remote(item): i for i, item in enumerate(items)}
    try:
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1, timeout=poll)
            if not done:
                yield None
            for ref in done:
                index = refs.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as error:  # fn raised: a bug, not a lost worker
                    if is_fault(cause := getattr(error, "cause", None) or error):  # a full disk, as a single run
                        raise cause from None
                    raise LauncherError(f"item {index} raised in its Ray worker: {error}") from error
                except ray.exceptions.RayError as error:  # its worker or node was lost
                    lost = retries.lost(index, f"{type(error).__name__}: {_first_sentences(str(error))}")
                    if lost.retried:
                        refs[remote.remote(retries.items[index])] = index
                    yield index, lost
                    continue
                yield index, result
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
        ray.shutdown()


def launch(fn: Callable[[Any], Any], items: Sequence[Any], launcher: str = "local", workers: int | None = None,
           address: str | None = None, poll: float = 5.0, max_retries: int = DEFAULT_MAX_RETRIES,
           renew: Callable[[Any], Any] | None = None) -> Iterator[Result]:
    """Dispatch to `local_launch` or `ray_launch`; a lost item runs again (`renew(item)`)
    up to `max_retries` times."""
    retries = Retries(items, max_retries, renew)
    connect(launcher, address)
    if launcher == "ray":
        return ray_launch(fn, items, address, poll, retries)
    return local_launch(fn, items, workers or default_workers(len(items)), poll, retries)
