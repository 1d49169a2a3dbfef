"""Whether a file is a whole model that SB3 saved: a zip holding SB3's entries, each matching its checksum.

A truncated or corrupted checkpoint, `init_from` model or evaluated model is then named with what is wrong in one
line, before anything loads it (SB3's own errors are a `BadZipFile`, `KeyError` or pickle traceback).
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

ENTRIES = ("data", "policy.pth")
"""the entries of every model SB3 saves"""


def damage(path: Path) -> str | None:
    """Why the file at `path` is not a whole saved model, in a few words; `None` when it is one."""
    try:
        with zipfile.ZipFile(path) as archive:
            missing = [name for name in ENTRIES if name not in archive.namelist()]
            if missing:
                return f"it holds no {missing[0]!r} entry (cut short, or no model SB3 saved)"
            damaged = archive.testzip()
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as error:
        return f"it is not a whole zip file ({error})"
    except OSError as error:
        return f"it cannot be read ([Errno {error.errno}] {error.strerror})"
    if damaged is not None:
        return f"its entry {damaged!r} is damaged (its checksum does not match)"
    return None
