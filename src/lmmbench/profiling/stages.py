"""From timeline spans to the TTFT stage breakdown (the field names of docs/ttft-breakdown.md).

    ttft_ms          = the root span: input transfer to the device + generate(max_new_tokens=1)
    visual_encoder_ms, audio_encoder_ms = time in the encoder modules, wherever they ran
                       (transformers 5.x runs image / video encoders before the first forward)
    llm_prefill_ms   = time in the text LLM module
    prefill_ms       = llm_prefill_ms + the first forward's own glue (outside wrapper and lm_head)
    others_ms        = ttft - visual - audio - prefill, split into OTHERS_PARTS:
        others_input_transfer_ms   inputs .to(device) (ours, and generate's own move_to_device)
        others_generate_setup_ms   generation config, validation, logits processors, stopping criteria
        others_input_prep_ms       model inputs, attention mask, prepare_inputs_for_generation
        others_position_ids_ms     position ids / multimodal rope index (get_rope_index)
        others_encoder_dispatch_ms encoder glue before the first forward (dtype casts, splits)
        others_cache_setup_ms      KV cache creation
        others_embedding_merge_ms  token embedding + placeholder masks + masked_scatter of encoder outputs
        others_lm_head_ms          lm_head on the last position
        others_first_token_ms      after the forward: logits processors, argmax / sampling, stop checks
        others_unattributed_ms     what no span covers (gaps inside generate)
"""

from __future__ import annotations

from lmmbench.profiling.categories import CATEGORY_FIELD, field_of_category
from lmmbench.profiling.timeline import ResolvedSpan

__all__ = ["OTHERS_PARTS", "STAGE_FIELDS", "TTFT_STAGES", "field_of_category", "stage_breakdown", "unmeasured_fields"]

OTHERS_PARTS = (
    "others_input_transfer_ms",
    "others_generate_setup_ms",
    "others_input_prep_ms",
    "others_position_ids_ms",
    "others_encoder_dispatch_ms",
    "others_cache_setup_ms",
    "others_embedding_merge_ms",
    "others_lm_head_ms",
    "others_first_token_ms",
    "others_unattributed_ms",
)

# the top-level stages, in the order of the timing standard (docs/ttft-breakdown.md)
TTFT_STAGES = (
    "visual_encoder_ms",
    "audio_encoder_ms",
    "prefill_ms",
    "llm_prefill_ms",
    "others_ms",
    "ttft_ms",
)

STAGE_FIELDS = (
    *TTFT_STAGES,
    *OTHERS_PARTS,
    "unattributed_pct",
)


def stage_breakdown(spans: list[ResolvedSpan], merge_in_forward: bool = False) -> dict[str, float]:
    """Fold spans into the breakdown; ``merge_in_forward`` when the model has no separate
    multimodal wrapper (transformers 4.x), so the forward's own time is the embedding merge."""
    acc = dict.fromkeys((*CATEGORY_FIELD.values(), *OTHERS_PARTS), 0.0)
    ttft = 0.0
    for span in spans:
        if span.depth == 0:
            ttft += span.duration_ms
        field = CATEGORY_FIELD.get(span.category, "others_unattributed_ms")
        if field == "prefill_glue_ms" and merge_in_forward:
            field = "others_embedding_merge_ms"
        acc[field] += span.exclusive_ms
    visual, audio, llm = acc["visual_encoder_ms"], acc["audio_encoder_ms"], acc["llm_prefill_ms"]
    prefill = llm + acc["prefill_glue_ms"]
    out = {
        "visual_encoder_ms": visual,
        "audio_encoder_ms": audio,
        "prefill_ms": prefill,
        "llm_prefill_ms": llm,
        "others_ms": ttft - visual - audio - prefill,
        "ttft_ms": ttft,
    }
    out.update({k: acc[k] for k in OTHERS_PARTS})
    out["unattributed_pct"] = 100.0 * acc["others_unattributed_ms"] / ttft if ttft > 0 else 0.0
    return out


# fields computed from another field: when that one is unmeasured, so are they
_DERIVED = {
    "visual_encoder_ms": ("others_ms",),
    "audio_encoder_ms": ("others_ms",),
    "llm_prefill_ms": ("prefill_ms", "others_ms"),
    "prefill_glue_ms": ("prefill_ms", "others_ms", "others_first_token_ms"),  # the forward hook also
    "others_unattributed_ms": ("unattributed_pct",),  # opens the first-token span
}


def unmeasured_fields(categories: list[str]) -> tuple[str, ...]:
    """The breakdown fields left unmeasured when the hooks of span ``categories`` are gone:
    each category's own field and the fields computed from it (a dropped stage is empty, not 0)."""
    out: list[str] = []
    for category in categories:
        own = CATEGORY_FIELD.get(category)
        if own is None:
            continue
        out.extend(f for f in (own, *_DERIVED.get(own, ())) if f != "prefill_glue_ms")
    return tuple(dict.fromkeys(out))
