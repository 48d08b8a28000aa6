"""From timeline spans to the TTFT stage breakdown (the field names of docs/ttft-breakdown.md).

The TTFT study's stages, under its names (``core.ttft_names``):

    ttft_ms          = the root span: input transfer to the device + generate(max_new_tokens=1)
    visual_encoder_ms, audio_encoder_ms = time in the encoder modules, wherever they ran
                       (transformers 5.x runs image / video encoders before the first forward)
    prefill_ms       = embedding merge + rope index + LLM forward + lm_head, split into PREFILL_PARTS:
        llm_prefill_ms             the text LLM module (the study's llm_prefill_ms)
        prefill_merge_ms           token embedding + placeholder masks + masked_scatter of encoder outputs
        prefill_rope_index_ms      position ids / multimodal rope index (get_rope_index), wherever it ran
        prefill_lm_head_ms         lm_head on the last position
        prefill_forward_glue_ms    the first forward's own code outside the above
    others_ms        = ttft - visual - audio - prefill, split into OTHERS_PARTS:
        others_input_transfer_ms   inputs .to(device) (ours, and generate's own move_to_device)
        others_generate_setup_ms   generation config, validation, logits processors, stopping criteria
        others_input_prep_ms       model inputs, attention mask, prepare_inputs_for_generation
        others_encoder_dispatch_ms encoder glue before the first forward (dtype casts, splits)
        others_cache_setup_ms      KV cache creation
        others_first_token_ms      after the forward: logits processors, argmax / sampling, stop checks
        others_unattributed_ms     what no span covers (gaps inside generate)
    prefill_outside_forward_ms = the part of prefill_ms that ran outside the first forward (the rope
                       index, which transformers 5.x computes before it): what a timer on the forward misses
"""

from __future__ import annotations

from lmmbench.core.ttft_names import OTHERS_PARTS, PREFILL_PARTS
from lmmbench.profiling.categories import CATEGORY_FIELD, field_of_category
from lmmbench.profiling.timeline import ResolvedSpan

__all__ = ["OTHERS_PARTS", "PREFILL_PARTS", "STAGE_FIELDS", "TTFT_STAGES", "field_of_category", "stage_breakdown",
           "unmeasured_fields"]

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
    *PREFILL_PARTS[1:],
    *OTHERS_PARTS,
    "prefill_outside_forward_ms",
    "prefill_study_timer_ms",
    "unattributed_pct",
)


def _outside_forward_ms(spans: list[ResolvedSpan], prefill_fields: set[str]) -> float:
    """Exclusive time of prefill spans that lie outside the first forward span."""
    forward = next((s for s in spans if s.category == "forward"), None)
    out = 0.0
    for span in spans:
        if CATEGORY_FIELD.get(span.category) not in prefill_fields:
            continue
        inside = forward is not None and forward.start_ms <= span.start_ms and span.end_ms <= forward.end_ms
        if not inside:
            out += span.exclusive_ms
    return out


def stage_breakdown(spans: list[ResolvedSpan], merge_in_forward: bool = False) -> dict[str, float]:
    """Fold spans into the breakdown; ``merge_in_forward`` when the model has no separate
    multimodal wrapper (transformers 4.x layout), so the forward's own time is the embedding merge
    (``prefill_forward_glue_ms`` then stays 0 and is reported unmeasured by the caller)."""
    acc = dict.fromkeys((*CATEGORY_FIELD.values(), *PREFILL_PARTS, *OTHERS_PARTS), 0.0)
    ttft = 0.0
    for span in spans:
        if span.depth == 0:
            ttft += span.duration_ms
        field = CATEGORY_FIELD.get(span.category, "others_unattributed_ms")
        if field == "prefill_forward_glue_ms" and merge_in_forward:
            field = "prefill_merge_ms"
        acc[field] += span.exclusive_ms
    visual, audio = acc["visual_encoder_ms"], acc["audio_encoder_ms"]
    prefill = sum(acc[p] for p in PREFILL_PARTS)
    out = {
        "visual_encoder_ms": visual,
        "audio_encoder_ms": audio,
        "prefill_ms": prefill,
        "llm_prefill_ms": acc["llm_prefill_ms"],
        "others_ms": ttft - visual - audio - prefill,
        "ttft_ms": ttft,
    }
    out.update({k: acc[k] for k in (*PREFILL_PARTS[1:], *OTHERS_PARTS)})
    out["prefill_outside_forward_ms"] = _outside_forward_ms(spans, set(PREFILL_PARTS))
    out["unattributed_pct"] = 100.0 * acc["others_unattributed_ms"] / ttft if ttft > 0 else 0.0
    return out


_ENCODER_CALLERS = ("others_ms", "prefill_ms", "others_encoder_dispatch_ms", "prefill_merge_ms",
                    "prefill_forward_glue_ms")
# fields computed from another field, or that absorb a dropped span's time: when that one is
# unmeasured, so are they
_DERIVED = {
    # an untimed encoder lands in its caller: encoder dispatch (5.x) or the forward / wrapper (4.x, audio)
    "visual_encoder_ms": _ENCODER_CALLERS,
    "audio_encoder_ms": _ENCODER_CALLERS,
    "llm_prefill_ms": ("prefill_merge_ms", "prefill_forward_glue_ms"),
    # the forward hook also opens the first-token span
    "prefill_forward_glue_ms": ("prefill_ms", "others_ms", "others_first_token_ms", "prefill_outside_forward_ms",
                                "prefill_study_timer_ms"),
    "prefill_merge_ms": ("prefill_forward_glue_ms",),
    "prefill_lm_head_ms": ("prefill_forward_glue_ms",),
    # a rope index left untimed lands in generate()'s own (unattributed) time or the forward's glue
    "prefill_rope_index_ms": ("prefill_ms", "others_ms", "prefill_outside_forward_ms", "prefill_forward_glue_ms",
                              "others_unattributed_ms", "unattributed_pct"),
    "others_unattributed_ms": ("unattributed_pct",),
}


def unmeasured_fields(categories: list[str]) -> tuple[str, ...]:
    """The breakdown fields left unmeasured when the hooks of span ``categories`` are gone:
    each category's own field and the fields computed from it (a dropped stage is empty, not 0)."""
    out: list[str] = []
    for category in categories:
        own = CATEGORY_FIELD.get(category)
        if own is None:
            continue
        out.extend((own, *_DERIVED.get(own, ())))
    return tuple(dict.fromkeys(out))
