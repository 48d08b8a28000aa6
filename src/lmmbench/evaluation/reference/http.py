"""ByteMLPerf's accuracy check against an OpenAI-compatible endpoint, where only log-probabilities exist.

A server returns no logits: the top-k log-probabilities of each generated token are all there is (vLLM and
SGLang give up to 20). So over HTTP the check is ``logprob_diff``, never called a logits diff: each reference
prompt is sent as token ids to ``/v1/completions`` (temperature 0, ``logprobs: k``, ``ignore_eos``, tokens as
ids where the server can, vLLM's ``return_tokens_as_token_ids``), and every log-probability the server returns
for a token the reference's top-k also holds is compared with the reference's at the same position: the first
token over every prompt, then each step while the generated tokens agree (the step where they first differ is
still compared, its prefix being the same; it is reported as the first divergence).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["LogprobComparison", "compare_http", "completion_logprobs", "echo_logprobs"]

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def _completions_url(url: str) -> str:
    base = url.rstrip("/")
    return (base if base.endswith("/v1") else base + "/v1") + "/completions"


Completion = tuple[list[str], list[dict[str, float]], list[float | None]]


def completion_logprobs(url: str, model: str, ids: list[int], steps: int, k: int, api_key: str | None = None,
                        timeout_s: float = 120.0) -> Completion:  # fmt: skip
    """(tokens, top log-probs per step, each generated token's log-prob) of a greedy ``/v1/completions`` of
    ``steps`` tokens after ``ids``."""
    body = {"model": model, "prompt": ids, "max_tokens": steps, "temperature": 0, "logprobs": k, "stream": False,
            "ignore_eos": True, "return_tokens_as_token_ids": True}  # fmt: skip
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    req = urllib.request.Request(_completions_url(url), json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        raise UserError(f"{url}: /v1/completions with logprobs answered HTTP {exc.code} ({detail})") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{url}: /v1/completions with logprobs failed ({exc})") from None
    try:
        lp = answer["choices"][0]["logprobs"]
        tokens, tops = [str(t) for t in lp["tokens"]], [dict(t or {}) for t in lp["top_logprobs"]]
        chosen = [None if x is None else float(x) for x in lp.get("token_logprobs") or [None] * len(tokens)]
    except (KeyError, IndexError, TypeError):
        raise UserError(f"{url}: the server returned no log-probabilities (choices[0].logprobs); logprob_diff "
                        "needs a server that returns them (vLLM, SGLang)") from None  # fmt: skip
    return tokens, tops, chosen


def _post(url: str, body: dict[str, Any], api_key: str | None, timeout_s: float) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    req = urllib.request.Request(_completions_url(url), json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


def echo_logprobs(url: str, model: str, ids: list[int], api_key: str | None = None,
                  timeout_s: float = 120.0) -> list[float] | None:  # fmt: skip
    """The log-probability of each of ``ids[1:]`` as the server scores its prompt (``echo`` + ``logprobs``, as
    lm-eval's log-likelihood asks vLLM); None when the server does not return them."""
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    try:
        lps = _post(url, body, api_key, timeout_s)["choices"][0]["logprobs"]["token_logprobs"]
        values = [float(x) for x in lps[1 : len(ids)]]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return values if len(values) == len(ids) - 1 else None


def _token_id(key: str, texts: dict[str, int]) -> int | None:
    """A returned token as an id: ``token_id:N``, else the reference's token whose text it is."""
    m = _TOKEN_ID.match(key)
    return int(m.group(1)) if m else texts.get(key)


@dataclass
class LogprobComparison:
    """Differences (here - reference) of the log-probabilities both sides give, first token and per step."""

    first_pairs: list[list[tuple[float, float]]] = field(default_factory=list)  # per prompt: (here, reference)
    steps: list[list[float]] = field(default_factory=list)  # per token-diff prompt, every compared value
    divergences: list[dict[str, Any]] = field(default_factory=list)
    ppls: list[float | None] | None = None  # ByteMLPerf's PPL per prompt; None: the server scores no prompt


def _step_pairs(server_top: dict[str, float], ref_top: list[list[Any]]) -> list[tuple[float, float]]:
    ref = {int(e[0]): float(e[1]) for e in ref_top}
    texts = {str(e[2]): int(e[0]) for e in ref_top if len(e) > 2}
    out = []
    for key, lp in server_top.items():
        tid = _token_id(key, texts)
        if tid is not None and tid in ref:
            out.append((float(lp), ref[tid]))
    return out


def _ppl(prompt_lps: list[float] | None, chosen: list[float | None]) -> float | None:
    from lmmbench.evaluation.reference.bytemlperf_metrics import prompt_ppl

    if prompt_lps is None or any(x is None for x in chosen):
        return None
    return prompt_ppl(prompt_lps, [float(x) for x in chosen if x is not None])


def compare_http(url: str, model: str, prompts: list[dict[str, Any]], token_prompts: int, k: int,
                 api_key: str | None = None) -> LogprobComparison:  # fmt: skip
    """Send every reference prompt for the reference's generation length (greedy) and diff the returned top-k
    log-probabilities against the reference's; ByteMLPerf's PPL from the server's prompt scoring (echo) and its
    generated tokens' log-probabilities. A server without log-probabilities fails at the first prompt."""
    cmp = LogprobComparison()
    echoes: list[list[float] | None] = []
    for i, rec in enumerate(prompts):
        ref_ids = [int(t) for t in rec["generated_ids"]]
        steps = max(len(ref_ids), 1)
        tokens, tops, chosen = completion_logprobs(url, model, rec["prompt_ids"], steps, k, api_key)
        echoes.append(echo_logprobs(url, model, rec["prompt_ids"], api_key) if i == 0 or echoes[0] is not None
                      else None)  # fmt: skip
        cmp.first_pairs.append(_step_pairs(tops[0], rec["top_logprobs"][0]) if tops else [])
        diffs: list[float] = []
        for s, top in enumerate(tops[:steps]):
            ref_top = rec["top_logprobs"][s] if s < len(rec["top_logprobs"]) else []
            diffs += [h - r for h, r in _step_pairs(top, ref_top)]
            texts = {str(e[2]): int(e[0]) for e in ref_top if len(e) > 2}
            here = _token_id(tokens[s], texts) if s < len(tokens) else None
            if i < token_prompts and s < len(ref_ids) and here != ref_ids[s]:
                cmp.divergences.append({"prompt": i, "step": s, "generated": here if here is not None else tokens[s],
                                        "reference": ref_ids[s]})  # fmt: skip
                break
        if i < token_prompts:
            cmp.steps.append(diffs)
        cmp.ppls = cmp.ppls or []
        cmp.ppls.append(_ppl(echoes[-1], chosen))
    if not echoes or echoes[0] is None:
        cmp.ppls = None
    return cmp
