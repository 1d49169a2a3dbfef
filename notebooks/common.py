"""The helpers of ``benchmarks/common.py`` for the scripts of this folder, which import them as ``common``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("benchmarks_common",
                                               Path(__file__).resolve().parents[1] / "benchmarks" / "common.py")
assert _spec is not None and _spec.loader is not None
_common = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _common  # its dataclasses look their module up there
_spec.loader.exec_module(_common)

RESULTS = _common.RESULTS
BackboneSize = _common.BackboneSize
heading = _common.heading
machine_info = _common.machine_info
machine_line = _common.machine_line
print_results = _common.print_results
provenance = _common.provenance
publish = _common.publish
results_target = _common.results_target
run_directories_parser = _common.run_directories_parser
time_block = _common.time_block
write_files = _common.write_files
write_results = _common.write_results
