"""Videos of rendered frames (`rgb_array`) with imageio: an animated GIF, or an MP4 through the ffmpeg
binary that the `imageio-ffmpeg` wheel ships."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from envs.atomic import atomic_path

FORMATS = (".gif", ".mp4")
MIN_SIDE = 128
"""frames smaller than this (a T-Maze strip) are scaled up by a whole factor, pixels kept sharp"""


def check_video_path(path: str | Path) -> Path:
    """`path` as a video file name; `ValueError` naming the valid formats otherwise."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"--record {str(path)!r}: unknown video format {path.suffix or '(none)'!r}; "
                         f"valid formats: {', '.join(FORMATS)}")
    return path


def upscale(frame: np.ndarray, min_side: int = MIN_SIDE) -> np.ndarray:
    """`frame` repeated along both axes so that its shorter side reaches `min_side`; MP4 also needs even sides."""
    factor = max(1, -(-min_side // min(frame.shape[:2])))
    frame = np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)
    pad = [(0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)]
    return np.pad(frame, pad, mode="edge")


def write_video(frames: Sequence[np.ndarray], path: str | Path, fps: float) -> Path:
    """Write `frames` (`H × W × 3` uint8, one size) to the new file `path` (`.gif` loops forever), whole or not at
    all; `FileExistsError` when `path` exists, even when another process made it meanwhile: a file is never
    overwritten (`experiments.writable.write_new_file`)."""
    from experiments.writable import write_new_file

    path = check_video_path(path)
    if not frames:
        raise ValueError("no frames to record")
    images = [upscale(np.asarray(frame, dtype=np.uint8)) for frame in frames]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_new_file(path, lambda tmp: _save(images, tmp, fps))
    return path


def _save(images: list[np.ndarray], path: Path, fps: float) -> None:
    """`images` to the video `path` (replaced), whole or not at all (`envs.atomic.atomic_path`)."""
    import imageio.v2 as imageio

    with atomic_path(path) as tmp:
        if path.suffix.lower() == ".gif":
            imageio.mimsave(tmp, images, duration=1000 / fps, loop=0)
        else:
            imageio.mimsave(tmp, images, fps=fps, macro_block_size=1)
