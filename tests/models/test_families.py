"""The model-family registry: one record per family, each naming parts that exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.core.errors import UserError
from lmmbench.models.families import MODEL_FAMILIES, family_from_config
from lmmbench.models.processor_build import PARTS_BUILDERS, declares_processor
from lmmbench.profiling.families import HOOK_LAYOUTS


@pytest.mark.parametrize("name", MODEL_FAMILIES.names())
def test_every_family_names_a_model_class_a_layout_and_processor_parts_that_exist(name: str) -> None:
    import transformers

    fam = MODEL_FAMILIES.get(name)
    assert hasattr(transformers, fam.model_class), fam.model_class
    assert fam.hook_layout in HOOK_LAYOUTS
    assert HOOK_LAYOUTS.get(fam.hook_layout).multimodal == fam.multimodal
    if fam.multimodal:
        assert fam.parts in PARTS_BUILDERS and hasattr(transformers, fam.processor_class)
    else:
        assert fam.parts == "" and not fam.audio


def _model_dir(tmp_path: Path, cfg: dict[str, object]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


@pytest.mark.parametrize(("cfg", "family"), [
    ({"model_type": "qwen2_5_omni", "thinker_config": {}}, "qwen2_5_omni"),
    ({"model_type": "qwen2_5_omni_thinker", "text_config": {}}, "qwen2_5_omni_thinker"),
    ({"model_type": "qwen2_5_vl", "text_config": {}}, "qwen2_5_vl"),
    ({"model_type": "qwen2_vl", "text_config": {}}, "qwen2_vl"),
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "causal_lm"),
])  # fmt: skip
def test_family_from_config(tmp_path: Path, cfg: dict[str, object], family: str) -> None:
    assert family_from_config(_model_dir(tmp_path, cfg)).name == family


def test_unknown_multimodal_config_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unsupported model family.*supported: causal_lm"):
        family_from_config(_model_dir(tmp_path, {"model_type": "mystery", "text_config": {}}))


def test_only_a_directory_that_declares_its_processor_gets_the_stock_one(tmp_path: Path) -> None:
    d = _model_dir(tmp_path / "m", {"model_type": "qwen2_5_vl"})
    (d / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "Qwen2VLImageProcessor"}))
    assert not declares_processor(d)
    (d / "tokenizer_config.json").write_text(json.dumps({"processor_class": "Qwen2_5_VLProcessor"}))
    assert declares_processor(d)
