"""In-process scoring for accuracy evaluation: log-likelihoods, rolling log-likelihoods, greedy generation.

The numerics are lm-evaluation-harness 0.4.13's ``HFLM`` (see docs/eval.md): trailing whitespace of a
context moves to the continuation; continuation tokens are ``tokens(ctx + cont)`` minus the count of
``tokens(ctx)``; the model sees ``(ctx + cont)[-(max_length + 1):][:-1]`` with no attention mask;
``log_softmax`` over the vocabulary in the model's dtype, gathered at the continuation and summed.
By default each distinct context runs once and its continuations run on its KV cache
(``backends.context_sharing``; float32 rounding apart, the same numbers). With ``share_context=False``
batches hold only inputs of equal length (no padding), which on CPU gives bit-identical log-probs to
one forward per input (measured: max difference 0.0), so the numbers are those of lm-eval at batch size
1. ``pad_batches=True`` right-pads mixed lengths like lm-eval at batch size > 1 (faster, differences up
to ~4e-6 measured). Requests with identical inputs share one forward (lm-eval does the same for
one-token continuations), which changes nothing numerically.

Images and audio (VL and omni models) are fed through the model's processor, one sample per forward.
Generation runs through the continuous-batching engine of ``lmmbench.engines`` (docs/serve.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lmmbench.backends.stop_strings import cut_at_stop

__all__ = [
    "GenRequest",
    "InProcessScorer",
    "LLRequest",
    "ScoringBackend",
    "disjoint_rolling_windows",
    "lmeval_encode",
    "lmeval_encode_pair",
    "resolve_max_length",
]

log = logging.getLogger(__name__)
_TOKENIZER_INFINITY = 1000000000000000019884624838656
Progress = Callable[[int], None]


@dataclass
class LLRequest:
    """Log-likelihood of ``continuation`` given ``context`` (media paths are optional)."""

    context: str
    continuation: str
    images: list[str] = field(default_factory=list)
    audio: list[str] = field(default_factory=list)


@dataclass
class GenRequest:
    """Greedy generation from ``prompt`` until a stop string or ``max_tokens``."""

    prompt: str
    max_tokens: int = 32
    stop: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    audio: list[str] = field(default_factory=list)
    chat: bool = False
    messages: list[dict[str, str]] | None = None  # chat messages (system / user / assistant), text only
    # the last user turn's parts in order, interleaved: str = a text part, int = index into images + audio
    # (default: the media, then the text)
    layout: list[str | int] | None = None
    temperature: float = 0.0  # 0 is greedy; lm-eval's do_sample=True with a temperature samples
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None  # sampling seed of this request (None: unseeded)


class ScoringBackend(Protocol):
    """What the evaluation runner needs from a model.

    A backend may put an exception in place of one failed request's result (an endpoint error, an
    unreadable image); the runner records it on that sample and goes on. ``UserError`` aborts.
    """

    model_id: str
    supports_media: bool

    def loglikelihood(
        self, requests: Sequence[LLRequest], progress: Progress | None = None
    ) -> list[tuple[float, bool]]:
        """(sum log-prob of the continuation, whether greedy decoding produces it) per request."""
        ...

    def loglikelihood_rolling(self, texts: Sequence[str], progress: Progress | None = None) -> list[float]:
        """Total log-likelihood of each text over disjoint windows."""
        ...

    def generate(self, requests: Sequence[GenRequest], progress: Progress | None = None) -> list[str]:
        """Greedy continuation of each prompt, cut at the first stop string."""
        ...

    def chat_prompt(self, messages: list[dict[str, str]], n_images: int = 0, n_audio: int = 0) -> str:
        """Chat messages rendered with the model's chat template (generation prompt added)."""
        ...


def resolve_max_length(config: Any, tokenizer: Any, default: int = 2048) -> int:
    """The model's context length: text_config, then config, then tokenizer, then ``default``."""
    cfg = getattr(config, "text_config", None) or config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(cfg, attr, None)
        if value is not None:
            return int(value)
    mml = getattr(tokenizer, "model_max_length", None)
    if mml is not None and mml != _TOKENIZER_INFINITY:
        return int(mml)
    return default


def disjoint_rolling_windows(tokens: list[int], prefix_token: int, max_len: int) -> list[tuple[list[int], list[int]]]:
    """lm-eval's rolling windows (context_len 1), made disjoint: (context tokens, predicted tokens)."""
    out: list[tuple[list[int], list[int]]] = []
    if not tokens:
        return out
    pred_len = max_len
    first = min(max_len, len(tokens))
    windows = [([prefix_token, *tokens[: first - 1]], tokens[:first])]
    predicted = first
    while predicted < len(tokens):
        wlen = min(len(tokens) - predicted, pred_len)
        end = predicted + wlen
        windows.append((tokens[end - max_len - 1 : end - 1], tokens[end - wlen : end]))
        predicted += wlen
    for a, b in windows:
        out.append((a[: len(a) - (len(b) - 1)], b))
    return out


def lmeval_encode(tokenizer: Any, prefix_str: str, text: str, add_special_tokens: bool | None = None) -> list[int]:
    """Encode like lm-eval's ``HFLM.tok_encode``: no BOS doubling when ``text`` starts with ``prefix_str``."""
    kwargs: dict[str, Any] = {}
    if add_special_tokens is not None:
        kwargs["add_special_tokens"] = add_special_tokens
    elif prefix_str and text.startswith(prefix_str):
        kwargs["add_special_tokens"] = False
    return list(tokenizer.encode(text, **kwargs))


def lmeval_encode_pair(
    tokenizer: Any, prefix_id: int, context: str, continuation: str, prefix_str: str | None = None
) -> tuple[list[int], list[int]]:
    """lm-eval's context / continuation tokens: trailing context whitespace moves to the continuation,
    continuation = tokens(context + continuation) minus the count of tokens(context); an empty context
    is the prefix token. ``prefix_str`` is ``tokenizer.decode(prefix_id)`` (decoded here if not given)."""
    if prefix_str is None:
        prefix_str = tokenizer.decode(prefix_id)
    if context == "":
        cont = lmeval_encode(tokenizer, prefix_str, continuation, add_special_tokens=False)
        if cont and cont[0] == prefix_id:
            return cont[:1], cont[1:]
        return [prefix_id], cont
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = lmeval_encode(tokenizer, prefix_str, context + continuation)
    ctx = lmeval_encode(tokenizer, prefix_str, context)
    return ctx, whole[len(ctx) :]


class InProcessScorer:
    """Scores requests with a transformers model loaded in this process."""

    supports_media = True

    def __init__(
        self,
        loaded: Any,
        batch_size: int = 16,
        max_length: int | None = None,
        pad_batches: bool = False,
        share_context: bool = True,
        truncate: bool = True,
    ) -> None:
        from lmmbench.backends.truncation import Truncation

        self.truncation = Truncation(enabled=truncate)  # lm-eval's left truncation, counted (or refused)
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.processor = loaded.processor
        self.device = loaded.device
        self.batch_size = max(1, int(batch_size))
        self.pad_batches = pad_batches
        self.share_context = share_context
        self.model_id = f"{loaded.ref.name}@{loaded.ref.path}:{loaded.dtype}"
        self.max_length = max_length or resolve_max_length(self.model.config, self.tokenizer)
        tok = self.tokenizer
        self.prefix_token_id: int = int(tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)
        self._prefix_str = tok.decode(self.prefix_token_id)
        self._batch_engine: Any = None
        self._hidden_ok: bool | None = None  # whether logits == output embedding(last hidden state)
        self._positionwise: list[Any] | None = None  # last-layer modules that may run at read positions only

    # ------------------------------------------------------------------ tokenisation (lm-eval's rules)
    def tok_encode(self, text: str, add_special_tokens: bool | None = None) -> list[int]:
        """Encode like HFLM.tok_encode (no BOS doubling when the text already starts with it)."""
        return lmeval_encode(self.tokenizer, self._prefix_str, text, add_special_tokens)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens, trailing context whitespace moved to the continuation."""
        return lmeval_encode_pair(self.tokenizer, self.prefix_token_id, context, continuation, self._prefix_str)

    # ------------------------------------------------------------------ token-level scoring
    def _forward_logprobs(self, batch: list[list[int]]) -> Any:
        """log_softmax of the model's logits for ``batch`` (right-padded to one width), all positions."""
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            logits = self.model(self._input(batch)).logits
        return F.log_softmax(logits, dim=-1)

    def _input(self, batch: list[list[int]]) -> Any:
        import torch

        width = max(len(x) for x in batch)
        pad = int(self.tokenizer.pad_token_id or 0)
        rows = [x + [pad] * (width - len(x)) for x in batch]
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def _forward_hidden(self, batch: list[list[int]], keep: Any = None, **model_kwargs: Any) -> Any | None:
        """The last hidden states of ``batch`` (the vocabulary projection left out), or None when the model's
        logits are not its output embedding applied to them (checked once, exactly, on the first batch).

        The projection and log_softmax over a 150k-token vocabulary at every context position cost more
        than the layers of a small model, and lm-eval reads only the continuation's positions: each
        request's positions are projected on their own, so its numbers do not depend on its batch.
        ``keep``: the flat (row x position) indices that will be read (``backends.read_positions``)."""
        out = self._forward_hidden_output(batch, keep=keep, **model_kwargs)
        return None if out is None else out.hidden_states[-1]

    def _forward_hidden_output(self, batch: list[list[int]], keep: Any = None, **model_kwargs: Any) -> Any | None:
        """The model's output for ``batch`` with hidden states (``_forward_hidden``), or None. With ``keep``
        the last layer's position-wise modules run only at those positions, as checked once per model."""
        import torch

        from lmmbench.backends.read_positions import only_read_positions

        if self._hidden_ok is False:
            return None
        inp = self._input(batch)
        if keep is not None and self._positionwise is None:
            self._positionwise = self._check_read_positions(batch[0])
        restricted = keep if self._positionwise else None
        with torch.no_grad(), only_read_positions(self.model, restricted, self._positionwise):
            try:
                out = self.model(inp, output_hidden_states=True, logits_to_keep=1, **model_kwargs)
            except TypeError:  # a model without logits_to_keep
                self._hidden_ok = False
                return None
            if self.model.get_output_embeddings() is None:
                self._hidden_ok = False
                return None
            if self._hidden_ok is None:
                last = self.model.get_output_embeddings()(out.hidden_states[-1][:, -1:, :])
                self._hidden_ok = bool(last.shape == out.logits.shape and torch.equal(last, out.logits))
                if not self._hidden_ok:
                    log.info("scoring: %s logits are not its output embedding of the last hidden state; "
                             "projecting every position", type(self.model).__name__)  # fmt: skip
                    return None
        return out

    def _check_read_positions(self, row: list[int]) -> list[Any]:
        """The last-layer modules that may run at the read positions only for this model (checked once)."""
        from lmmbench.backends.read_positions import checked_positionwise_modules

        try:
            modules = checked_positionwise_modules(self.model, self._input([row[:16]]))
        except TypeError:  # a model without logits_to_keep: the hidden-state path is off anyway
            modules = []
        if not modules:
            log.info("scoring: %s runs its last layer at every position", type(self.model).__name__)
        return modules

    def _row_logprobs(self, hidden_row: Any, start: int, end: int) -> Any:
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            logits = self.model.get_output_embeddings()(hidden_row[start:end].unsqueeze(0))
        return F.log_softmax(logits, dim=-1)

    def _batches(self, keys: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
        """Batches of inputs: only equal lengths (no padding, exact) unless ``pad_batches``."""
        batches: list[list[tuple[int, ...]]] = []
        for key in keys:
            last = batches[-1] if batches else None
            if last is not None and len(last) < self.batch_size and (self.pad_batches or len(last[0]) == len(key)):
                last.append(key)
            else:
                batches.append([key])
        return batches

    def score_tokens(
        self, pairs: Sequence[tuple[list[int], list[int]]], progress: Progress | None = None
    ) -> list[tuple[float, bool]]:
        """(LL, is_greedy) of each (context tokens, continuation tokens) pair: each distinct context run once
        (``share_context``, backends/context_sharing.py), or each distinct input whole."""
        from lmmbench.backends.context_sharing import continuation_score, read_index, score_with_shared_contexts

        if self.share_context:
            shared = score_with_shared_contexts(self, pairs, progress)
            if shared is not None:
                return shared

        inputs: dict[tuple[int, ...], list[int]] = {}
        for i, (ctx, cont) in enumerate(pairs):
            if not cont:
                raise ValueError("empty continuation")
            key = tuple((ctx + cont)[-(self.max_length + 1) :][:-1])
            inputs.setdefault(key, []).append(i)
        # longest first, as lm-eval orders its requests
        keys = sorted(inputs, key=lambda k: (-len(k), k))
        out: list[tuple[float, bool] | None] = [None] * len(pairs)
        for chunk in self._batches(keys):
            # right padding (--pad-batches) leaves each row's own positions where they are: causal attention
            spans = [(r, len(k) - max(len(pairs[i][1]) for i in inputs[k]), len(k)) for r, k in enumerate(chunk)]
            keep = read_index(spans, max(len(k) for k in chunk), self.device)
            hidden = self._forward_hidden([list(k) for k in chunk], keep=keep)
            logprobs = hidden if hidden is not None else self._forward_logprobs([list(k) for k in chunk])
            for row, key in zip(logprobs, chunk, strict=True):
                inplen = len(key)
                longest = max(len(pairs[i][1]) for i in inputs[key])
                if hidden is not None:  # project only this request's continuation positions
                    row_lp = self._row_logprobs(row, inplen - longest, inplen)[0]
                    base = inplen - longest
                else:
                    row_lp, base = row, 0
                for i in inputs[key]:
                    cont = pairs[i][1]
                    out[i] = continuation_score(row_lp[inplen - len(cont) - base : inplen - base], cont, self.device)
                if progress is not None:
                    progress(len(inputs[key]))
        return [x for x in out if x is not None]

    # ------------------------------------------------------------------ the ScoringBackend protocol
    def chat_prompt(self, messages: list[dict[str, str]], n_images: int = 0, n_audio: int = 0) -> str:
        """The chat-templated context of a request (lm-eval's ``apply_chat_template``)."""
        from lmmbench.backends.scoring_media import chat_text

        return chat_text(self.tokenizer, self.processor, messages, n_images, n_audio)

    def loglikelihood(
        self, requests: Sequence[LLRequest], progress: Progress | None = None
    ) -> list[tuple[float, bool]]:
        """Log-likelihood per request; media requests go one by one through the processor."""
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        cut = [False] * len(requests)
        text_idx = [i for i, r in enumerate(requests) if not r.images and not r.audio]
        if text_idx:
            pairs = [self.encode_pair(requests[i].context, requests[i].continuation) for i in text_idx]
            for i, (ctx, cont) in zip(text_idx, pairs, strict=True):
                cut[i] = self.truncation.loglikelihood_input(ctx, cont, self.max_length)
            self.truncation.last = cut
            for i, res in zip(text_idx, self.score_tokens(pairs, progress), strict=True):
                results[i] = res
        media_idx = [i for i, r in enumerate(requests) if r.images or r.audio]
        if media_idx:
            from lmmbench.backends.scoring_media import media_loglikelihood

            for i in media_idx:
                results[i] = media_loglikelihood(self, requests[i])
                if progress is not None:
                    progress(1)
        return [r for r in results if r is not None]

    def loglikelihood_rolling(self, texts: Sequence[str], progress: Progress | None = None) -> list[float]:
        """Sum of window log-likelihoods per text (lm-eval's disjoint rolling windows)."""
        pairs: list[tuple[list[int], list[int]]] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            for ctx, cont in disjoint_rolling_windows(self.tok_encode(text), self.prefix_token_id, self.max_length):
                pairs.append((ctx, cont))
                owner.append(i)
        scores = self.score_tokens(pairs)
        totals: list[list[float]] = [[] for _ in texts]
        for i, (ll, _) in zip(owner, scores, strict=True):
            totals[i].append(ll)
        if progress is not None:
            progress(len(texts))
        return [sum(t) for t in totals]

    def generate(self, requests: Sequence[GenRequest], progress: Progress | None = None) -> list[Any]:
        """Greedy generation through the continuous-batching engine (batch-invariant greedy tokens).

        Raw prompts go in as token ids (tokenised like lm-eval), chat prompts and media as messages;
        a raw (non-chat) prompt with media goes through ``model.generate`` one by one. A request the
        engine rejects comes back as an exception, so only its own sample fails.
        """
        from lmmbench.backends.scoring_media import generate_one, prompt_text, to_messages
        from lmmbench.engines import GenerationRequest, SamplingParams

        engine = self._engine()
        out: list[Any] = [""] * len(requests)
        engine_idx: list[int] = []
        engine_reqs: list[Any] = []
        cut = [False] * len(requests)
        for i, r in enumerate(requests):
            sampling = SamplingParams(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p,
                                      top_k=r.top_k, seed=r.seed, stop=[x for x in r.stop if x])  # fmt: skip
            if r.chat:
                engine_reqs.append(GenerationRequest(messages=to_messages(r), sampling=sampling))
            elif not r.images and not r.audio:  # lm-eval's HF model: the context's last max_length - max_gen_toks
                ids, cut[i] = self.truncation.generation_context(self.tok_encode(r.prompt), r.max_tokens,
                                                                 self.max_length)  # fmt: skip
                engine_reqs.append(GenerationRequest(prompt_token_ids=ids, sampling=sampling))
            else:
                try:
                    out[i] = generate_one(self, r, prompt_text(self, r))
                except Exception as exc:  # one failing sample, recorded by the runner
                    out[i] = exc
                if progress is not None:
                    progress(1)
                continue
            engine_idx.append(i)

        def done(_: Any) -> None:
            if progress is not None:
                progress(1)

        self.truncation.last = cut
        for i, res in zip(engine_idx, engine.generate_many(engine_reqs, on_output=done), strict=True):
            if res.finish_reason == "error":
                out[i] = RuntimeError(res.error or "generation failed")
            else:
                out[i] = cut_at_stop(res.text, requests[i].stop)
        return out

    def _engine(self) -> Any:
        if self._batch_engine is None:
            from lmmbench.engines import BatchEngine, TransformersEngine

            self._batch_engine = BatchEngine(TransformersEngine(self.loaded), max_batch_size=self.batch_size)
        return self._batch_engine
