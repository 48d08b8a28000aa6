"""A run's TTFT breakdown laid beside the published numbers of the TTFT study, in the study's terms.

The TTFT study (a Qwen2.5-Omni-7B TTFT benchmark on a 32 GB GPU) states its findings in its own stages
(``core.ttft_names.STUDY_STAGES``): Others 53 % of TTFT, visual encoder 17 %, audio encoder 13 %,
LLM prefill 17 % — four shares that add to 100 %. The study's "LLM prefill" is its ``prefill_ms``: the thinker
forward minus the encoders, i.e. embedding merge + LLM forward, so it is compared with the run's ``prefill_ms``
(lmmbench's ``llm_prefill_ms``, the LLM forward alone, is a finer part shown beside it, not compared); the
visual encoder linear in its tokens (R² 0.986, 0.088 ms per token); the audio encoder constant at about 22 ms
whatever the token count; prefill against tokens R² ≈ 0.50 ("not purely linear, which is normal").
``study_comparison`` computes the same quantities from a run's ok rows and says in words where they agree and
where not; ``comparison_html`` renders it for report.html.
The model, its size and the hardware differ from the study's, so absolute milliseconds are not expected
to match; shares and shapes (linear / constant, R²) are what the comparison is about.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from lmmbench.metrics.fits import linear_fit
from lmmbench.reports.summary import per_sample_medians

__all__ = ["STUDY_PUBLISHED", "comparison_html", "study_comparison"]

SOURCE = "the TTFT study (Qwen2.5-Omni-7B, 32 GB GPU; its known findings)"

#: the study's published numbers
STUDY_PUBLISHED: dict[str, Any] = {
    "visual_share_pct": 17.0,
    "audio_share_pct": 13.0,
    "prefill_share_pct": 17.0,  # the study's "LLM prefill": its prefill_ms = embedding merge + LLM forward
    "others_share_pct": 53.0,
    "remainder_share_pct": 0.0,  # its four stages add to 100 % of TTFT (others is defined as the rest)
    "visual_ms_per_token_slope": 0.088,  # not "..._token": keys ending so are masked as secrets in files
    "visual_r2": 0.986,
    "audio_encoder_ms": 22.0,
    "audio_shape": "constant",
    "prefill_r2": 0.50,
}

#: the study's four stages, as share keys (they add to 100 % of TTFT with the remainder)
_FOUR = ("visual_share_pct", "audio_share_pct", "prefill_share_pct", "others_share_pct")
_SHARE_CLOSE_PTS = 5.0  # a share within 5 percentage points of the study's "agrees"
_LINEAR_R2 = 0.95  # a fit this good is "linear"
_CONSTANT_RISE = 0.10  # an encoder whose fitted rise over the measured range is < 10 % of its median is "constant"


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _shares(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each stage's share of TTFT (sums of per-sample means over the sum of per-sample mean TTFTs), and
    ``remainder_share_pct``: what the study's four stages leave of TTFT (100 minus their sum), so that the four
    and the remainder add to 100 % (None when a stage is unmeasured)."""
    fields = ("visual_encoder_ms", "audio_encoder_ms", "prefill_ms", "llm_prefill_ms", "others_ms",
              "others_unattributed_ms", "ttft_ms")
    mean = per_sample_medians([dict(r) for r in rows], fields, stat="mean")
    total = sum(m["ttft_ms"] for m in mean.values() if math.isfinite(m["ttft_ms"]))
    out: dict[str, float | None] = {}
    for f in fields[:-1]:
        vals = [m[f] for m in mean.values() if math.isfinite(m[f]) and math.isfinite(m["ttft_ms"])]
        key = f.removesuffix("_ms").replace("_encoder", "") + "_share_pct"
        out[key] = 100.0 * sum(vals) / total if vals and total > 0 else None
    four = [out[k] for k in _FOUR]
    out["remainder_share_pct"] = None if any(v is None for v in four) else 100.0 - sum(v or 0.0 for v in four)
    return out


def _fit(points: Mapping[str, Mapping[str, Any]], y: str, x: str) -> dict[str, Any]:
    pts = [(m[x], m[y]) for m in points.values() if math.isfinite(m[x]) and m[x] > 0 and math.isfinite(m[y])]
    fit = linear_fit([p[0] for p in pts], [p[1] for p in pts])
    return {"slope": _num(fit.slope), "intercept_ms": _num(fit.intercept), "r2": _num(fit.r2), "n_samples": fit.n,
            "x_min": _num(fit.x_min), "x_max": _num(fit.x_max)}


def _audio_shape(points: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """audio_encoder_ms against the clip's duration (samples with audio tokens): constant (the study) or linear."""
    points = {k: m for k, m in points.items() if math.isfinite(m["audio_tokens"]) and m["audio_tokens"] > 0}
    fit = _fit(points, "audio_encoder_ms", "duration")
    ys = sorted(m["audio_encoder_ms"] for m in points.values()
                if math.isfinite(m["duration"]) and m["duration"] > 0 and math.isfinite(m["audio_encoder_ms"]))
    med = ys[len(ys) // 2] if ys else None
    shape = None
    if fit["slope"] is not None and fit["x_min"] is not None and med:
        rise = fit["slope"] * (fit["x_max"] - fit["x_min"])
        if abs(rise) < _CONSTANT_RISE * med:
            shape = "constant"
        elif rise > 0:
            shape = "linear" if (fit["r2"] or 0.0) >= _LINEAR_R2 else "rising, not linear"
        else:
            shape = "falling"
    return {**fit, "median_ms": med, "shape": shape, "basis": "per sample, against its duration (s)"}


def _share_line(name: str, run: float | None, study: float) -> str:
    if run is None:
        return f"{name}: not measured in this run"
    verb = "agrees with" if abs(run - study) <= _SHARE_CLOSE_PTS else ("is above" if run > study else "is below")
    return f"{name} {run:.1f} % of TTFT {verb} the study's {study:.0f} %"


def _verdicts(c: dict[str, Any]) -> list[str]:
    s, pub = c["shares_pct"], STUDY_PUBLISHED
    lines = [_share_line("visual encoder", s["visual_share_pct"], pub["visual_share_pct"]),
             _share_line("audio encoder", s["audio_share_pct"], pub["audio_share_pct"]),
             _share_line("prefill (prefill_ms: merge + LLM forward, the study's \"LLM prefill\")",
                         s["prefill_share_pct"], pub["prefill_share_pct"]),
             _share_line("others", s["others_share_pct"], pub["others_share_pct"])]
    if s.get("remainder_share_pct") is not None:
        four = 100.0 - s["remainder_share_pct"]
        lines.append(f"the four stages add to {four:.1f} % of TTFT, {s['remainder_share_pct']:.1f} % unattributed to "
                     "any of them (100 % in all); the study's four add to 100 %")
    vis = c["visual_fit"]
    if vis["r2"] is not None:
        linear = "linear in its tokens, as in the study" if vis["r2"] >= _LINEAR_R2 else "less linear than the study's"
        lines.append(f"visual encoder: {vis['slope']:.4g} ms per token, R² {vis['r2']:.3f}: {linear} "
                     f"(study 0.088 ms per token, R² 0.986; ms per token depends on model and hardware)")
    aud = c["audio_vs_duration"]
    if aud["shape"] is not None:
        agree = "agrees with" if aud["shape"] == "constant" else "disagrees with"
        lines.append(f"audio encoder: {aud['shape']} in the clip's duration (R² {aud['r2'] or float('nan'):.3f}, "
                     f"{(aud['slope'] or 0.0):.3g} ms per s, median {aud['median_ms']:.3g} ms): {agree} the study's "
                     "constant ≈ 22 ms")
    pre = c["prefill_fit"]
    if pre["r2"] is not None:
        how = "about as loose as" if abs(pre["r2"] - 0.5) <= 0.15 else (
            "tighter than" if pre["r2"] > 0.5 else "looser than")
        lines.append(f"prefill against total tokens: R² {pre['r2']:.3f}, {how} the study's 0.50")
    return lines


def study_comparison(rows: Sequence[Mapping[str, Any]], fit_stat: str = "median") -> dict[str, Any] | None:
    """The run's shares, visual fit, audio shape and prefill R² beside the study's (ok rows only; fits on each
    sample's ``fit_stat`` over its repeats, as the spec's own fits); None when the rows carry no study stages."""
    ok = [r for r in rows if r.get("status", "ok") == "ok"]
    if not any(r.get("prefill_ms") not in (None, "") and r.get("ttft_ms") not in (None, "") for r in ok):
        return None
    fields = ("visual_encoder_ms", "visual_tokens", "audio_encoder_ms", "audio_tokens", "duration", "prefill_ms",
              "total_tokens")
    points = per_sample_medians([dict(r) for r in ok], fields, stat=fit_stat)
    out: dict[str, Any] = {
        "source": SOURCE,
        "study": STUDY_PUBLISHED,
        "shares_pct": _shares(ok),
        "visual_fit": _fit(points, "visual_encoder_ms", "visual_tokens"),
        "audio_vs_duration": _audio_shape(points),
        "prefill_fit": _fit(points, "prefill_ms", "total_tokens"),
        "basis": f"shares from per-sample means; fits on per-sample {fit_stat}s over ok repeats",
        "caveat": "another model, size and machine than the study's: shares and shapes compare, milliseconds do not",
    }
    out["verdicts"] = _verdicts(out)
    return out


def _fmt(x: Any, unit: str = "") -> str:
    if x is None:
        return "—"
    return f"{x:.3g}{unit}" if isinstance(x, float) else f"{x}{unit}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{round(x, 1) + 0.0:.1f} %"  # + 0.0: a rounded -0.0 shows as 0.0


def _total(shares: Mapping[str, Any]) -> float | None:
    parts = [shares.get(k) for k in (*_FOUR, "remainder_share_pct")]
    return None if any(p is None for p in parts) else float(sum(float(p or 0.0) for p in parts))


def comparison_html(c: Mapping[str, Any] | None) -> str:
    """The comparison as a table and its verdicts in words (empty when there is none)."""
    if not c:
        return ""
    s, pub, vis, aud, pre = c["shares_pct"], c["study"], c["visual_fit"], c["audio_vs_duration"], c["prefill_fit"]
    rows = [
        ("visual encoder, % of TTFT", _fmt(s.get("visual_share_pct"), " %"), _fmt(pub.get("visual_share_pct"), " %")),
        ("audio encoder, % of TTFT", _fmt(s.get("audio_share_pct"), " %"), _fmt(pub.get("audio_share_pct"), " %")),
        ("prefill (prefill_ms: merge + rope index + LLM forward), % of TTFT", _fmt(s.get("prefill_share_pct"), " %"),
         f"{_fmt(pub.get('prefill_share_pct'), ' %')} (its \"LLM prefill\": merge + LLM forward)"),
        ("others, % of TTFT", _fmt(s.get("others_share_pct"), " %"), _fmt(pub.get("others_share_pct"), " %")),
        ("unattributed to the four stages (TTFT − their sum), % of TTFT", _pct(s.get("remainder_share_pct")),
         _pct(pub.get("remainder_share_pct"))),
        ("the four stages and the remainder, % of TTFT", _pct(_total(s)), _pct(_total(pub))),
        ("  prefill's LLM forward alone (llm_prefill_ms), % of TTFT", _fmt(s.get("llm_prefill_share_pct"), " %"),
         "— (not published)"),
        ("  others' unattributed part (others_unattributed_ms), % of TTFT",
         _fmt(s.get("others_unattributed_share_pct"), " %"), "— (not split)"),
        ("visual encoder, ms per visual token", _fmt(vis["slope"]), _fmt(pub.get("visual_ms_per_token_slope"))),
        ("visual encoder ~ tokens, R²", _fmt(vis["r2"]), _fmt(pub.get("visual_r2"))),
        ("audio encoder against duration", _fmt(aud["shape"]), f"constant, ≈ {_fmt(pub.get('audio_encoder_ms'))} ms"),
        ("audio encoder, median ms / ms per s / R²",
         f"{_fmt(aud['median_ms'])} / {_fmt(aud['slope'])} / {_fmt(aud['r2'])}", "≈ 22 / 0 / —"),
        ("prefill ~ total tokens, R²", _fmt(pre["r2"]), f"≈ {_fmt(pub.get('prefill_r2'))}"),
    ]
    e = html.escape
    body = "".join(f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(d)}</td></tr>" for a, b, d in rows)
    words = "".join(f"<li>{e(v)}</li>" for v in c.get("verdicts", []))
    return (f"<h2>Beside the TTFT study</h2><p class='meta'>{e(str(c.get('source', '')))}; "
            f"{e(str(c.get('caveat', '')))}. {e(str(c.get('basis', '')))}.</p>"
            f"<table class='study'><tr><th>quantity</th><th>this run</th><th>the TTFT study</th></tr>{body}</table>"
            f"<ul>{words}</ul>\n")
