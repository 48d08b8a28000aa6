"""Scoring and generation against an OpenAI-compatible endpoint.

Log-likelihoods use ``/v1/completions`` with the prompt as token ids, ``echo: true``,
``logprobs: 1`` and ``max_tokens: 1`` (lm-evaluation-harness's ``local-completions`` request): the
continuation's log-prob is the sum of the echoed ``token_logprobs`` over its tokens, greedy when each
equals the best of ``top_logprobs``. A server that does not echo prompt log-probs gets one clear error.
Generation uses ``/v1/chat/completions`` (chat tasks, images as data URLs) or ``/v1/completions``.
Tokenisation follows the same rules as the in-process scorer, with a local tokenizer.
A generation answer that carries server-side ``metrics`` (lmmbench's server, ``lmmbench proxy``) has them kept
in ``server_metrics``, one entry per request of the last ``generate`` call (None where an answer had none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from lmmbench.backends.scoring import (
    GenRequest,
    LLRequest,
    Progress,
    disjoint_rolling_windows,
    lmeval_encode_pair,
)
from lmmbench.backends.stop_strings import cut_at_stop
from lmmbench.core.errors import UserError

__all__ = ["OpenAIScorer", "lmeval_encode_pair"]


class HTTPStatusError(RuntimeError):
    """A non-200 answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class OpenAIScorer:
    """A model behind an OpenAI-compatible HTTP endpoint."""

    supports_media = True

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        max_length: int | None = None,
        concurrency: int = 8,
        timeout_s: float = 300.0,
        api_key: str | None = None,
        truncate: bool = True,
    ) -> None:
        from lmmbench.backends.truncation import Truncation

        self.truncation = Truncation(enabled=truncate)  # log-likelihood inputs only: the server cuts its prompts
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model = model
        self.model_id = f"{model}@{self.base_url}"
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        tok = tokenizer
        self.prefix_token_id = int(tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)
        self.server_metrics: list[dict[str, Any] | None] = []  # per request of the last generate call
        self._prefix_str = tok.decode(self.prefix_token_id)

    # ------------------------------------------------------------------ HTTP
    async def _post(self, session: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        async with session.post(url, json=body, headers=self.headers) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise HTTPStatusError(resp.status, f"{url} answered HTTP {resp.status}: {text[:200]}")
        import json

        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise RuntimeError(f"{url} did not answer JSON: {text[:200]}") from None
        if not isinstance(data, dict):
            raise RuntimeError(f"{url} answered {type(data).__name__}, not an object")
        return data

    def _run_all(self, jobs: Sequence[Callable[[Any], Awaitable[Any]]], progress: Progress | None) -> list[Any]:
        import aiohttp

        async def main() -> list[Any]:
            sem = asyncio.Semaphore(self.concurrency)
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with aiohttp.ClientSession(timeout=timeout) as session:

                async def one(job: Callable[[Any], Awaitable[Any]]) -> Any:
                    async with sem:
                        try:
                            return await job(session)
                        finally:
                            if progress is not None:
                                progress(1)

                return await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)

        try:
            results = asyncio.run(main())
        except aiohttp.ClientConnectorError as exc:
            raise UserError(f"cannot reach {self.base_url}: {exc}; is the server running?") from None
        for r in results:
            if isinstance(r, UserError):
                raise r
            if isinstance(r, aiohttp.ClientConnectorError):
                raise UserError(f"cannot reach {self.base_url}: {r}; is the server running?")
        return results

    def chat_prompt(self, messages: list[dict[str, str]], n_images: int = 0, n_audio: int = 0) -> str:
        """The chat-templated context, rendered with the local tokenizer (for log-likelihood requests)."""
        from lmmbench.backends.scoring_media import chat_text

        return chat_text(self.tokenizer, None, messages)

    # ------------------------------------------------------------------ log-likelihood
    def _echo_logprobs(self, data: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        try:
            lp = data["choices"][0]["logprobs"]
            tokens = lp["token_logprobs"]
            tops = lp.get("top_logprobs") or [None] * len(tokens)
        except (KeyError, IndexError, TypeError):
            raise UserError(self._no_logprobs_message()) from None
        return list(tokens), list(tops)

    def _no_logprobs_message(self) -> str:
        return (
            f"{self.base_url}/completions does not return prompt log-probs (echo + logprobs); "
            "log-likelihood tasks need a server that supports them (e.g. vLLM); "
            "run generate tasks against this server instead"
        )

    async def _score_tokens(self, session: Any, ctx: list[int], cont: list[int]) -> tuple[float, bool]:
        toks = (ctx + cont)[-(self.max_length + 1) :] if self.max_length else ctx + cont
        ctxlen = len(toks) - len(cont)
        body = {"model": self.model, "prompt": toks, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
        try:
            data = await self._post(session, "/completions", body)
        except HTTPStatusError as exc:
            if exc.status in (400, 422, 501) and ("logprobs" in str(exc) or "echo" in str(exc)):
                raise UserError(f"{self._no_logprobs_message()} (the server said: {exc})") from None
            raise
        lps, tops = self._echo_logprobs(data)
        if len(lps) < len(toks):
            raise UserError(f"{self.base_url}/completions echoed {len(lps)} prompt log-probs for {len(toks)} tokens")
        window = lps[ctxlen : ctxlen + len(cont)]
        if any(x is None for x in window):
            raise UserError(f"{self.base_url}/completions returned null log-probs inside the prompt")
        greedy = True
        for value, top in zip(window, tops[ctxlen : ctxlen + len(cont)], strict=True):
            if isinstance(top, dict) and top and value < max(top.values()):
                greedy = False
        return float(sum(window)), greedy

    def loglikelihood(
        self, requests: Sequence[LLRequest], progress: Progress | None = None
    ) -> list[tuple[float, bool]]:
        """Log-likelihood per request through echo + logprobs."""
        for r in requests:
            if r.images or r.audio:
                raise UserError("log-likelihood with images or audio is not available over HTTP; use --model <dir>")
        pairs = [
            lmeval_encode_pair(self.tokenizer, self.prefix_token_id, r.context, r.continuation, self._prefix_str)
            for r in requests
        ]
        self.truncation.last = [] if self.max_length is None else [  # no window known: nothing cut here
            self.truncation.loglikelihood_input(c, x, self.max_length) for c, x in pairs]
        jobs = [(lambda s, c=c, x=x: self._score_tokens(s, c, x)) for c, x in pairs]
        return self._run_all(jobs, progress)  # a failed request stays an exception: its sample fails alone

    def loglikelihood_rolling(self, texts: Sequence[str], progress: Progress | None = None) -> list[Any]:
        """Sum of disjoint-window log-likelihoods per text."""
        if self.max_length is None:
            raise UserError(
                f"{self.base_url}: rolling perplexity needs the context length and the server does not report "
                f"max_model_len in /v1/models; pass --max-length N (the model's context length)"
            )
        jobs = []
        owner = []
        for i, text in enumerate(texts):
            for ctx, cont in disjoint_rolling_windows(
                list(self.tokenizer.encode(text)), self.prefix_token_id, self.max_length
            ):
                jobs.append(lambda s, c=ctx, x=cont: self._score_tokens(s, c, x))
                owner.append(i)
        results = self._run_all(jobs, None)
        totals: list[Any] = [0.0] * len(texts)
        for i, r in zip(owner, results, strict=True):
            if isinstance(r, BaseException) or isinstance(totals[i], BaseException):
                totals[i] = totals[i] if isinstance(totals[i], BaseException) else r
            else:
                totals[i] += r[0]
        if progress is not None:
            progress(len(texts))
        return totals

    # ------------------------------------------------------------------ generation
    async def _generate(self, session: Any, r: GenRequest, sink: list[Any], i: int) -> str:
        if r.chat or r.images or r.audio:
            from lmmbench.backends.scoring_media import to_messages

            messages = to_messages(r)
            body: dict[str, Any] = {
                "model": self.model,
                "messages": messages,
                "max_tokens": r.max_tokens,
                **_sampling(r),
            }
            if r.stop:
                body["stop"] = r.stop[:4]
            answer = await self._post(session, "/chat/completions", body)
            text = answer["choices"][0]["message"].get("content") or ""
        else:
            body = {"model": self.model, "prompt": r.prompt, "max_tokens": r.max_tokens, **_sampling(r)}
            if r.stop:
                body["stop"] = r.stop[:4]
            answer = await self._post(session, "/completions", body)
            text = answer["choices"][0].get("text") or ""
        if isinstance(answer.get("metrics"), dict):
            sink[i] = answer["metrics"]
        return cut_at_stop(str(text), r.stop)

    def generate(self, requests: Sequence[GenRequest], progress: Progress | None = None) -> list[Any]:
        """Greedy generation per request; a failed request raises its error for the runner to record."""
        self.truncation.last = []  # not known: the server applies its own rule to a long prompt
        sink: list[dict[str, Any] | None] = [None] * len(requests)
        self.server_metrics = sink
        jobs = [(lambda s, r=r, i=i: self._generate(s, r, sink, i)) for i, r in enumerate(requests)]
        return self._run_all(jobs, progress)


def _sampling(r: GenRequest) -> dict[str, Any]:
    """The request's sampling settings in OpenAI terms (greedy: temperature 0 alone)."""
    body: dict[str, Any] = {"temperature": r.temperature}
    if r.temperature > 0 and r.top_p < 1.0:
        body["top_p"] = r.top_p
    if r.temperature > 0 and r.top_k > 0:
        body["top_k"] = r.top_k
    if r.temperature > 0 and r.seed is not None:
        body["seed"] = r.seed
    return body
