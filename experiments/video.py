"""Videos of rendered frames (`rgb_array`): an animated GIF written by Pillow, or an MP4 through the ffmpeg
binary that the `imageio-ffmpeg` wheel ships."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from envs.atomic import WriteError, atomic_path, made_folders

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


def rgb_frames(frames: Sequence[Any]) -> list[np.ndarray]:
    """`frames`, as an env's `render()` gives them, as `H × W × 3` uint8 images of one size.

    A grey image (`H × W` or `H × W × 1`) is repeated over the channels, an alpha channel dropped, channels first
    (`C × H × W`, C of 1, 3 or 4) moved last, bools and floats in [0, 1] (over all frames) scaled to [0, 255],
    and values clipped to [0, 255]. Frames smaller than the largest are centred on a black canvas of its size.
    `ValueError` naming the first frame that is no image (no numbers, another number of axes, no pixels)."""
    images = [_channels_last(frame, index) for index, frame in enumerate(frames)]
    unit = all(image.dtype.kind in "bf" and np.nan_to_num(image).max(initial=0) <= 1 for image in images)
    scaled = [np.nan_to_num(image.astype(np.float64)) * (255 if unit else 1) for image in images]
    height, width = max(image.shape[0] for image in images), max(image.shape[1] for image in images)
    canvases = []
    for image in scaled:
        canvas = np.zeros((height, width, 3), dtype=np.uint8)
        top, left = (height - image.shape[0]) // 2, (width - image.shape[1]) // 2
        canvas[top:top + image.shape[0], left:left + image.shape[1]] = np.clip(np.rint(image), 0, 255)
        canvases.append(canvas)
    return canvases


def _channels_last(frame: Any, index: int) -> np.ndarray:
    """One frame as an `H × W × 3` array of its own dtype (`rgb_frames`)."""
    image = np.asarray(frame) if frame is not None else None
    if image is not None and image.dtype.kind in "biuf":
        if image.ndim == 3 and image.shape[-1] not in (1, 3, 4) and image.shape[0] in (1, 3, 4):
            image = np.moveaxis(image, 0, -1)
        if image.ndim == 2:
            image = image[..., None]
        if image.ndim == 3 and image.shape[-1] in (1, 3, 4) and min(image.shape[:2]) > 0:
            return np.repeat(image, 3, axis=-1) if image.shape[-1] == 1 else image[..., :3]
    given = "None" if image is None else f"an array of shape {image.shape} and dtype {image.dtype}"
    raise ValueError(f"render() gave {given} for frame {index}; expected an image: H × W × 3 (RGB), H × W × 4 "
                     "(RGBA), H × W (grey) or channels first, of numbers")


def upscale(frame: np.ndarray, min_side: int = MIN_SIDE) -> np.ndarray:
    """`frame` repeated along both axes so that its shorter side reaches `min_side`; MP4 also needs even sides."""
    factor = max(1, -(-min_side // min(frame.shape[:2])))
    frame = np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)
    pad = [(0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)]
    return np.pad(frame, pad, mode="edge")


def write_video(frames: Sequence[Any], path: str | Path, fps: float) -> Path:
    """Write `frames` (images as `rgb_frames` takes them) to the new file `path` (`.gif` loops forever), whole or
    not at all; `FileExistsError` when `path` exists, even when another process made it meanwhile: a file is never
    overwritten (`experiments.writable.write_new_file`); `ValueError` for a frame that is no image."""
    from experiments.writable import write_new_file

    path = check_video_path(path)
    if not frames:
        raise ValueError("no frames to record")
    images = [upscale(image) for image in rgb_frames(frames)]
    with made_folders(path.parent):  # gone again when the video does not fit
        write_new_file(path, lambda tmp: _save(images, tmp, fps))
    return path


def _save(images: list[np.ndarray], path: Path, fps: float) -> None:
    """`images` to the video `path` (replaced), whole or not at all (`envs.atomic.atomic_path`): a writer that
    fails on a full disk in its own words (ffmpeg's broken pipe or exit status) is reported with the disk's errno.
    An ffmpeg failure the folder does not explain raises `WriteError` (`EIO`) naming `path` and ffmpeg's error."""
    try:
        with atomic_path(path) as tmp:
            if path.suffix.lower() == ".gif":
                _save_gif(images, tmp, fps)
            else:
                _save_mp4(images, tmp, fps)
    except EncoderError as error:
        raise WriteError(errno.EIO, str(error), str(path)) from error


class EncoderError(RuntimeError):
    """ffmpeg ended with an error status; the message is its last error line."""


def _save_gif(images: list[np.ndarray], path: Path, fps: float) -> None:
    """An animated GIF that loops forever, written with Pillow through a file handle closed even when it fails."""
    from PIL import Image

    frames = [Image.fromarray(image) for image in images]
    with open(path, "wb") as handle:
        frames[0].save(handle, format="GIF", save_all=True, append_images=frames[1:], duration=1000 / fps, loop=0)


def _save_mp4(images: list[np.ndarray], path: Path, fps: float) -> None:
    """An H.264 MP4 encoded by the ffmpeg binary of `imageio-ffmpeg`; its messages are kept off the terminal and
    its exit status is checked (`EncoderError`), so a file it did not finish is never taken for a video."""
    import imageio_ffmpeg
    from imageio_ffmpeg._io import get_first_available_h264_encoder

    height, width = images[0].shape[:2]
    codec = get_first_available_h264_encoder()
    command = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-hide_banner", "-nostats", "-v", "error",
               "-f", "rawvideo", "-vcodec", "rawvideo", "-s", f"{width}x{height}", "-pix_fmt", "rgb24",
               "-r", str(Fraction(fps).limit_denominator()), "-i", "-", "-an", "-vcodec", codec,
               "-pix_fmt", "yuv420p", *(["-crf", "25"] if codec == "libx264" else []), str(path)]
    done = subprocess.run(command, input=b"".join(image.tobytes() for image in images),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        raise EncoderError(f"ffmpeg exited with status {done.returncode}" + (f": {lines[-1]}" if lines else ""))
