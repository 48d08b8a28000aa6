"""Shared fixtures of the TTFT tests: the synthetic set and the loaded tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def synth_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lmmbench.media.synth import SynthConfig, synth_media

    root = tmp_path_factory.mktemp("ttft_synth")
    return synth_media(root, SynthConfig(video_durations_s=(1.0, 2.0), audio_durations_s=(4.0,), seed=1))


@pytest.fixture(scope="session")
def tiny_omni() -> Any:
    from lmmbench.models import load_model

    return load_model("tiny-omni")
