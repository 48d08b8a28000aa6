"""The TTFT breakdown's field names: the TTFT study's stages, lmmbench's finer parts, and old names.

The TTFT study (a Qwen2.5-Omni TTFT benchmark) defines, and states its results in, four stages of
``ttft_ms`` (the wall time of ``generate()``):

    visual_encoder_ms + audio_encoder_ms + prefill_ms + others_ms == ttft_ms
    prefill_ms = the first thinker forward - the encoders inside it = embedding merge (masked_scatter
                 + get_rope_index) + LLM forward (+ lm_head, which that forward runs)
    llm_prefill_ms = the LLM forward alone
    others_ms = the rest: allocation, CPU-GPU transfer, synchronisation, generate()'s own code

lmmbench splits each of ``prefill_ms`` and ``others_ms`` further (``PREFILL_PARTS`` sum to
``prefill_ms``, ``OTHERS_PARTS`` to ``others_ms``). Results written before the study's names were
kept (``LEGACY_PREFILL_PARTS``: the merge, the rope index and the lm_head counted in others) are read
through ``upgrade_breakdown_row``, so an old run and a new one compare the same quantities.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmmbench.core.numbers import to_float

__all__ = ["LEGACY_PREFILL_PARTS", "OTHERS_PARTS", "PREFILL_PARTS", "STUDY_STAGES", "upgrade_breakdown_row"]

#: the study's stages of ttft_ms, in the order of its timing standard
STUDY_STAGES = ("visual_encoder_ms", "audio_encoder_ms", "prefill_ms", "others_ms")

#: the parts of prefill_ms (the study's "embedding merge + LLM forward"), which sum to it
PREFILL_PARTS = (
    "llm_prefill_ms",           # the text LLM's forward (the study's llm_prefill_ms)
    "prefill_merge_ms",         # token embedding, placeholder masks, masked_scatter of encoder outputs
    "prefill_rope_index_ms",    # position ids / multimodal rope index (get_rope_index), wherever it runs
    "prefill_lm_head_ms",       # lm_head on the last position
    "prefill_forward_glue_ms",  # the first forward's own code outside the above
)  # fmt: skip

#: the parts of others_ms (the study's scheduling overhead), which sum to it
OTHERS_PARTS = (
    "others_input_transfer_ms",
    "others_generate_setup_ms",
    "others_input_prep_ms",
    "others_encoder_dispatch_ms",
    "others_cache_setup_ms",
    "others_first_token_ms",
    "others_unattributed_ms",
)

#: names of results written before the study's names were kept -> today's prefill part
LEGACY_PREFILL_PARTS = {
    "others_embedding_merge_ms": "prefill_merge_ms",
    "others_position_ids_ms": "prefill_rope_index_ms",
    "others_lm_head_ms": "prefill_lm_head_ms",
}


def _cell(x: float | None, like: Any) -> Any:
    if x is None:
        return "" if isinstance(like, str) else None
    return f"{x:.6g}" if isinstance(like, str) else x


#: today's prefill parts that an old row lacks: one of them holding a value marks a row of today's layout
_TODAYS_MARKS = (*LEGACY_PREFILL_PARTS.values(), "prefill_forward_glue_ms")


def upgrade_breakdown_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A results row in today's names: an old row (merge, rope index and lm_head under ``others_*``,
    ``prefill_ms`` = LLM forward + glue) gets them as prefill parts and ``prefill_ms`` / ``others_ms``
    recomputed in the study's terms; an unmeasured part leaves the sums empty. Other rows are returned
    as they are (a copy). CSV rows keep string cells.

    A file holding both sets of columns (old and new results concatenated under one header) is read row by
    row: a row with a value in one of today's prefill parts is today's and keeps its columns (the old ones,
    empty or not, are dropped); only the others are read as old."""
    out = dict(row)
    if not any(k in out for k in LEGACY_PREFILL_PARTS):
        return out
    if any(to_float(row.get(k)) is not None for k in _TODAYS_MARKS):
        for old in LEGACY_PREFILL_PARTS:
            out.pop(old, None)
        return out
    like = next((v for k, v in row.items() if k.endswith("_ms")), "")
    moved = [to_float(out.pop(old)) if old in out else None for old in LEGACY_PREFILL_PARTS]  # absent: unmeasured
    for new, value in zip(LEGACY_PREFILL_PARTS.values(), moved, strict=True):
        out[new] = _cell(value, like)
    extra = None if any(v is None for v in moved) else sum(v for v in moved if v is not None)
    old_prefill, llm = to_float(row.get("prefill_ms")), to_float(row.get("llm_prefill_ms"))
    others = to_float(row.get("others_ms"))
    out["prefill_forward_glue_ms"] = _cell(None if old_prefill is None or llm is None else old_prefill - llm, like)
    out["prefill_ms"] = _cell(None if old_prefill is None or extra is None else old_prefill + extra, like)
    out["others_ms"] = _cell(None if others is None or extra is None else others - extra, like)
    return out
