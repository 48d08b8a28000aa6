"""Span categories and the breakdown field each one's exclusive time goes to.

Both the stage breakdown (``profiling.stages``) and the profiler trace ranges
(``profiling.trace_ranges``, which a ``Timeline`` opens) name a span by its field, so the mapping
lives here, below both.
"""

from __future__ import annotations

__all__ = ["CATEGORY_FIELD", "field_of_category"]

#: span category -> field its exclusive time is added to
CATEGORY_FIELD = {
    "input_transfer": "others_input_transfer_ms",
    "generate_setup": "others_generate_setup_ms",
    "input_prep": "others_input_prep_ms",
    "position_ids": "prefill_rope_index_ms",
    "encoder_dispatch": "others_encoder_dispatch_ms",
    "cache_setup": "others_cache_setup_ms",
    "wrapper": "prefill_merge_ms",
    "lm_head": "prefill_lm_head_ms",
    "first_token": "others_first_token_ms",
    "generate": "others_unattributed_ms",
    "ttft": "others_unattributed_ms",
    "visual": "visual_encoder_ms",
    "audio": "audio_encoder_ms",
    "llm": "llm_prefill_ms",
    "forward": "prefill_forward_glue_ms",
}


def field_of_category(category: str) -> str:
    """The breakdown field a span of ``category`` adds its exclusive time to (the root span of a
    measurement is ``ttft_ms``)."""
    if category == "ttft":
        return "ttft_ms"
    return CATEGORY_FIELD.get(category, "others_unattributed_ms")
