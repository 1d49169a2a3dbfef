"""``benchmarks/attention_scaling.py --quick`` measures every registered attention (those laid out in
episode time included, whose states carry a clock) and the linear backbone."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from policies import ATTENTIONS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # long: run by make test-slow
def test_quick_run_has_a_row_per_member_and_length(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "attention_scaling.py"), "--quick", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    result = json.loads((tmp_path / "attention_scaling.json").read_text())
    lengths = result["settings"]["lengths"]
    cells = {(row["member"], row["memory_length"]) for row in result["rows"]}
    assert cells == {(member, M) for member in [*ATTENTIONS, "linear backbone"] for M in lengths}
    assert all(math.isfinite(row["ratio_to_reference"]) and row["peak_bytes"] > 0 for row in result["rows"])
    report = (tmp_path / "attention_scaling.md").read_text()
    assert "| `fixed` |" in report and "| O(n·√n) |" in report and "| O(n log n) |" in report
    claims = {entry["member"]: entry["complexity"] for entry in result["summary"]}
    assert claims["linear backbone"] == "O(n)" and claims["full"] == "O(n²)" and claims["lsh"] == "O(n log n)"
