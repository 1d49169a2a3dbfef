"""What a run is, recorded inside every model it saves, so that ``--resume`` can check it whatever else is missing.

A run is defined by its settings: the learner and its options, the backbone and its options, the environment with
its keyword arguments and wrappers, the seed, ... (what :func:`experiments.training.check_same_run` compares). Each
model a run saves (its checkpoints, ``best_model.zip``, ``model.zip``) holds them in the entry :data:`RECORD_ENTRY`
of its zip: the resolved configuration, every option of the learner and the backbone included, as ``config.yaml``
holds it. SB3 reads only the entries it knows, so such a model loads anywhere as before.

A model saved before the record existed still says what SB3 keeps in its ``data``: the learner, its options, the
backbone with its options, the number of environments and the seed; :func:`read_record` returns those, marked
``partial``.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.config import RunConfig, algo_defaults, algos, plain, with_every_option

RECORD_ENTRY = "engram/config.json"
"""the zip entry of a saved model that holds its run's configuration"""


@dataclass(frozen=True)
class Record:
    """The settings of the run that saved a model; ``partial``: only those SB3 keeps (a model saved before the
    record existed), the others unknown."""

    settings: dict[str, Any]
    partial: bool = False


def config_record(config: RunConfig) -> dict[str, Any]:
    """The record of ``config``: its resolved configuration with every option, as ``config.yaml`` holds it."""
    return plain(with_every_option(config.to_dict()))


def add_record(path: Path, settings: dict[str, Any]) -> None:
    """Add ``settings`` to the saved model at ``path`` (a zip SB3 wrote) as :data:`RECORD_ENTRY`."""
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(RECORD_ENTRY, json.dumps(settings))


def read_record(path: Path) -> Record | None:
    """The record of the saved model at ``path``; for a model saved before records, what SB3 keeps (``partial``);
    ``None`` for a file that is no model SB3 wrote, or is damaged (loading it says how)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if RECORD_ENTRY in names:
                return Record(json.loads(archive.read(RECORD_ENTRY)))
            if "data" in names:
                return _sb3_record(json.loads(archive.read("data")))
    except (OSError, zipfile.BadZipFile, ValueError, KeyError, EOFError):
        return None
    return None


def _is_plain(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)


def _sb3_record(data: dict[str, Any]) -> Record | None:
    """The settings that SB3's ``data`` of a saved model holds as plain values (others are pickled: skipped)."""
    learners = {cls.__name__: name for name, cls in algos().items()}
    algo = learners.get(data.get("learner_class"))
    policy = data.get("policy_kwargs")
    if algo is None or not isinstance(policy, dict) or not isinstance(policy.get("backbone"), str):
        return None
    settings: dict[str, Any] = {"algo": algo, "backbone": policy["backbone"],
                                algo: {key: data[key] for key in algo_defaults(algo) if _is_plain(data.get(key))},
                                policy["backbone"]: dict(policy.get("backbone_kwargs") or {})}
    settings.update({key: data[key] for key in ("n_envs", "seed") if _is_plain(data.get(key))})
    return Record(settings, partial=True)
