"""Which keys of a written file are secrets."""

from __future__ import annotations


def test_measured_fields_ending_in_token_are_never_masked_as_secrets() -> None:
    """Secret masking of written files names secrets exactly: ``hf_token`` / ``access_token`` / ``token`` are masked,
    a measured ``first_token`` or ``visual_ms_per_token`` is kept."""
    from lmmbench.core.secrets import MASK, redact_config

    written = redact_config({"first_token": "Paris", "visual_ms_per_token": 0.088, "max_new_token": 16,
                             "hf_token": "hf_abcdef", "access_token": "xyz123", "token": "t0k3n",
                             "api_key": "sk-1234", "openai_api_key": "sk-5678"})  # fmt: skip
    assert written["first_token"] == "Paris" and written["visual_ms_per_token"] == 0.088
    assert written["max_new_token"] == 16
    assert [written[k] for k in ("hf_token", "access_token", "token", "api_key", "openai_api_key")] == [MASK] * 5
