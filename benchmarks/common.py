"""What every benchmark records next to its figures: the command, the date and the machine."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.atomic import WriteError, made_folders, write_together

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class BackboneSize:
    """The model and batch the backbone-cost benchmarks build: ``n_envs`` envs of ``input_dim``
    features into a backbone of ``n_layers`` × ``d_model`` with ``n_heads`` heads."""

    n_envs: int = 16
    input_dim: int = 32
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_info() -> dict[str, Any]:
    """Platform, CPU, library versions, torch threads and the load when the run began."""
    import gymnasium
    import numpy
    import stable_baselines3
    import torch

    return {
        "platform": platform.platform(), "python": platform.python_version(), "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "numpy": numpy.__version__, "gymnasium": gymnasium.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "load_average_at_start": list(os.getloadavg()),
    }


def provenance() -> dict[str, str]:
    """The command line that produced a result and the UTC date."""
    return {"command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_results(name: str, result: dict[str, Any], markdown: str | Callable[[dict[str, Any]], str],
                  out: Path = RESULTS) -> None:
    """``<out>/<name>.json`` and ``<out>/<name>.md``; the load at the end is added to the machine.

    ``markdown`` is the text, or a function of ``result`` that renders it once the load at the end is in.
    """
    result.setdefault("machine", {})["load_average_at_end"] = list(os.getloadavg())
    text = markdown(result) if callable(markdown) else markdown
    write_files({out / f"{name}.json": json.dumps(result, indent=2) + "\n", out / f"{name}.md": text})
    print(f"wrote {out / name}.json and {out / name}.md", file=sys.stderr)


def write_files(texts: dict[Path, str]) -> None:
    """Write each path's text whole, and all of them or none, replacing earlier results together
    (``envs.atomic.write_together``); missing folders are made, and removed again when the write fails. A failing
    write ends the script with status 1 and one line, ``error: cannot write '<path>': [Errno 28] No space left on
    device``: no traceback, no temporary or empty file left."""
    try:
        with contextlib.ExitStack() as folders:
            for folder in dict.fromkeys(Path(path).parent for path in texts):
                folders.enter_context(made_folders(folder))
            write_together({Path(path): functools.partial(_write_text, text=text) for path, text in texts.items()})
    except WriteError as error:
        raise SystemExit(f"error: {error}") from None


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)


def results_target(quick: bool, name: str | None, out: Path | None, default: str) -> tuple[str, Path] | None:
    """The results file name and directory of a benchmark (defaults: ``default`` in ``RESULTS``), or ``None`` for a
    ``--quick`` smoke run given neither ``--name`` nor ``--out``: it writes nothing, so the committed results stay."""
    if quick and name is None and out is None:
        return None
    return name or default, out or RESULTS


def print_results(result: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> None:
    """Print the Markdown of ``result`` (the load at the end added to the machine) instead of writing any file."""
    result.setdefault("machine", {})["load_average_at_end"] = list(os.getloadavg())
    print(markdown(result))


def publish(target: tuple[str, Path] | None, result: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> None:
    """Write the results to ``target`` (name, directory), or print their Markdown where there is none (``--quick``)."""
    if target is None:
        print_results(result, markdown)
    else:
        name, out = target
        write_results(name, result, markdown, out)


def _load(loads: list[float]) -> str:
    return "/".join(f"{x:.1f}" for x in loads)


def machine_line(result: dict[str, Any]) -> str:
    """One Markdown line: date, CPU, cores, torch and threads, load (1/5/15 min) at start and, if known, at end."""
    m = result["machine"]
    line = (f"{result['date']} · {m['cpu_model']} · {m['cpu_count']} cores · torch {m['torch']} · "
            f"{m['torch_threads']} torch thread(s) · load average {_load(m['load_average_at_start'])} at start")
    if "load_average_at_end" in m:
        line += f", {_load(m['load_average_at_end'])} at end"
    return line


def heading(title: str, result: dict[str, Any]) -> list[str]:
    """The first Markdown lines of a report: its title and the command that produced it."""
    return [f"# {title}", "", f"Command: `{result['command']}`", ""]


def run_directories_parser(doc: str, directories_help: str = "study or run directories") -> argparse.ArgumentParser:
    """The command line of a script that reads run directories and writes ``results/<name>.{json,md}``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("directories", nargs="+", type=Path, help=directories_help)
    parser.add_argument("--name", required=True, help="results file name (benchmarks/results/<name>.{json,md})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of the results files")
    return parser


def time_block(fn: Callable[[], object], calls: int) -> float:
    """µs per call of ``calls`` back-to-back calls of ``fn`` (garbage collector paused)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed / calls * 1e6
