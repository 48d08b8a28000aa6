"""Spec ``multiturn-kv-reuse``: a conversation of N turns with media in turn 1; the TTFT of each turn
when the whole history is recomputed (media encoders included) against reusing the earlier turns'
KV cache and feeding only the new tokens (``engines.kv_reuse``).

Turn k's prompt is the history (turn 1 with its video / audio, each user message followed by a
fixed assistant reply) plus the new user message. The reuse path's cache is the prefill of every
token turn k shares with turn k-1's prompt + reply, built once in ``setup`` (what a server keeps
between turns). Both paths are timed the same way: ``generate(max_new_tokens=1)`` with the stage
hooks. ``setup`` also checks, per turn, that the reuse path gives the same next-token logits as the
recompute (float32: within 1e-4) and records the difference in every row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from lmmbench.core.clock import now_ns, ns_to_ms
from lmmbench.specs.base import Case, RunOptions, SpecContext, register_spec
from lmmbench.specs.experiment_support import (
    ResearchSpec,
    group_median,
    new_figure,
    ok_rows,
    save_figure,
    synthetic_audio,
    synthetic_frames,
)

__all__ = ["MultiturnKVReuseOptions", "MultiturnKVReuseSpec", "build_turns", "multiturn_findings"]

FOLLOW_UPS = (
    "What colour dominates the picture?",
    "Is there any sound, and what is it like?",
    "Does anything move between the frames?",
    "Summarise the clip in one sentence.",
    "What would you call this clip?",
    "Anything else worth noting?",
)
FILLER = ("The quick brown fox jumps over the lazy dog while the river keeps flowing past the old mill, "
          "and the baker counts loaves by the window. ")


class MultiturnKVReuseOptions(RunOptions):
    """Options of ``lmmbench run multiturn-kv-reuse``."""

    model: str = Field("tiny-omni", description="tiny-omni / tiny-vl (media in turn 1) or tiny-llm (long text "
                       "turn 1), or a local model directory.")
    repeats: int = Field(3, ge=1, description="Measured repeats per (turn, mode).")
    turns: int = Field(4, ge=2, le=1 + len(FOLLOW_UPS), description="Conversation length in user turns.")
    video_frames: int = Field(8, ge=2, description="Frames of the synthetic turn-1 video (multimodal models).")
    frame_size: int = Field(112, ge=28, description="Height and width of the video frames in pixels.")
    audio_s: float = Field(2.0, ge=0, description="Seconds of turn-1 audio (audio models; 0 = none).")
    first_turn_words: int = Field(200, ge=1, description="Words of turn-1 text for text-only models.")
    reply: str = Field("It shows a moving colour gradient with a steady tone in the background.",
                       description="The assistant reply inserted after every user turn of the history.")
    tolerance: float | None = Field(None, gt=0, description="Max |logit difference| reuse vs recompute that counts "
                                    "as equal (default: 1e-4 in float32, 5e-2 in bfloat16 / float16).")


def build_turns(loaded: Any, opts: MultiturnKVReuseOptions) -> list[dict[str, Any]]:
    """Per turn k (1..N): its full inputs, and the number of tokens it shares with turn k-1 + reply."""
    ref = loaded.ref
    media: dict[str, Any] = {}
    first: list[dict[str, Any]] = []
    if ref.is_multimodal:
        media["videos"] = [synthetic_frames(opts.video_frames, opts.frame_size, opts.frame_size, seed=opts.seed)]
        media["videos_kwargs"] = {"fps": 2.0}
        first.append({"type": "video"})
        if ref.has_audio and opts.audio_s > 0:
            media["audio"] = [synthetic_audio(opts.audio_s, seed=opts.seed)]
            first.append({"type": "audio"})
        opener = "Describe this clip."
    else:
        words = FILLER.split()
        opener = " ".join(words[i % len(words)] for i in range(opts.first_turn_words)) + " Summarise this text."
    prompts = [opener, *FOLLOW_UPS[: opts.turns - 1]]
    owner = loaded.processor if loaded.processor is not None else loaded.tokenizer

    def message(text: str, with_media: bool) -> dict[str, Any]:
        if loaded.processor is None:
            return {"role": "user", "content": text}
        return {"role": "user", "content": [*(first if with_media else []), {"type": "text", "text": text}]}

    def reply() -> dict[str, Any]:
        if loaded.processor is None:
            return {"role": "assistant", "content": opts.reply}
        return {"role": "assistant", "content": [{"type": "text", "text": opts.reply}]}

    def encode(messages: list[dict[str, Any]], gen_prompt: bool) -> dict[str, Any]:
        text = owner.apply_chat_template(messages, add_generation_prompt=gen_prompt, tokenize=False)
        text = text if isinstance(text, str) else str(text[0])
        if loaded.processor is None:
            return dict(loaded.tokenizer([text], return_tensors="pt"))
        return dict(loaded.processor(text=[text], return_tensors="pt", **media))

    from lmmbench.engines.kv_reuse import common_prefix_len

    out: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for k, prompt in enumerate(prompts, start=1):
        t0 = now_ns()
        inputs = encode([*history, message(prompt, k == 1)], True)
        pack_ms = ns_to_ms(now_ns() - t0)
        shared = 0
        if history:
            prev = encode(history, False)  # turn k-1's prompt + its reply, as the cache holds it
            shared = common_prefix_len(inputs["input_ids"][0], prev["input_ids"][0])
        out.append({"turn": k, "inputs": inputs, "shared_tokens": shared, "pack_ms": pack_ms})
        history += [message(prompt, k == 1), reply()]
    return out


@register_spec
class MultiturnKVReuseSpec(ResearchSpec):
    """TTFT per turn: full recompute vs reusing the earlier turns' KV cache."""

    name = "multiturn-kv-reuse"
    help = ("N-turn conversation with media in turn 1: TTFT of each later turn with full recompute vs reusing "
            "the earlier turns' KV cache; saving per turn and tokens recomputed.")
    options_model: ClassVar[type[RunOptions]] = MultiturnKVReuseOptions
    columns = (
        "turn", "mode", "total_tokens", "cached_tokens", "recomputed_tokens", "visual_encoder_ms",
        "audio_encoder_ms", "prefill_ms", "others_ms", "ttft_ms", "pack_ms", "max_abs_logit_diff",
        "same_first_token",
    )
    stage_fields: ClassVar[tuple[str, ...]] = ("visual_encoder_ms", "audio_encoder_ms", "prefill_ms", "others_ms")
    total_field = "ttft_ms"
    fit_pairs = (("ttft_ms", "recomputed_tokens"),)
    unattributed_field: ClassVar[str | None] = None

    def __init__(self) -> None:
        self.verification: dict[int, dict[str, float]] = {}
        self.tolerance = 1e-4

    def setup(self, ctx: SpecContext) -> list[Case]:
        from lmmbench.engines.kv_reuse import prefill_prefix, verify_reuse

        opts = ctx.options
        assert isinstance(opts, MultiturnKVReuseOptions)
        eng = self.load(ctx)
        loaded = eng.loaded
        full_precision = str(loaded.dtype) == "torch.float32"
        self.tolerance = opts.tolerance or (1e-4 if full_precision else 5e-2)
        turns = build_turns(loaded, opts)
        dev = loaded.device
        prefixes: dict[int, Any] = {}
        cases: list[Case] = []
        for t in turns:
            k = t["turn"]
            dev_inputs = {n: (v.to(dev) if hasattr(v, "to") else v) for n, v in t["inputs"].items()}
            t["dev_inputs"] = dev_inputs
            modes = ["recompute"]
            if t["shared_tokens"] > 0:
                prefixes[k] = prefill_prefix(loaded.model, dev_inputs, t["shared_tokens"])
                self.verification[k] = verify_reuse(loaded.model, dev_inputs, prefixes[k], dev)
                modes.append("reuse")
            for mode in modes:
                cases.append(Case(id=f"turn{k}_{mode}", group=mode, params={"turn": k, "mode": mode},
                                  extra={"turn": k, "mode": mode}))
        ctx.state.update(loaded=loaded, turns={t["turn"]: t for t in turns}, prefixes=prefixes, hooks=eng.hooks)
        ctx.environment["kv_reuse_verification"] = {str(k): v for k, v in self.verification.items()}
        return cases

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        from lmmbench.engines.breakdown import run_generate_with_breakdown
        from lmmbench.engines.kv_reuse import reuse_generate_kwargs, reuse_inputs, set_rope_deltas

        loaded = ctx.state["loaded"]
        k, mode = case.params["turn"], case.params["mode"]
        turn = ctx.state["turns"][k]
        inputs = turn["dev_inputs"]
        total = int(inputs["input_ids"].shape[1])
        if mode == "reuse":
            prefix = ctx.state["prefixes"][k]
            gen_kwargs = reuse_generate_kwargs(loaded.model, prefix)  # cache copy: not timed
            res = run_generate_with_breakdown(loaded.model, reuse_inputs(inputs), loaded.device,
                                              ctx.state["hooks"], generate_kwargs=gen_kwargs)
            cached = prefix.length
        else:
            set_rope_deltas(loaded.model, None)
            res = run_generate_with_breakdown(loaded.model, inputs, loaded.device, ctx.state["hooks"])
            cached = 0
        f = res.measured_fields()  # a dropped hook's stage is None (an empty cell)
        check = self.verification.get(k, {})
        return {
            "total_tokens": total,
            "cached_tokens": cached,
            "recomputed_tokens": total - cached,
            "visual_encoder_ms": f["visual_encoder_ms"],
            "audio_encoder_ms": f["audio_encoder_ms"],
            "prefill_ms": f["prefill_ms"],
            "others_ms": f["others_ms"],
            "ttft_ms": f["ttft_ms"],
            "pack_ms": turn["pack_ms"],
            "max_abs_logit_diff": check.get("max_abs_logit_diff", 0.0),
            "same_first_token": check.get("same_first_token", 1.0),
            **res.row_status(),
        }

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        del analysis
        out = multiturn_findings(rows)
        diffs = [v["max_abs_logit_diff"] for v in self.verification.values()]
        same = all(v["same_first_token"] == 1.0 for v in self.verification.values())
        max_diff = max(diffs) if diffs else 0.0
        out["verification"] = {
            "per_turn": {str(k): v for k, v in self.verification.items()},
            "max_abs_logit_diff": max_diff,
            "tolerance": self.tolerance,
            "all_same_first_token": same,
            "reuse_matches_recompute": bool(max_diff <= self.tolerance and same),
        }
        out["finding"] += (f"; reuse matches recompute: max |logit diff| {max_diff:.2e} "
                           f"(tolerance {self.tolerance:g}), same first token: {same}")
        return out

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        plot_multiturn(rows, path)
        return True


def _by_turn(rows: list[dict[str, Any]], field: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for (mode, turn), v in group_median(rows, ("mode", "turn"), field).items():
        out.setdefault(mode, {})[int(turn)] = v
    return {m: dict(sorted(v.items())) for m, v in out.items()}


def multiturn_findings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per turn: median TTFT of both modes, the saving (ms, %), tokens recomputed by each mode."""
    good = ok_rows(rows)
    ttft = _by_turn(good, "ttft_ms")
    tokens = _by_turn(good, "recomputed_tokens")
    per_turn: dict[str, dict[str, float]] = {}
    rec, reu = ttft.get("recompute", {}), ttft.get("reuse", {})
    for k in sorted(set(rec) & set(reu)):
        saving = rec[k] - reu[k]
        per_turn[str(k)] = {
            "ttft_recompute_ms": rec[k],
            "ttft_reuse_ms": reu[k],
            "saving_ms": saving,
            "saving_pct": 100.0 * saving / rec[k] if rec[k] else float("nan"),
            "tokens_recomputed_full": tokens.get("recompute", {}).get(k, float("nan")),
            "tokens_recomputed_reuse": tokens.get("reuse", {}).get(k, float("nan")),
            "speedup": rec[k] / reu[k] if reu[k] else float("nan"),
        }
    parts = [f"turn {k}: reuse {v['ttft_reuse_ms']:.1f} ms vs recompute {v['ttft_recompute_ms']:.1f} ms "
             f"(saves {v['saving_ms']:.1f} ms, {v['saving_pct']:.0f} %; {v['tokens_recomputed_reuse']:.0f} tokens "
             f"computed instead of {v['tokens_recomputed_full']:.0f})" for k, v in per_turn.items()]
    savings = [v["saving_pct"] for v in per_turn.values()]
    return {
        "per_turn": per_turn,
        "mean_saving_pct": sum(savings) / len(savings) if savings else float("nan"),
        "finding": "; ".join(parts) if parts else "no turn measured in both modes",
    }


def plot_multiturn(rows: list[dict[str, Any]], path: Any) -> None:
    """TTFT per turn (both modes) and tokens computed per turn."""
    from pathlib import Path

    good = ok_rows(rows)
    fig, (ax1, ax2) = new_figure(2)
    for mode, by_turn in _by_turn(good, "ttft_ms").items():
        ax1.plot(list(by_turn), list(by_turn.values()), marker="o", label=mode)
    ax1.set_xticks(sorted({t for by_turn in _by_turn(good, "ttft_ms").values() for t in by_turn}))
    ax1.set_xlabel("turn")
    ax1.set_ylabel("TTFT (ms, median)")
    ax1.set_title("TTFT per turn")
    ax1.legend()
    ax1.grid(alpha=0.3)
    tokens = _by_turn(good, "recomputed_tokens")
    width = 0.4
    for i, (mode, by_turn) in enumerate(sorted(tokens.items())):
        ax2.bar([t + (i - 0.5) * width for t in by_turn], list(by_turn.values()), width=width, label=mode)
    ax2.set_xticks(sorted({t for by_turn in tokens.values() for t in by_turn}))
    ax2.set_xlabel("turn")
    ax2.set_ylabel("tokens computed in the prefill")
    ax2.set_title("tokens recomputed per turn")
    ax2.legend()
    save_figure(fig, Path(path))
