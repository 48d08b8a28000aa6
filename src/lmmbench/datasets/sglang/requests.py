"""The requests of SGLang's drawn rows, as SGLang's request functions shape them, for lmmbench's load generator.

A text goes as the prompt (chat: one user message), token ids as SGLang's native ``input_ids``, OpenAI messages
as the chat's messages, images as ``image_url`` parts before the text (chat) or as ``image_data`` (SGLang's native
API); a row's own fields (``openai`` rows) over ``--extra-request-body``. A multi-turn row (``agentic-trace``,
``generated-shared-prefix`` with ``--gsp-num-turns``) becomes one request per round, chained: each round is sent
when the previous one finished, its messages after the conversation so far with the server's own replies
(``PerfRequest.follows_replies``), as SGLang's ``wrap_multi_turn_request_func`` does. A row with a timestamp
(``mooncake``) is sent at it (the rate is not used).
"""

from __future__ import annotations

from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.datasets.perf.registry import request_body
from lmmbench.datasets.sglang.rows import SglRow

__all__ = ["MULTI_TURN_BACKENDS", "build_sglang_requests", "round_messages"]

#: SGLang's backends that take multi-turn rows (``MULTI_TURN_BACKENDS``)
MULTI_TURN_BACKENDS = ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat")


def round_messages(turn: Any, where: str) -> list[dict[str, Any]]:
    """``_normalize_round_messages``: a text as one user message, or role/content messages as they are."""
    if isinstance(turn, str):
        return [{"role": "user", "content": turn}]
    if isinstance(turn, list) and turn and all(isinstance(m, dict) and "role" in m and "content" in m for m in turn):
        return [{"role": m["role"], "content": m["content"]} for m in turn]
    raise UserError(f"{where}: a round must be a text or a list of role/content messages")


def _body(cfg: PerfConfig, row: SglRow, extra: dict[str, Any]) -> dict[str, Any]:
    prompt = row.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):  # OpenAI messages
        if cfg.endpoint != "chat":
            raise UserError("--dataset-name openai sends chat messages: use a chat backend (sglang-oai-chat, "
                            "vllm-chat, lmdeploy-chat), as SGLang needs")  # fmt: skip
        body = request_body(cfg, "", row.output_len)
        body["messages"] = prompt
    elif isinstance(prompt, list):  # token ids: SGLang's native API only
        if cfg.endpoint != "generate":
            raise UserError("--tokenize-prompt sends token ids: only with --backend sglang (as SGLang)")
        body = request_body(cfg, "", row.output_len)
        body["prompt"] = prompt
    elif row.image_data and cfg.endpoint == "chat":
        parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in row.image_data]
        body = request_body(cfg, [*parts, {"type": "text", "text": prompt}], row.output_len)
    else:
        body = request_body(cfg, prompt, row.output_len)
        if row.image_data:
            body["image_data"] = row.image_data
    body.update({**extra, **row.extra_body})
    return body


def _rounds(cfg: PerfConfig, row: SglRow, extra: dict[str, Any], first_id: int) -> list[PerfRequest]:
    if cfg.endpoint != "chat":
        raise UserError(f"multi-turn rows go to chat backends only ({', '.join(MULTI_TURN_BACKENDS)}), as SGLang")
    out = []
    for k, turn in enumerate(row.prompt):
        body = request_body(cfg, "", row.output_len)
        body["messages"] = round_messages(turn, f"conversation {row.labels.get('conversation', '?')}, round {k}")
        body.update({**extra, **row.extra_body})
        last = k == len(row.prompt) - 1
        out.append(PerfRequest(first_id + k, body, cfg.endpoint, None, row.output_len,
                               labels={**row.labels, "turn": k}, turn=k,
                               next_turn=None if last else first_id + k + 1, follows_replies=k > 0))  # fmt: skip
    return out


def build_sglang_requests(cfg: PerfConfig, rows: list[SglRow], extra: dict[str, Any]) -> list[PerfRequest]:
    """The requests of ``rows``; ``extra``: the body fields every request carries (a row's own fields win)."""
    out: list[PerfRequest] = []
    for c, row in enumerate(rows):
        if row.rounds:
            row.labels.setdefault("conversation", c)
            out += _rounds(cfg, row, extra, len(out))
            continue
        arrival = round(row.timestamp_s * 1e9) if row.timestamp_s is not None else None
        out.append(PerfRequest(len(out), _body(cfg, row, extra), cfg.endpoint, row.prompt_len, row.output_len,
                               labels=dict(row.labels), arrival_ns=arrival))  # fmt: skip
    return out
