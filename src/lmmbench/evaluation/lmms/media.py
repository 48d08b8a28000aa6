"""The benchmarks' data from the Hugging Face ``datasets`` cache, and their media as files.

Rows are read with ``datasets.load_dataset(path, name, split=...)`` (offline when ``HF_HUB_OFFLINE`` /
``HF_DATASETS_OFFLINE`` are set: then only its Arrow cache is read). Image and audio columns are read
undecoded (``decode=False``: the stored bytes), so no audio/video decoding library is needed.

A request carries media as files: an image is saved as PNG of its RGB conversion (what lmms-eval's
OpenAI-compatible model sends, so the bytes and their hash are the same), audio as the stored bytes
with the stored file's extension, video as ``n`` frames sampled uniformly (lmms-eval's
``np.linspace(0, total - 1, n, dtype=int)``), each a PNG. Files are named by the SHA-256 of their bytes
under ``$LMMBENCH_HOME/media/lmms/``.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

from lmmbench.core.errors import UserError
from lmmbench.models.tiny import lmmbench_home

__all__ = ["Rows", "audio_file", "datasets_cache", "hf_home", "image_file", "load_rows", "media_dir",
           "video_frame_files"]


def media_dir() -> Path:
    """Where media files of the benchmarks are written."""
    return lmmbench_home() / "media" / "lmms"


def hf_home() -> Path:
    """``$HF_HOME`` (default ``~/.cache/huggingface``), where Video-MME's videos are unpacked."""
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()


def datasets_cache() -> Path:
    """The ``datasets`` cache as the environment says now (``HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``)."""
    env = os.environ.get("HF_DATASETS_CACHE")
    return Path(env).expanduser() if env else hf_home() / "datasets"


class Rows(Sequence[dict[str, Any]]):
    """A data set split's rows as dicts, read from the Arrow file on access (media stay on disk until used)."""

    def __init__(self, ds: Any, n: int | None = None) -> None:
        self._ds = ds
        self._n = len(ds) if n is None else min(n, len(ds))

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return dict(self._ds[i % self._n])

    def head(self, n: int) -> Rows:
        """The first ``n`` rows."""
        return Rows(self._ds, min(n, self._n))


def load_rows(task_name: str, dataset: str, config: str | None, split: str) -> Rows:
    """The rows of ``dataset`` / ``config`` / ``split``, media columns undecoded."""

    try:
        import datasets  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        raise UserError(f"{task_name} reads its data with the 'datasets' package: pip install datasets") from None
    where = f"{dataset}" + (f" ({config})" if config else "") + f", split '{split}'"
    try:
        ds = datasets.load_dataset(dataset, config, split=split, cache_dir=str(datasets_cache()))
    except Exception as exc:  # datasets raises many kinds (offline, missing config, missing split)
        raise UserError(
            f"{task_name}: cannot load {where} from the Hugging Face cache ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}); download it once online, or set HF_HOME to the cache that has it"
        ) from None
    for col, feat in ds.features.items():
        if isinstance(feat, datasets.Image):
            ds = ds.cast_column(col, datasets.Image(decode=False))
        elif isinstance(feat, datasets.Audio):
            ds = ds.cast_column(col, datasets.Audio(decode=False))
    return Rows(ds)


def _write(data: bytes, suffix: str) -> Path:
    digest = hashlib.sha256(data).hexdigest()
    path = media_dir() / f"{digest}{suffix}"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f"{suffix}.tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def open_image(value: Any) -> Any:
    """A PIL image from a stored image cell (``{"bytes", "path"}``, a PIL image, or a path)."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):
        if value.get("bytes"):
            return Image.open(io.BytesIO(value["bytes"]))
        value = value.get("path")
    if isinstance(value, str) and Path(value).is_file():
        return Image.open(value)
    raise ValueError(f"not an image: {str(value)[:80]}")


def png_bytes(image: Any) -> bytes:
    """PNG of the RGB image, with PIL's default options."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG")
    return buf.getvalue()


def image_file(value: Any) -> Path:
    """The PNG file of a stored image (RGB)."""
    return _write(png_bytes(open_image(value)), ".png")


def audio_file(value: Any) -> Path:
    """The file of a stored audio cell (its own bytes and extension)."""
    if isinstance(value, dict) and value.get("bytes"):
        suffix = Path(str(value.get("path") or "clip.wav")).suffix or ".wav"
        return _write(bytes(value["bytes"]), suffix.lower())
    path = value.get("path") if isinstance(value, dict) else value
    if isinstance(path, str) and Path(path).is_file():
        return Path(path)
    raise ValueError(f"not an audio clip: {str(value)[:80]}")


def video_frame_files(path: Path, n_frames: int) -> list[Path]:
    """``n_frames`` frames of the video, uniformly sampled, as PNG files."""
    import av
    import numpy as np

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        total = stream.frames
        if not total:  # a container without a frame count: count by decoding
            total = sum(1 for _ in container.decode(stream))
            container.seek(0)
        wanted = [int(i) for i in np.linspace(0, total - 1, min(n_frames, total), dtype=int)]
        keep: dict[int, bytes] = {}
        for i, frame in enumerate(container.decode(stream)):
            if i in wanted and i not in keep:
                keep[i] = png_bytes(frame.to_image())
            if i >= wanted[-1]:
                break
    return [_write(keep[i], ".png") for i in wanted if i in keep]
