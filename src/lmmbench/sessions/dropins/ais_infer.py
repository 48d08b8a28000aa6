"""AISBench's inference of one task (a model and its data sets), as ``tasks/openicl_api_infer.py`` and the API
models run it: warm-up requests first (``--num-warmups``, the data's first prompts again), then every prompt with
at most ``batch_size`` in flight, paced by ``request_rate`` (requests per second, exponential gaps; none below
0.001), ``retry`` attempts on a connection error (an HTTP error is not retried), and each answer written as it
arrives to ``predictions/<model>/<data set>.jsonl`` (a failure to ``<data set>_failed.jsonl``), in AISBench's
fields. Streamed answers are read as ``base_api.BaseAPIModel.iter_lines`` reads them.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.config.dropins.aisbench_configs import AisModel
from lmmbench.core.errors import UserError
from lmmbench.sessions.dropins.ais_requests import AisItem, request_body

__all__ = ["AisAnswer", "InferJob", "run_infer_job", "served_model"]


@dataclass
class AisAnswer:
    """One request's outcome: text, reasoning, success, error, and its instants (``perf_counter`` seconds: the
    send, then every chunk; AISBench's ``time_points``) with the usage the server reported."""

    content: str = ""
    reasoning: str = ""
    success: bool = False
    error: str = ""
    time_points: list[float] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None

    def prediction(self) -> str:
        """AISBench's ``Output.get_prediction``: reasoning + ``</think>`` + content when there is reasoning."""
        if self.reasoning:
            return self.reasoning + "</think>" + self.content if self.content else self.reasoning
        return self.content


@dataclass
class InferJob:
    """The prompts of one or more data sets of one model (merged with --merge-ds), and where each goes."""

    model: AisModel
    items: list[tuple[str, AisItem]]  # (data set abbr, prompt)
    pred_dir: Path
    warmups: int = 1
    on_answer: Callable[[str, AisItem, dict[str, Any], AisAnswer], None] | None = None


def served_model(model: AisModel) -> str:
    """``model`` of the config, else the first id of the service's ``/v1/models`` (AISBench's
    ``_get_service_model_path``)."""
    if model.model:
        return model.model
    import urllib.error
    import urllib.request

    url = model.base_url().rstrip("/") + "/v1/models"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=model.headers()), timeout=5) as resp:
            return str(json.loads(resp.read())["data"][0]["id"])
    except (OSError, KeyError, IndexError, ValueError) as exc:
        raise UserError(f"model {model.abbr}: cannot get the served model from {url} ({exc}); set model= in its "
                        "config") from None


def _parse(model: AisModel, data: dict[str, Any], answer: AisAnswer, stream: bool) -> None:
    usage = data.get("usage")
    if usage:
        answer.input_tokens = usage.get("prompt_tokens", 0)
        answer.output_tokens = usage.get("completion_tokens", 0)
    choices = data.get("choices") or []
    if not model.chat:
        if choices:
            answer.content += str(choices[0].get("text") or "")
        return
    for item in choices:
        part = item.get("delta" if stream else "message") or {}
        answer.content += str(part.get("content") or "")
        answer.reasoning += str(part.get("reasoning_content") or part.get("reasoning") or "")


def _events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events of ``buffer`` (split on a blank line) and the unfinished rest."""
    parts = buffer.replace(b"\r\n\r\n", b"\n\n").replace(b"\r\r", b"\n\n").split(b"\n\n")
    return [p for p in parts[:-1] if p.strip()], parts[-1]


async def _stream(session: Any, model: AisModel, body: dict[str, Any], answer: AisAnswer) -> None:
    async with session.post(model.endpoint(), json=body, headers=model.headers()) as resp:
        if resp.status != 200:
            answer.error, answer.success = str(resp.reason), False
            return
        rest = b""
        async for chunk in resp.content.iter_any():
            events, rest = _events(rest + chunk)
            for event in events:
                if _stream_event(model, event, answer):
                    answer.success = True
                    return
        if rest.strip():
            _stream_event(model, rest, answer)
        answer.success = True


def _stream_event(model: AisModel, raw: bytes, answer: AisAnswer) -> bool:
    """Read one event; True at ``[DONE]``."""
    text = raw.strip().decode("utf-8")
    if text.startswith(":"):
        return False
    text = text.removeprefix("data:").strip()
    if text == "[DONE]":
        return True
    answer.time_points.append(time.perf_counter())
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        answer.success = False
        answer.error = f"Unexpected response format: {raw!r}. Please check if server is working correctly."
        raise ValueError(answer.error) from None
    _parse(model, data, answer, stream=True)
    return False


async def _text(session: Any, model: AisModel, body: dict[str, Any], answer: AisAnswer) -> None:
    async with session.post(model.endpoint(), json=body, headers=model.headers()) as resp:
        if resp.status != 200:
            answer.error, answer.success = str(resp.reason), False
            return
        raw = await resp.text()
        answer.time_points.append(time.perf_counter())
        _parse(model, json.loads(raw), answer, stream=False)
        answer.success = True


async def send(session: Any, model: AisModel, body: dict[str, Any]) -> AisAnswer:
    """One request with AISBench's retry rule (``retry`` attempts on an exception; an HTTP error or a body that
    is not JSON ends it)."""
    answer = AisAnswer()
    for attempt in range(model.retry):
        answer = AisAnswer(time_points=[time.perf_counter()])
        try:
            await (_stream if model.stream else _text)(session, model, body, answer)
            break
        except (json.JSONDecodeError, ValueError) as exc:
            answer.success, answer.error = False, answer.error or str(exc)
            break
        except Exception as exc:
            answer.success = False
            answer.error = f"After {attempt + 1} retries, request failed with exception: {type(exc).__name__}: {exc}"
    return answer


def _gaps(n: int, rate: float) -> list[float]:
    """Cumulative send offsets in seconds for ``n`` requests at ``rate`` per second (none below 0.001)."""
    if rate < 0.001:
        return [0.0] * n
    t, out = 0.0, []
    rng = random.Random()
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def _write(path: Path, line: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, ensure_ascii=False) + "\n")


async def _run(job: InferJob, log: Callable[[str], None]) -> tuple[int, int]:
    import aiohttp

    model = job.model
    model.model = await asyncio.to_thread(served_model, model)
    sem = asyncio.Semaphore(model.batch_size)
    timeout = aiohttp.ClientTimeout(total=None)
    connector = aiohttp.TCPConnector(limit=model.batch_size + 1)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=True, connector=connector) as session:
        if job.warmups and job.items:
            warm = [job.items[i % len(job.items)][1] for i in range(job.warmups)]

            async def warm_one(item: AisItem) -> bool:
                async with sem:
                    body = request_body(model, item.prompt, item.max_out_len or model.max_out_len)
                    return (await send(session, model, body)).success

            ok = sum(await asyncio.gather(*(warm_one(w) for w in warm)))
            log(f"Warmup finished Total Count: {job.warmups} Success Count: {ok} Failed Count: {job.warmups - ok}")
            if ok == 0:
                raise UserError(f"model {model.abbr}: every warm-up request to {model.endpoint()} failed (AISBench "
                                "stops the task here)")
        start = time.perf_counter()
        offsets = _gaps(len(job.items), model.request_rate)
        done = [0, 0]

        async def one(abbr: str, item: AisItem, at: float) -> None:
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                body = request_body(model, item.prompt, item.max_out_len or model.max_out_len)
                answer = await send(session, model, body)
            _record(job, abbr, item, answer)
            if job.on_answer is not None:
                job.on_answer(abbr, item, body, answer)
            done[0 if answer.success else 1] += 1

        await asyncio.gather(*(one(abbr, item, at) for (abbr, item), at in zip(job.items, offsets, strict=True)))
    return done[0], done[1]


def _record(job: InferJob, abbr: str, item: AisItem, answer: AisAnswer) -> None:
    if job.on_answer is not None:  # perf mode keeps its own details
        return
    if answer.success:
        line: dict[str, Any] = {"data_abbr": abbr, "id": item.index, "success": True, "uuid": uuid.uuid4().hex,
                                "origin_prompt": item.prompt, "prediction": answer.prediction()}  # fmt: skip
        if item.gold:
            line["gold"] = item.gold
        _write(job.pred_dir / f"{abbr}.jsonl", line)
    else:
        _write(job.pred_dir / f"{abbr}_failed.jsonl", {"data_abbr": abbr, "id": item.index, "input": item.prompt,
                                                       "error_info": answer.error})  # fmt: skip


def run_infer_job(job: InferJob, log: Callable[[str], None]) -> tuple[int, int]:
    """Run one task; returns (succeeded, failed)."""
    from lmmbench.core.errors import require

    require("aiohttp", "eval")
    return asyncio.run(_run(job, log))
