"""Data sets in the Hugging Face ``datasets`` cache, written as the hub would leave them, for tests offline.

With ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``, ``datasets.load_dataset("ORG/NAME", CONFIG)`` reads only its
Arrow cache, ``$HF_HOME/datasets/ORG___NAME/<config>/<version>/<hash>/`` (FIELD-NOTES, "Hugging Face caches
offline"). ``write_dataset_cache`` writes that cache with the library's own builder, fed with rows in the real
data set's schema; the hash folder is named from the rows, so edited rows never reuse an old folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["use_offline_cache", "write_dataset_cache"]


def use_offline_cache(mp: Any, hf_home: Path) -> None:
    """Point ``datasets`` and ``huggingface_hub`` at ``hf_home``, offline, through a pytest ``MonkeyPatch`` ``mp``
    (undone with it). Both libraries read ``HF_HOME`` and the offline switches once, at import: a test earlier in
    the same process may have imported them, so their config values are set too, not only the environment."""
    for var, value in (("HF_HOME", str(hf_home)), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")):
        mp.setenv(var, value)
    mp.delenv("HF_DATASETS_CACHE", raising=False)
    import datasets
    import huggingface_hub.constants

    mp.setattr(datasets.config, "HF_DATASETS_CACHE", hf_home / "datasets")
    for module in (datasets.config, huggingface_hub.constants):
        mp.setattr(module, "HF_HUB_OFFLINE", True)
    mp.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)


def write_dataset_cache(hf_home: Path, repo_id: str, config: str | None, splits: dict[str, list[dict[str, Any]]],
                        features: Any = None) -> Path:
    """Write ``splits`` (split -> rows) as data set ``repo_id`` / ``config`` (``default`` when None) into the
    ``datasets`` cache under ``hf_home``; returns the folder. ``features`` default to the ones inferred from
    the rows."""
    import datasets

    if features is None:
        features = datasets.Dataset.from_list(next(iter(splits.values()))).features

    class _Rows(datasets.GeneratorBasedBuilder):  # type: ignore[misc]
        def _info(self) -> Any:
            return datasets.DatasetInfo(features=features)

        def _split_generators(self, dl_manager: Any) -> list[Any]:
            return [datasets.SplitGenerator(name=name, gen_kwargs={"name": name}) for name in splits]

        def _generate_examples(self, name: str) -> Any:
            yield from enumerate(splits[name])

    digest = hashlib.sha1(json.dumps(splits, sort_keys=True, default=str).encode()).hexdigest()
    builder = _Rows(cache_dir=str(hf_home / "datasets"), dataset_name=repo_id.split("/")[-1],
                    config_name=config or "default", hash=digest, repo_id=repo_id, version="0.0.0")  # fmt: skip
    builder.download_and_prepare()
    return Path(builder.cache_dir)
