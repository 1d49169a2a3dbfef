"""The results of the benchmark and notebook scripts are written whole or not at all: a full disk leaves the earlier
results as they were (the .json and the .md together), no temporary or empty file, and ends the script with one
line naming the file, no traceback."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
FULL = "No space left on device"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def common():
    yield load(BENCHMARKS / "common.py", "benchmarks_common_under_test")
    sys.modules.pop("benchmarks_common_under_test", None)


def disk_full_for(monkeypatch, suffix: str) -> None:
    """Every text written to a file whose name ends with `suffix` fails as a full disk does, after a first byte."""
    write_text = Path.write_text

    def full(path, text, *args, **kwargs):
        if path.name.endswith(suffix):
            write_text(path, text[:1], *args, **kwargs)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)


def test_a_pair_that_cannot_be_written_whole_leaves_the_earlier_pair(common, tmp_path, monkeypatch):
    (tmp_path / "r.json").write_text('{"old": 1}\n')
    (tmp_path / "r.md").write_text("old\n")
    disk_full_for(monkeypatch, ".md")
    with pytest.raises(SystemExit) as exit_:
        common.write_results("r", {"new": 1}, "new\n", tmp_path)
    assert exit_.value.code == f"error: cannot write '{tmp_path / 'r.md'}': [Errno 28] {FULL}"
    assert (tmp_path / "r.json").read_text() == '{"old": 1}\n' and (tmp_path / "r.md").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]


def test_a_failed_first_write_leaves_no_file_nor_folder(common, tmp_path, monkeypatch):
    disk_full_for(monkeypatch, ".json")
    with pytest.raises(SystemExit) as exit_:
        common.write_results("r", {"new": 1}, lambda result: "new\n", tmp_path / "a" / "results")
    assert exit_.value.code == f"error: cannot write '{tmp_path / 'a' / 'results' / 'r.json'}': [Errno 28] {FULL}"
    assert list(tmp_path.iterdir()) == []


def test_results_replace_the_earlier_pair(common, tmp_path):
    (tmp_path / "r.json").write_text("old\n")
    common.write_results("r", {"new": 1}, "new\n", tmp_path)
    assert json.loads((tmp_path / "r.json").read_text())["new"] == 1 and (tmp_path / "r.md").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]


def test_a_script_ends_with_one_line_and_status_1(tmp_path):
    script = f"""
import errno, os, pathlib, sys
sys.path.insert(0, {str(REPO / 'notebooks')!r})
import common
def full(path, text, *args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
pathlib.Path.write_text = full
common.write_results("r", {{}}, "text", pathlib.Path(sys.argv[1]))
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"error: cannot write '{tmp_path / 'r.json'}': [Errno 28] {FULL}"]
    assert list(tmp_path.iterdir()) == []


def test_the_notebooks_write_through_the_benchmarks_helpers(monkeypatch):
    monkeypatch.delitem(sys.modules, "benchmarks_common", raising=False)
    notebooks = load(REPO / "notebooks" / "common.py", "notebooks_common_under_test")
    sys.modules.pop("notebooks_common_under_test", None)
    assert notebooks.write_results is notebooks._common.write_results
    assert notebooks.write_files is notebooks._common.write_files


def test_speed_json_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling ``common``
    sys.modules.pop("speed", None)
    import speed

    monkeypatch.setattr(speed, "throughput", lambda *args: {"case": 1.0})
    path = tmp_path / "new.json"
    path.write_text("old\n")
    write_text = Path.write_text
    disk_full_for(monkeypatch, ".json")
    with pytest.raises(SystemExit) as exit_:
        speed.main(["--throughput-only", "--cases", "mlp/T-Maze-20", "--json", str(path)])
    assert exit_.value.code == f"error: cannot write '{path}': [Errno 28] {FULL}"
    assert path.read_text() == "old\n" and list(tmp_path.iterdir()) == [path]
    monkeypatch.setattr(Path, "write_text", write_text)
    speed.main(["--throughput-only", "--cases", "mlp/T-Maze-20", "--json", str(path)])
    assert json.loads(path.read_text())["throughput"] == {"case": 1.0}
