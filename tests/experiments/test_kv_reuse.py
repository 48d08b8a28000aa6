"""multiturn-kv-reuse: reusing the prefix cache gives the recompute's next-token logits (fp32), only when
the rope deltas are carried; findings from injected rows; a short real run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.engines.kv_reuse import common_prefix_len, prefill_prefix, set_rope_deltas, verify_reuse
from lmmbench.specs.multiturn_kv_reuse import MultiturnKVReuseOptions, build_turns, multiturn_findings


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3, 4], [1, 2, 9]) == 2
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2
    assert common_prefix_len([], [1]) == 0


@pytest.mark.parametrize("which", ["omni", "vl", "llm"])
def test_reuse_matches_recompute(which: str, request: pytest.FixtureRequest) -> None:
    loaded = request.getfixturevalue(which)
    opts = MultiturnKVReuseOptions(turns=3, video_frames=4, audio_s=1.0, first_turn_words=60)
    turns = build_turns(loaded, opts)
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[0]["shared_tokens"] == 0
    for t in turns[1:]:
        n = int(t["inputs"]["input_ids"].shape[1])
        assert 0 < t["shared_tokens"] < n  # the history is a token prefix; only the new turn is left
        prefix = prefill_prefix(loaded.model, t["inputs"], t["shared_tokens"])
        assert prefix.cache.get_seq_length() == t["shared_tokens"]
        check = verify_reuse(loaded.model, t["inputs"], prefix, loaded.device)
        assert check["max_abs_logit_diff"] < 1e-4
        assert check["same_first_token"] == 1.0


def test_reuse_without_rope_deltas_differs(omni: Any) -> None:
    """With mrope, text after the media sits at index + delta; dropping the delta changes the logits."""
    import torch

    from lmmbench.engines.kv_reuse import PrefixCache

    opts = MultiturnKVReuseOptions(turns=2, video_frames=4, audio_s=1.0)
    turn = build_turns(omni, opts)[1]
    prefix = prefill_prefix(omni.model, turn["inputs"], turn["shared_tokens"])
    assert prefix.rope_deltas is not None and int(prefix.rope_deltas.abs().sum()) > 0
    wrong = PrefixCache(prefix.cache, prefix.length, torch.zeros_like(prefix.rope_deltas))
    check = verify_reuse(omni.model, turn["inputs"], wrong, omni.device)
    assert check["max_abs_logit_diff"] > 1e-3
    set_rope_deltas(omni.model, None)


def test_findings_from_injected_rows() -> None:
    rows: list[dict[str, Any]] = []
    for turn, rec, reu in ((2, 100.0, 10.0), (3, 120.0, 12.0)):
        for rep in range(3):
            rows.append({"status": "ok", "turn": turn, "mode": "recompute", "ttft_ms": rec + rep,
                         "recomputed_tokens": 500 + turn})
            rows.append({"status": "ok", "turn": turn, "mode": "reuse", "ttft_ms": reu, "recomputed_tokens": 20})
    out = multiturn_findings(rows)
    assert out["per_turn"]["2"]["saving_ms"] == pytest.approx(91.0)
    assert out["per_turn"]["3"]["saving_pct"] == pytest.approx(100 * 109 / 121)
    assert out["per_turn"]["3"]["tokens_recomputed_full"] == 503
    assert "turn 2: reuse 10.0 ms vs recompute 101.0 ms" in out["finding"]


def test_short_run_writes_outputs(tmp_path: Path) -> None:
    from lmmbench.sessions.spec_session import run_spec
    from lmmbench.specs.multiturn_kv_reuse import MultiturnKVReuseSpec

    opts = MultiturnKVReuseOptions(out_dir=tmp_path, repeats=1, warmup=0, turns=3, video_frames=4,
                                   progress=False)
    spec_dir = run_spec(MultiturnKVReuseSpec.name, opts).spec_dir
    analysis = json.loads((spec_dir / "multiturn-kv-reuse_analysis.json").read_text())
    assert analysis["rows_ok"] == 5  # turn 1 recompute, turns 2-3 both modes
    assert analysis["verification"]["reuse_matches_recompute"] is True
    assert set(analysis["per_turn"]) == {"2", "3"}
    for suffix in ("results.csv", "summary.csv", "plot.png"):
        assert (spec_dir / f"multiturn-kv-reuse_{suffix}").is_file()
