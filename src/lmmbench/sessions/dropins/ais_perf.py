"""``lmmbench bench ais --mode perf | perf_viz``: AISBench's perf pipeline (``cli/workers.py``: ``perf`` is
``Infer`` in perf mode then ``PerfViz``; ``perf_viz`` is ``PerfViz`` on a ``--reuse`` folder).

The load is sent by lmmbench's own load generator (``lmmbench.loadgen.run_benchmark``), shaped as AISBench's API
inferencer shapes it (``tasks/openicl_api_infer.py``, ``openicl/icl_inferencer/icl_base_api_inferencer.py``,
``tasks/utils.py``): ``--num-warmups`` requests first (the data's first prompts again, ``batch_size`` at a time,
the task stops when all fail), then every prompt with at most ``batch_size`` in flight, paced by ``request_rate``
(Poisson arrivals; none below 0.001 req/s: each freed slot takes the next prompt at once). Data sets of one model
with the same type and inferencer are one load (perf mode merges them, as ``--merge-ds`` does). Each request's
``time_points`` (AISBench's ``Output.time_points``: the send, then every SSE data event but ``[DONE]``; unstreamed,
the send and the end) are the load generator's instants in seconds: the send is taken just before the request
bytes are written (AISBench takes it before ``session.post``, so a connection it must open counts in its TTFT).
The files are those of :mod:`lmmbench.reports.ais_perf_files`, the metrics those of :mod:`lmmbench.metrics.ais_perf`.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from lmmbench.config.dropins.aisbench_args import AisArgs
from lmmbench.config.dropins.aisbench_configs import AisDataset, AisModel, type_name
from lmmbench.core.errors import UserError
from lmmbench.sessions.dropins.ais_requests import AisItem, load_items, request_body

__all__ = ["perf_groups", "perf_infer", "perf_summarise"]


def perf_groups(datasets: list[AisDataset]) -> list[list[AisDataset]]:
    """Data sets of one load / one result: same type and inferencer (``_merge_datasets``, and the perf
    summarizer's ``dataset_groups``)."""
    groups: dict[str, list[AisDataset]] = {}
    for d in datasets:
        key = d.kind + json.dumps(d.raw["infer_cfg"]["inferencer"], sort_keys=True)
        groups.setdefault(key, []).append(d)
    return list(groups.values())


def group_name(group: list[AisDataset]) -> str:
    """``_get_dataset_abbr``: the data set's abbr, or the type's name in lower case for several."""
    return group[0].abbr if len(group) == 1 else type_name(group[0].raw.get("type")).lower()


def _requests(model: AisModel, items: list[tuple[str, AisItem]]) -> list[Any]:
    from lmmbench.core.request_records import PerfRequest

    out = []
    for i, (_abbr, item) in enumerate(items):
        body = request_body(model, item.prompt, item.max_out_len or model.max_out_len)
        payload = {k: v for k, v in body.items() if k not in ("model", "stream", "stream_options")}
        out.append(PerfRequest(i, payload, "chat" if model.chat else "completions", stream=model.stream,
                               attempts=model.retry))  # fmt: skip
    return out


def _config(model: AisModel, n: int, closed: bool) -> Any:
    from lmmbench.config.perf.options import PerfConfig

    rate = model.request_rate if model.request_rate >= 0.001 and not closed else None
    return PerfConfig.model_validate({
        "url": model.base_url().rstrip("/"), "model": model.model, "endpoint": "chat" if model.chat else "completions",
        "api_key": model.api_key or None, "num_requests": n, "concurrency": model.batch_size, "rate": rate,
        "arrival": "poisson", "ignore_eos": False, "continuous_usage": False, "keep_text": True, "progress": False,
        "plots": False,
    })  # fmt: skip  (https with enable_ssl: certificates checked, as aiohttp's default in AISBench)


def _load(model: AisModel, requests: list[Any], n: int, closed: bool, journal: Path | None = None) -> list[Any]:
    """The load generator's records. ``journal``: finished requests are appended there while the load runs (the
    place of AISBench's ``tmp/tmp_<hex>.jsonl``), and it is removed once the details are written."""
    from lmmbench.loadgen.api import Preflight, run_benchmark

    pf = Preflight(model.model, False, 0.0, 0.0)  # no probe request: AISBench sends none
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
    where = (str(journal), {"model": model.abbr}) if journal is not None else None
    return list(run_benchmark(_config(model, n, closed), requests, pf=pf, journal=where).records)


def _points(rec: Any) -> list[float]:
    times = list(rec.event_times_ns)
    if getattr(rec, "saw_done", False) and times:
        times = times[:-1]  # AISBench stops at [DONE] without a time point
    return [rec.sent_ns / 1e9] + [t / 1e9 for t in times] if rec.sent_ns else []


def _line(abbr: str, item: AisItem, body: dict[str, Any], rec: Any) -> tuple[dict[str, Any], list[float]]:
    """The details line of one request, in ``RequestOutput``'s field order, and its time points."""
    from lmmbench.loadgen.driver import RESENT_ON

    points = _points(rec)
    ok = rec.status == 200 and rec.error_kind in ("", "empty_response") and len(points) > 1
    error = "" if ok else (rec.error_message or rec.error_kind or "chunk size is less than 2")
    if not ok and rec.error_kind in RESENT_ON:  # base_api.py's words; lmmbench's failure kind for the exception type
        error = f"After {rec.attempts} retries, request failed with exception: {rec.error_kind}: {error}"
    usage = rec.token_source == "usage"
    line: dict[str, Any] = {
        "data_abbr": abbr, "id": item.index, "success": ok, "error_info": error, "time_points": None,
        "input_tokens": rec.prompt_tokens or 0, "output_tokens": rec.output_tokens if usage else 0,
        "extra_perf_data": {}, "extra_details_data": {}, "input": body.get("messages", body.get("prompt")),
        "uuid": uuid.uuid4().hex, "turn_id": 0, "data_id": item.index, "prediction": rec.output_text or "",
    }  # fmt: skip
    return line, points


def _warm(model: AisModel, items: list[tuple[str, AisItem]], warmups: int, log: Any) -> None:
    reqs = _requests(model, [items[i % len(items)] for i in range(warmups)])
    recs = _load(model, reqs, warmups, closed=True)
    ok = sum(1 for r in recs if r.status == 200 and r.error_kind in ("", "empty_response"))
    log(f"Warmup finished Total Count: {warmups} Success Count: {ok} Failed Count: {warmups - ok}")
    if ok == 0:
        raise UserError(f"model {model.abbr}: every warm-up request to {model.endpoint()} failed (AISBench stops the "
                        "task here)")


def perf_infer(args: AisArgs, models: list[AisModel], datasets: list[AisDataset], run_dir: Path,
               log_for: Any) -> tuple[int, int]:  # fmt: skip
    """Send every (model, data set group)'s load; returns (sent, succeeded)."""
    from lmmbench.reports.ais_perf_files import write_details
    from lmmbench.sessions.dropins.ais_infer import served_model

    sent = good = 0
    for base in models:
        if base.retry < 1:
            raise UserError(f"model {base.abbr}: retry={base.retry} in its model config makes AISBench send no "
                            "request, so perf mode has nothing to measure; set retry to 1 or more (the most times a "
                            "request is sent)")
        model = base.model_copy()
        model.model = served_model(model)
        out_dir = run_dir / "performances" / model.abbr
        for group in perf_groups(datasets):
            log = log_for(model, group[0].abbr)
            items = [(ds.abbr, i) for ds in group for i in load_items(ds, model, args.aisbench_root, args.num_prompts)]
            if not items:
                log("Get no data to infer, task finished")
                continue
            if args.num_warmups:
                _warm(model, items, args.num_warmups, log)
            requests = _requests(model, items)
            journal = out_dir / "tmp" / f"tmp_{uuid.uuid4().hex[:8]}.jsonl"
            records = sorted(_load(model, requests, len(items), False, journal), key=lambda r: r.end_ns)
            lines = [_line(items[r.request_id][0], items[r.request_id][1], requests[r.request_id].payload, r)
                     for r in records]  # fmt: skip
            write_details(out_dir, lines)
            journal.unlink(missing_ok=True)
            if not any(journal.parent.iterdir()):
                journal.parent.rmdir()  # AISBench removes its emptied tmp/ folder too
            ok = sum(1 for line, _ in lines if line["success"])
            log(f"Task [{model.abbr}]: {ok} succeeded, {len(lines) - ok} failed")
            sent, good = sent + len(lines), good + ok
    return sent, good


def perf_summarise(models: list[AisModel], datasets: list[AisDataset], run_dir: Path,
                   stats: list[str] | None) -> str:  # fmt: skip
    """``PerfViz``: ``performances/<model>/<group>.{csv,json}`` from the details; returns the printed text."""
    from lmmbench.metrics.ais_perf import AisPerfRecord, common_metrics, request_metrics, stats_list
    from lmmbench.reports.ais_perf_files import read_details, write_perf_results

    texts = []
    for model in models:
        name = model.summarizer_abbr or model.abbr
        out_dir = run_dir / "performances" / name
        stream = bool(model.raw.get("stream", True))  # default_perf.py reads model_cfg.get("stream", True)
        for group in perf_groups(datasets):
            lines = read_details(out_dir, [d.abbr for d in group])
            recs = [AisPerfRecord(list(line["time_points"]), int(line.get("input_tokens") or 0),
                                  int(line.get("output_tokens") or 0), stream)
                    for line in lines if line.get("success") and line.get("time_points")]  # fmt: skip
            if not recs:
                raise UserError(f"{out_dir}: every request failed; AISBench cannot calculate performance results "
                                "(see the error_info of the _failed.jsonl files)")
            _count_tokens(model, lines)
            title = f"{name}/{group_name(group)}"
            table = write_perf_results(out_dir, group_name(group), request_metrics(recs, stats_list(stats)),
                                       common_metrics(recs, len(lines), model.batch_size))  # fmt: skip
            texts.append(f"Performance Results of task [{title}]: \n{table}\n"
                         f"Performance Result files located in {out_dir}.")  # fmt: skip
    return "\n".join(texts)


def _count_tokens(model: AisModel, lines: list[dict[str, Any]]) -> None:
    """A request without the server's usage (``input_tokens`` 0): AISBench counts its prompt's tokens with the
    model's tokenizer (``path``); refused here."""
    missing = [line for line in lines if line.get("success") and line.get("time_points")
               and not line.get("input_tokens")]  # fmt: skip
    if not missing:
        return
    raise UserError(f"model {model.abbr}: the server reported no usage for {len(missing)} requests; AISBench then "
                    "counts tokens with the tokenizer at the model's path, which lmmbench's AISBench drop-in does not "
                    "load this round (serve with usage: vLLM sends it with stream_options.include_usage)")
