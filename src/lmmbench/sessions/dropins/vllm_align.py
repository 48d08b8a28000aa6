"""vLLM's re-alignment of ``random`` / ``prefix_repetition`` prompts to the server's tokenizer (vLLM 0.33.0's
``_align_prompts_to_server_tokenizer``): the first prompt goes to the server's ``/tokenize``; when the server
counts other than the local tokenizer, every prompt the server counts longer than drawn is cut to the drawn
length through ``/tokenize`` and ``/detokenize``. A server without those routes leaves the prompts as drawn.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from lmmbench.datasets.vllm.samplers import VllmSample

__all__ = ["align_to_server_tokenizer"]


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def align_to_server_tokenizer(samples: list[VllmSample], url: str, model: str,
                              headers: dict[str, str] | None = None) -> list[VllmSample]:  # fmt: skip
    """The samples, cut where the server's tokenizer counts a prompt longer than drawn (as vLLM does)."""
    if not samples or not isinstance(samples[0].prompt, str):
        return samples
    base, hdrs = url.rstrip("/").removesuffix("/v1"), dict(headers or {})

    def tokenize(prompt: str) -> list[int]:
        out: list[int] = _post(f"{base}/tokenize", {"model": model, "prompt": prompt, "add_special_tokens": False},
                               hdrs)["tokens"]  # fmt: skip
        return out

    try:
        first = tokenize(samples[0].prompt)
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"[bench serve] /tokenize unavailable ({exc}): prompts are sent as drawn", file=sys.stderr)
        return samples
    if len(first) == samples[0].prompt_len:
        return samples
    print(f"[bench serve] tokenizer mismatch (server={len(first)}, expected={samples[0].prompt_len}): "
          "re-aligning prompts, as vLLM does", file=sys.stderr)  # fmt: skip

    def fix(s: VllmSample) -> VllmSample:
        try:
            tokens = tokenize(s.prompt)
            if len(tokens) <= s.prompt_len:
                return s
            text = _post(f"{base}/detokenize", {"model": model, "tokens": tokens[: s.prompt_len]}, hdrs)["prompt"]
            return replace(s, prompt=str(text))
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            return s  # as vLLM: a request that fails to re-align keeps its prompt

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(fix, samples))
