"""Launchers: run ``fn(item)`` for every item, each in its own worker, and yield the results as
they come (``(index, result)``), or ``None`` every ``poll`` seconds while none comes (so the
caller can refresh a progress display).

- ``local``: a :class:`~concurrent.futures.ProcessPoolExecutor` of ``spawn``-ed processes (torch
  and ``fork`` do not mix). Each worker watches its parent and exits as soon as it is gone, so
  killing the study, even with SIGKILL, leaves no orphan training on. When the caller stops early
  (an exception, Ctrl-C), the workers are terminated.
- ``ray``: Ray tasks (``num_cpus=1``) on an existing cluster (``address``) or on a local instance
  started by ``ray.init()``. Ray is imported only here, only when asked for.

``fn`` must be importable by name in the workers (a module-level function of an installed
package) and return a picklable value; it should catch its own errors.
"""

from __future__ import annotations

import ctypes
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

LAUNCHERS = ("local", "ray")
RAY_HINT = "the ray launcher needs Ray: pip install '.[ray]' (or pip install 'ray>=2.40')"
PARENT_POLL_SECONDS = 1.0
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): the signal a process gets when its parent dies

Result = tuple[int, Any] | None


class LauncherError(RuntimeError):
    """A launcher cannot start or lost its workers; the message says what to do."""


def default_workers(n_runs: int) -> int:
    """One worker per run, at most one per CPU core."""
    return max(1, min(n_runs, os.cpu_count() or 1))


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: one torch thread, and exit when the parent process is gone. On Linux
    the kernel kills the worker the moment the parent dies (``PR_SET_PDEATHSIG``), so not even a
    short run can finish in between; elsewhere a thread notices within ``PARENT_POLL_SECONDS``
    (the children are re-parented, so ``getppid`` changes). Files are written atomically, so
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


def local_launch(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, poll: float) -> Iterator[Result]:
    """Run ``fn`` over ``items`` in ``workers`` spawned processes."""
    context = multiprocessing.get_context("spawn")
    executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_exit_with_parent,
                                   initargs=(os.getpid(),))
    finished = False
    try:
        futures: dict[Future[Any], int] = {executor.submit(fn, item): i for i, item in enumerate(items)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=poll, return_when=FIRST_COMPLETED)
            if not done:
                yield None
            for future in done:
                try:
                    result = future.result()
                except Exception as error:  # a worker died (killed, out of memory) or fn could not be sent
                    raise LauncherError(f"a worker process was lost ({type(error).__name__}: {error}); "
                                        "rerun the same command to resume the study") from error
                yield futures[future], result
        finished = True
    finally:
        processes = list((executor._processes or {}).values())  # private; terminate_workers() is 3.14+
        executor.shutdown(wait=finished, cancel_futures=True)
        if not finished:
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(5)


def ray_launch(fn: Callable[[Any], Any], items: Sequence[Any], address: str | None, poll: float) -> Iterator[Result]:
    """Run ``fn`` over ``items`` as Ray tasks of one CPU each (on ``address``, else a local Ray)."""
    import ray

    ray.init(address=address, ignore_reinit_error=True, log_to_driver=True)
    remote = ray.remote(num_cpus=1, max_retries=0)(fn)
    refs = {remote.remote(item): i for i, item in enumerate(items)}
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=poll)
            if not done:
                yield None
            for ref in done:
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as error:  # the worker or its node was lost
                    raise LauncherError(f"a Ray task was lost ({error}); rerun the same command to resume the "
                                        "study") from error
                yield refs[ref], result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        ray.shutdown()


def launch(fn: Callable[[Any], Any], items: Sequence[Any], launcher: str = "local", workers: int | None = None,
           address: str | None = None, poll: float = 5.0) -> Iterator[Result]:
    """Dispatch to :func:`local_launch` or :func:`ray_launch`."""
    if launcher == "local":
        return local_launch(fn, items, workers or default_workers(len(items)), poll)
    if launcher == "ray":
        if importlib.util.find_spec("ray") is None:
            raise LauncherError(RAY_HINT)
        return ray_launch(fn, items, address, poll)
    raise LauncherError(f"unknown launcher {launcher!r}; valid launchers: {', '.join(LAUNCHERS)}")
