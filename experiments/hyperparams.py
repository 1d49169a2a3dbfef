"""Tuned hyper-parameters per task, applied as rl-zoo3 applies its `hyperparams/<algo>.yml`.

A hyper-parameter file holds one entry per task, keyed by an env id (`TMaze-v0`) or a shell pattern of ids
(`MiniGrid-Memory*`). An entry holds what a run configuration holds (run settings, `env_kwargs`,
`env_wrapper`, a learner's section, one section per backbone), except the settings that name a run rather than
tune it (`NOT_IN_ENTRIES`), and may be restricted by `when`: conditions on the run's settings, each a dotted
key with a value it must equal or a comparison (`env_kwargs.length: ">= 100"`)::

    TMaze-v0:
      when: {env_kwargs.length: ">= 100"}
      n_envs: 16
      ppo: {learning_rate: lin_5e-4, ent_coef: 0.0}
      gtrxl: {memory_length: 128}

The file of a run is its `hyperparams` setting: `auto` (the default) is the learner's shipped file,
`configs/hyperparams/<algo>.yml`; `none` is no file; any other value is a file (a path, or a shipped name such as
`ppo`), or one entry of it, `FILE#KEY`, which applies whatever the env. Of a file, the entries whose key matches
the env and whose conditions hold are candidates, the conditions read on the settings given without an entry (a key
those settings lack does not hold); the most specific applies: the exact id over any pattern, then the pattern with
the most characters that are not wildcards, then the entry written first. `experiments.config.build_config`
puts it under the config file, flags and `-p` overrides and records it in `hyperparams` (`FILE#KEY`).

A file is checked whole when one of its entries applies (and by `train_rl.py list hyperparams`): each entry's keys
and values with the training command's own checks (`experiments.config.apply`,
`experiments.validation.check_settings`); a bad one raises `ConfigError` naming the
file, the entry and the key. Finding no entry reads the file's keys and conditions only, and loads no torch.
"""

from __future__ import annotations

import fnmatch
import functools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.rules import ConfigError, shown
from experiments.config import FIELDS, RunConfig, apply, load_yaml, plain
from experiments.config_files import config_path, shipped_dir, shipped_names

FOLDER = "hyperparams"
"""the folder of the shipped files, under ``configs/``"""
AUTO, OFF = "auto", "none"
NOT_IN_ENTRIES = ("env", "algo", "backbone", "seed", "hyperparams", "init_from", "log_dir", "device", "threads")
"""settings an entry may not hold: what names the run (its env is the entry's key, its learner the file's) or the
machine, rather than tunes it"""
WILDCARDS = frozenset("*?[]")
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}
COMPARISON = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Condition:
    """A condition of `when`: the dotted setting `key` compared with `value` by `op`."""

    key: str
    op: str
    value: Any

    def holds(self, settings: dict[str, Any]) -> bool:
        """Whether the settings (a configuration as `RunConfig.to_dict` gives it) meet the condition; a key
        they lack, or a value that does not compare with a number, does not."""
        found: Any = settings
        for part in self.key.split("."):
            if not isinstance(found, dict) or part not in found:
                return False
            found = found[part]
        if self.op in ("==", "!="):
            return COMPARISONS[self.op](found, self.value)
        return _is_number(found) and COMPARISONS[self.op](found, self.value)

    def __str__(self) -> str:
        return f"{self.key} {self.op} {self.value}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_condition(key: Any, text: Any) -> Condition:
    """A condition of `when` (`ValueError` saying what is wrong): a dotted run-setting key, and a value it must
    equal or a comparison with a number written as a string (`">= 100"`)."""
    if not isinstance(key, str) or key.partition(".")[0] not in FIELDS:
        raise ValueError(f"when: {shown(key)} is not a run setting (dotted into a mapping: env_kwargs.length)")
    match = COMPARISON.match(text) if isinstance(text, str) else None
    if match is None:
        return Condition(key, "==", text)
    number = _number(match.group(2))
    if number is None and match.group(1) not in ("==", "!="):
        raise ValueError(f"when: {key}: {shown(text)} compares with {shown(match.group(2))}, not a number")
    return Condition(key, match.group(1), match.group(2) if number is None else number)


def _number(text: str) -> int | float | None:
    """`text` as an int or a float, else `None`."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return None


@dataclass(frozen=True)
class Entry:
    """One entry of a hyper-parameter file: its `key` (an env id or a pattern), the `settings` it applies and its
    `conditions`."""

    file: str
    """the file as a run records it: ``configs/hyperparams/ppo.yml`` for a shipped one, else the path given"""
    key: str
    settings: dict[str, Any]
    conditions: tuple[Condition, ...] = ()

    @property
    def name(self) -> str:
        """`FILE#KEY`, as `hyperparams` takes and records it."""
        return f"{self.file}#{self.key}"

    @property
    def where(self) -> str:
        """The entry as a message names it: `hyper-parameter file 'F', entry 'KEY'`."""
        return f"hyper-parameter file {self.file!r}, entry {self.key!r}"

    @property
    def exact(self) -> bool:
        return not WILDCARDS & set(self.key)

    def matches(self, env: str) -> bool:
        """Whether the key is `env` or a pattern that matches it (case-sensitive)."""
        return self.key == env if self.exact else fnmatch.fnmatchcase(env, self.key)

    def specificity(self) -> tuple[bool, int]:
        """Exact ids first, then patterns by their characters that are not wildcards."""
        return self.exact, sum(char not in WILDCARDS for char in self.key)

    def holds(self, settings: dict[str, Any]) -> bool:
        return all(condition.holds(settings) for condition in self.conditions)


@dataclass
class EntryFile:
    """The entries of one hyper-parameter file, in the order it writes them."""

    file: str
    entries: tuple[Entry, ...]
    checked: bool = False
    """whether :meth:`check_values` passed (a file is read once per version, so a study checks it once)"""

    def best(self, env: str, settings: dict[str, Any]) -> Entry | None:
        """The most specific entry whose key matches `env` and whose conditions `settings` meet (see the module
        doc), else `None`."""
        candidates = [entry for entry in self.entries if entry.matches(env) and entry.holds(settings)]
        return max(candidates, key=Entry.specificity, default=None)  # max keeps the first of equals

    def entry(self, key: str) -> Entry:
        """The entry `key` (`ConfigError` naming the file's keys if it has none)."""
        for entry in self.entries:
            if entry.key == key:
                return entry
        raise ConfigError(f"hyper-parameter file {self.file!r} has no entry {key!r}; its entries: "
                          f"{', '.join(entry.key for entry in self.entries) or 'none'}")

    def check_values(self) -> None:
        """Every entry's keys and values as the training command checks a configuration's: a `ConfigError` names
        the file, the entry and the key."""
        if self.checked:
            return
        from experiments.validation import check_settings

        for entry in self.entries:
            try:
                config = RunConfig()
                for key, value in entry.settings.items():
                    apply(config, key, value)
                check_settings(config)
            except ConfigError as error:
                raise ConfigError(f"{entry.where}: {error}") from None
        self.checked = True


def shown_file(path: str) -> str:
    """A hyper-parameter file as a run records it: `configs/…` for a shipped file, else `path` itself."""
    root = shipped_dir().resolve()
    resolved = Path(path).resolve()
    return f"configs/{resolved.relative_to(root).as_posix()}" if resolved.is_relative_to(root) else path


def load(path: str) -> EntryFile:
    """The entries of the file at `path`, read once per version of the file (`_load`)."""
    stat = Path(path).stat()
    return _load(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int, size: int) -> EntryFile:
    """`ConfigError` naming the file and the entry where the file is not a mapping of entries, an entry holds a
    setting of `NOT_IN_ENTRIES`, or its `when` is not a mapping of conditions; values are checked later
    (`EntryFile.check_values`)."""
    file = shown_file(path)
    entries = []
    for key, body in load_yaml(path).items():
        where = f"hyper-parameter file {file!r}, entry {shown(key)}"
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: an entry's key is an env id or a pattern of them (MiniGrid-Memory*)")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: expected a mapping of settings, got {shown(body)}")
        named = [setting for setting in NOT_IN_ENTRIES if setting in body]
        if named:
            raise ConfigError(f"{where}: {named[0]} is not a setting of an entry (an entry may not set "
                              f"{', '.join(NOT_IN_ENTRIES)})")
        when = body.get("when", {})
        if not isinstance(when, dict):
            raise ConfigError(f"{where}: when: expected a mapping of conditions (env_kwargs.length: '>= 100'), "
                              f"got {shown(when)}")
        try:
            conditions = tuple(parse_condition(k, v) for k, v in when.items())
        except ValueError as error:
            raise ConfigError(f"{where}: {error}") from None
        entries.append(Entry(file, key, {k: v for k, v in body.items() if k != "when"}, conditions))
    return EntryFile(file, tuple(entries))


def chosen(choice: str, algo: str) -> tuple[str | None, str | None]:
    """The file (a path) and entry key that `hyperparams` = `choice` names for learner `algo`: `auto`, the
    learner's shipped file (`None` when it has none); `none`, neither; `FILE` or `FILE#KEY`."""
    if choice == OFF:
        return None, None
    if choice == AUTO:  # a shipped file's name, never a path an algo value makes (validation names a bad algo)
        return (str(shipped_dir() / FOLDER / f"{algo}.yml") if algo in shipped_names(FOLDER) else None), None
    name, _, key = choice.partition("#")
    return config_path(name, FOLDER), key or None


def entry_for(config: RunConfig) -> Entry | None:
    """The entry that applies under `config`'s settings (see the module doc), read in the file its `hyperparams`
    names; the file's values are checked when one applies."""
    path, key = chosen(config.hyperparams, config.algo)
    if path is None:
        return None
    entries = load(path)
    entry = entries.entry(key) if key is not None else entries.best(config.env, plain(config.to_dict()))
    if entry is not None:
        entries.check_values()
    return entry


def recorded_entry(config: RunConfig) -> Entry | None:
    """The entry `config.hyperparams` records as applied (`FILE#KEY`); `None` where it records none (`none`,
    `auto` in a configuration made by hand) or its file no longer holds it."""
    if "#" not in config.hyperparams:
        return None
    try:
        path, key = chosen(config.hyperparams, config.algo)
        return None if path is None or key is None else load(path).entry(key)
    except (ConfigError, OSError):
        return None


def kept_keys(config: RunConfig, entry: Entry) -> list[str]:
    """The dotted keys `entry` sets (`n_envs`, `ppo.batch_size`, `env_kwargs.length`) whose value in `config` is
    the entry's: those no layer above the entry replaced."""
    own = RunConfig()
    for key, value in entry.settings.items():
        apply(own, key, value)
    theirs, mine = plain(config.to_dict()), plain(own.to_dict())
    sections = {name for name, value in theirs.items() if isinstance(value, dict) and name != "env_wrapper"}
    keys = []
    for key, value in entry.settings.items():
        dotted = [f"{key}.{sub}" for sub in value] if key in sections and isinstance(value, dict) else [key]
        keys += [name for name in dotted if _at(theirs, name) == _at(mine, name)]
    return keys


def _at(settings: dict[str, Any], dotted: str) -> Any:
    """The value of `dotted` (one level of sections) in `settings`; `_MISSING` where it has none."""
    head, _, rest = dotted.partition(".")
    found = settings.get(head, _MISSING)
    if rest:
        found = found.get(rest, _MISSING) if isinstance(found, dict) else _MISSING
    return found


_MISSING = object()
NAMED = re.compile(r"(?<![\w.\-\[])([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?=[=\[])")
"""a key a message names with its value (`ppo.batch_size=`, `seeds[1]=`)"""
QUOTED = re.compile(r"'([A-Za-z_]\w*)'")
"""a name a message about an env's keyword arguments quotes (`unexpected keyword argument(s) 'goal_velocty'`)"""
LEADING = re.compile(r"^([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)[=:\[ ]")
"""the key a message is about: its first word (`stop_when_solved=2: ...`)"""


def named_source(message: str, config: RunConfig) -> str:
    """`message` naming the hyper-parameter entry `config` records where a key it names holds the entry's value:
    `hyper-parameter file 'F', entry 'KEY': ...` when the key it is about does (as the entry's own checks name
    it), else `... (n_envs from hyper-parameter file 'F', entry 'KEY')` for the others it names with their values
    (an env's keyword arguments, which a message about the env names bare, included)."""
    entry = recorded_entry(config)
    if entry is None or message.startswith(entry.where):
        return message
    kept = kept_keys(config, entry)

    def held(name: str) -> list[str]:
        """The keys of the entry that `name` is (or lies inside): a section or mapping named whole is not one."""
        return [key for key in kept if name == key or name.startswith(key + ".")]

    leading = LEADING.match(message)
    if leading is not None and held(leading.group(1)):
        return f"{entry.where}: {message}"
    about_env = "env_kwargs" in message
    names = NAMED.findall(message) + (QUOTED.findall(message) if about_env else [])
    others = [key for name in names
              for key in [*held(name), *(held(f"env_kwargs.{name}") if about_env and "." not in name else [])]]
    others = list(dict.fromkeys(others))
    return f"{message} ({', '.join(others)} from {entry.where})" if others else message


def applied_line(names: list[str], what: str = "runs", under: str = "--config, flags and -p") -> str | None:
    """The line a command prints about the entries its runs (or a tune's tasks: `what`) start from, given their
    `hyperparams` (`FILE#KEY` or `none`), each with its share when there are several, and what lies over them
    (`under`); `None` when no entry applied."""
    applied = [name for name in names if name != OFF]
    if not applied:
        return None
    counts = {name: applied.count(name) for name in dict.fromkeys(applied)}
    parts = [name + ("" if len(names) == 1 else f" ({count} of {len(names)} {what})") for name, count in counts.items()]
    verb = "applies" if len(parts) == 1 else "apply"
    return f"hyperparams: {', '.join(parts)} {verb} under {under} (--hyperparams none: without it)"


def summary(path: Path, entry: Entry) -> str:
    """The first sentence of the comment right above the entry's key in its file, with the entry's conditions."""
    from experiments.catalogues import first_sentence

    comment: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            comment.append(line.lstrip("#").strip())
        elif line[:1].strip() and line.split(":", 1)[0].strip("'\"") == entry.key:
            break
        else:  # a blank line, another entry's key or one of its settings: the comment was not this entry's
            comment = []
    else:
        comment = []
    text = first_sentence("\n".join(comment)) if comment else "(no comment above the entry)"
    return text + "".join(f" [when {condition}]" for condition in entry.conditions)


def catalogue() -> dict[str, str]:
    """Every entry of the shipped hyper-parameter files, `FILE#KEY`, with its summary; the files are checked."""
    listed = {}
    for path in sorted((shipped_dir() / FOLDER).glob("*.yml")):
        entries = load(str(path))
        entries.check_values()
        listed.update({entry.name: summary(path, entry) for entry in entries.entries})
    return listed
