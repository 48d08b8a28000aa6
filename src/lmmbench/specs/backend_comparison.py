"""Spec ``backend-comparison`` (in-process against a served engine such as vLLM): the same manifest samples measured
in-process and sent to one or more OpenAI-compatible endpoints; TTFT side by side per sample,
split into client-side and server-side time where the server reports it.

* ``in-process``: decode + pack (``preprocess_ms``) and ``generate(max_new_tokens=1)`` with the
  stage hooks (``ttft_ms``); ``request_ttft_ms`` = preprocess + TTFT, what a request costs from its
  media files to its first token.
* each endpoint (``--endpoints URL[,URL]``; none given: a built-in ``lmmbench serve`` of the same
  model is started on a free loopback port and stopped afterwards): one streaming chat request
  (``--max-tokens``, default 8, greedy) with the image as a ``data:`` URI and the audio as base64 WAV, encoded
  before the clock starts, sent on a fresh keep-alive connection opened before the clock starts
  (``backends.openai_http``). ``request_ttft_ms`` = client TTFT (request written -> first content
  chunk). When the response carries lmmbench's ``metrics`` object, the split is
  ``server_preprocess_ms`` (decode + processor) + ``server_queue_ms`` (waiting for a batch slot; the
  server's ``queue_ms`` minus its preprocessing, which it counts inside) + ``server_compute_ms``
  (joined the batch -> first token) = ``server_ttft_ms``, and ``client_side_ms`` = client TTFT -
  server TTFT (HTTP, JSON, SSE framing, loopback, the client).

OpenAI chat has no video part, so only manifest rows without video are used (the synthetic set's
image + audio and audio rows; for a text model, the synthetic set's prompts without their media).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from lmmbench.backends.readiness import wait_for_server
from lmmbench.core.errors import UserError
from lmmbench.specs.base import Case, RunOptions, SpecContext, register_spec
from lmmbench.specs.experiment_support import ResearchSpec, group_median, new_figure, ok_rows, save_figure

__all__ = ["BackendComparisonOptions", "BackendComparisonSpec", "backend_findings", "chat_payload",
           "server_metrics_of"]

IN_PROCESS = "in-process"
_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
         ".gif": "image/gif", ".bmp": "image/bmp"}
_AUDIO_FORMATS = {".wav": "wav", ".flac": "flac", ".ogg": "ogg", ".mp3": "mp3"}


class BackendComparisonOptions(RunOptions):
    """Options of ``lmmbench run backend-comparison``."""

    repeats: int = Field(3, ge=1, description="Measured repeats per (sample, backend).")
    endpoints: list[str] = Field([], description="OpenAI-compatible base URLs (lmmbench serve, transformers serve, "
                                 "vLLM, ...). None: a built-in lmmbench serve of --model is started.")
    endpoint_models: list[str] = Field([], description="Model id per endpoint (default: the first id of its "
                                       "/v1/models, else --model).")
    api_key: str | None = Field(None, description="Bearer key for the endpoints (else $OPENAI_API_KEY).")
    wait_for_server: float = Field(10.0, ge=0, description="Seconds to wait for an endpoint that is still starting.")
    timeout_s: float = Field(120.0, gt=0, description="Per-request time-out.")
    server_threads: int | None = Field(None, ge=1, description="torch threads of the built-in server it starts.")
    max_tokens: int = Field(8, ge=1, description="max_tokens of the endpoint requests. More than 1: a server holds "
                            "back a token that is not yet valid UTF-8 (byte-level BPE), so with 1 the stream can end "
                            "without any content (transformers serve does).")


def _data_uri(path: Path) -> str:
    mime = _MIME.get(path.suffix.lower())
    if mime is None:
        raise UserError(f"{path}: image type {path.suffix} cannot be sent as a data: URI; use png/jpeg/webp")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def chat_payload(prompt: str, image: Path | None, audio: Path | None, max_tokens: int = 1) -> dict[str, Any]:
    """The chat request of one sample: image as a data: URI, audio as base64, then the text (the same
    order the in-process path uses); greedy, ``max_tokens`` tokens."""
    parts: list[dict[str, Any]] = []
    if image is not None:
        parts.append({"type": "image_url", "image_url": {"url": _data_uri(image)}})
    if audio is not None:
        fmt = _AUDIO_FORMATS.get(audio.suffix.lower())
        if fmt is None:
            raise UserError(f"{audio}: audio type {audio.suffix} cannot be sent as input_audio; use wav/flac")
        parts.append({"type": "input_audio",
                      "input_audio": {"data": base64.b64encode(audio.read_bytes()).decode(), "format": fmt}})
    parts.append({"type": "text", "text": prompt})
    content: str | list[dict[str, Any]] = parts if len(parts) > 1 else prompt  # text only: a plain string
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0.0}


def server_metrics_of(event_data: list[bytes]) -> dict[str, float]:
    """The server's ``metrics`` object (lmmbench serve puts it on the last chunk), or {}."""
    for data in reversed(event_data):
        if data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("metrics"), dict):
            return {k: float(v) for k, v in obj["metrics"].items() if isinstance(v, (int, float))}
    return {}


async def _send(url: str, model: str, payload: dict[str, Any], api_key: str | None,
                timeout_s: float) -> dict[str, Any]:
    from lmmbench.backends.openai_http import OpenAIHttpClient
    from lmmbench.core.request_records import PerfRequest

    client = OpenAIHttpClient(url, model, api_key=api_key, timeout_s=timeout_s, continuous_usage=False)
    try:
        rec = await client.request_once(PerfRequest(0, payload), stream=True, timeout_s=timeout_s)
    finally:
        await client.close()
    metrics = server_metrics_of(rec.event_data)
    client.finalize(rec, None, keep_text=False)
    if not rec.ok:
        raise RuntimeError(f"{url}: {rec.error_kind}: {rec.error_message}")
    return {"rec": rec, "metrics": metrics}


class _BuiltinServer:
    """``lmmbench serve`` of the spec's model in a child process on a free loopback port (its own process group,
    ending with this process: ``core.children``)."""

    def __init__(self, model: str, log_path: Path, threads: int | None, device: str = "cpu",
                 dtype: str = "float32") -> None:
        from lmmbench.core.net import free_loopback_port

        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "lmmbench.cli.main", "serve", "--model", model, "--port", str(self.port),
               "--device", device, "--dtype", dtype]  # the same device and dtype as the in-process side
        if threads:
            cmd += ["--threads", str(threads)]
        from lmmbench.core.children import start_group

        self.log = log_path.open("w", encoding="utf-8")
        self.proc = start_group(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        import socket

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UserError(f"the built-in server exited with code {self.proc.returncode}; see {self.log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise UserError(f"the built-in server did not start within {timeout_s:g} s; see {self.log.name}")

    def stop(self) -> None:
        """SIGTERM to the server's group, SIGKILL after the ``stop_grace_s`` limit."""
        import signal

        from lmmbench.config.limits import limit_value
        from lmmbench.core.children import stop_groups

        stop_groups([self.proc], signal.SIGTERM, float(limit_value("stop_grace_s")))
        self.log.close()


@register_spec
class BackendComparisonSpec(ResearchSpec):
    """The same samples in-process and against OpenAI-compatible endpoints; client vs server time."""

    name = "backend-comparison"
    help = ("The same manifest in-process and sent to OpenAI-compatible endpoints (--endpoints; default: a "
            "built-in lmmbench serve): TTFT per sample side by side, client-side vs server-side time.")
    options_model: ClassVar[type[RunOptions]] = BackendComparisonOptions
    columns = ("backend", "modalities", "request_ttft_ms", "preprocess_ms", "extract_ms", "pack_ms",
               "audio_feature_ms", "ttft_ms", "client_ttft_ms",
               "server_ttft_ms", "server_queue_ms", "server_preprocess_ms", "server_compute_ms", "client_side_ms",
               "e2e_ms", "prompt_tokens")
    stage_fields: ClassVar[tuple[str, ...]] = ("preprocess_ms", "ttft_ms", "server_queue_ms", "server_preprocess_ms",
                                               "server_compute_ms", "client_side_ms")
    total_field = "request_ttft_ms"
    fit_pairs = ()

    def setup(self, ctx: SpecContext) -> list[Case]:
        from lmmbench.engines.inprocess_breakdown import SampleMedia
        from lmmbench.media.manifest import load_manifest
        from lmmbench.specs.ttft_breakdown import synthetic_manifest

        opts = ctx.options
        assert isinstance(opts, BackendComparisonOptions)
        eng = self.load(ctx)
        ref = eng.loaded.ref
        synthetic = opts.manifest is None
        manifest = synthetic_manifest(opts.seed) if synthetic else Path(opts.manifest or "")
        rows = load_manifest(manifest)
        if synthetic and not ref.is_multimodal:  # a text model gets the synthetic set's prompts alone
            rows = [replace(r, video=None, image=None, audio=None) for r in rows if r.video is None]
        rows = [r for r in rows if r.video is None
                and (r.image is None or ref.is_multimodal) and (r.audio is None or ref.has_audio)]
        if opts.limit:
            rows = rows[: opts.limit]
        if not rows:
            raise UserError(f"{manifest}: no row without video that {ref.name} can take (OpenAI chat has no video "
                            "part); give image / audio / text rows")
        if opts.endpoint_models and len(opts.endpoint_models) != len(opts.endpoints):
            raise UserError("--endpoint-models: give one model id per --endpoints URL (or none)")
        server = None
        urls = list(opts.endpoints)
        if not urls:
            server = _BuiltinServer(opts.model, ctx.spec_dir / "builtin-serve.log", opts.server_threads,
                                    opts.device, opts.dtype)
            ctx.state["server"] = server
            server.wait_ready()
            urls = [server.url]
        targets: dict[str, dict[str, Any]] = {}
        for i, url in enumerate(urls):
            model = opts.endpoint_models[i] if opts.endpoint_models else None
            info = wait_for_server(url, model, opts.wait_for_server, api_key=opts.api_key or os.environ.get(
                "OPENAI_API_KEY"))  # a server still starting is waited for; a wrong model id is refused
            model = model or (info.models[0] if info.models else None) or opts.model
            label = f"lmmbench-serve(built-in)@{url}" if server is not None else url
            if label in targets:  # the same URL twice (e.g. two model ids on one server)
                label = f"{url}#{i + 1}"
            targets[label] = {"url": url, "model": model}
        ctx.state["targets"] = targets
        ctx.environment["backend_comparison"] = {"manifest": str(manifest), "targets": targets,
                                                 "builtin_server": server is not None}
        cases = []
        # backend by backend: a server's idle worker threads (OpenMP spin-wait) must not overlap the
        # in-process measurements on a small machine
        for backend in (IN_PROCESS, *targets):
            for r in rows:
                media = SampleMedia(prompt=r.prompt, image=r.image, audio=r.audio)
                payload = chat_payload(r.prompt, r.image, r.audio, max_tokens=opts.max_tokens)
                cases.append(Case(id=f"{r.id}@{backend}", group=backend,
                                  params={"media": media, "payload": payload, "backend": backend},
                                  extra={"sample": r.id, "backend": backend, "modalities": r.modalities}))
        return cases

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        opts = ctx.options
        assert isinstance(opts, BackendComparisonOptions)
        backend = case.params["backend"]
        if backend == IN_PROCESS:
            row = ctx.state["engine"].measure(case.params["media"])
            return {"request_ttft_ms": row["preprocess_ms"] + row["ttft_ms"], "preprocess_ms": row["preprocess_ms"],
                    "extract_ms": row["extract_ms"], "pack_ms": row["pack_ms"],
                    "audio_feature_ms": row["audio_feature_ms"], "ttft_ms": row["ttft_ms"],
                    "e2e_ms": row["preprocess_ms"] + row["ttft_ms"], "prompt_tokens": row["total_tokens"]}
        target = ctx.state["targets"][backend]
        out = asyncio.run(_send(target["url"], target["model"], case.params["payload"], opts.api_key, opts.timeout_s))
        rec, m = out["rec"], out["metrics"]
        client_ttft = (rec.first_token_ns - rec.sent_ns) / 1e6
        fields: dict[str, Any] = {"request_ttft_ms": client_ttft, "client_ttft_ms": client_ttft,
                                  "ttft_ms": client_ttft, "e2e_ms": (rec.end_ns - rec.sent_ns) / 1e6,
                                  "prompt_tokens": rec.prompt_tokens if rec.prompt_tokens is not None else ""}
        if "ttft_ms" in m:
            # lmmbench serve prepares a request (decode, processor) before queueing it, so its queue_ms
            # (arrival -> joined the batch) contains preprocess_ms: the wait is the difference
            queue, pre = m.get("queue_ms", 0.0), m.get("preprocess_ms", 0.0)
            fields.update(server_ttft_ms=m["ttft_ms"], server_queue_ms=max(0.0, queue - pre),
                          server_preprocess_ms=pre, server_compute_ms=m["ttft_ms"] - max(queue, pre),
                          client_side_ms=client_ttft - m["ttft_ms"])
        return fields

    def teardown(self, ctx: SpecContext) -> None:
        server = ctx.state.pop("server", None)
        if server is not None:
            server.stop()
        super().teardown(ctx)

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        del analysis
        return backend_findings(rows)

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        plot_backends(rows, path)
        return True


def backend_findings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per sample and backend: median request TTFT and its split; per backend: the overall median."""
    good = ok_rows(rows)
    fields = ("request_ttft_ms", "preprocess_ms", "ttft_ms", "server_ttft_ms", "server_queue_ms",
              "server_preprocess_ms", "server_compute_ms", "client_side_ms", "prompt_tokens")
    med = {f: group_median(good, ("sample", "backend"), f) for f in fields}
    per_sample: dict[str, dict[str, dict[str, float]]] = {}
    for (sample, backend), v in med["request_ttft_ms"].items():
        entry = {f: med[f].get((sample, backend), float("nan")) for f in fields}
        entry["request_ttft_ms"] = v
        per_sample.setdefault(sample, {})[backend] = entry
    per_backend = {b: group_median(good, ("backend",), f).get((b,), float("nan"))
                   for b in sorted({str(r.get("backend")) for r in good}) for f in ("request_ttft_ms",)}
    parts = []
    base = per_backend.get(IN_PROCESS)
    for b, v in per_backend.items():
        if b == IN_PROCESS:
            parts.append(f"in-process: {v:.1f} ms median request TTFT (preprocess + generate)")
            continue
        split = {f: group_median(good, ("backend",), f).get((b,), float("nan"))
                 for f in ("server_ttft_ms", "server_queue_ms", "server_preprocess_ms", "server_compute_ms",
                           "client_side_ms")}
        ratio = f" ({v / base:.2f}x in-process)" if base else ""
        text = f"{b}: {v:.1f} ms client TTFT{ratio}"
        if split["server_ttft_ms"] == split["server_ttft_ms"]:
            text += (f" = server {split['server_ttft_ms']:.1f} ms (queue {split['server_queue_ms']:.1f}, preprocess "
                     f"{split['server_preprocess_ms']:.1f}, compute {split['server_compute_ms']:.1f}) + client side "
                     f"{split['client_side_ms']:.1f} ms")
        else:
            text += " (the server reports no metrics: no client/server split)"
        parts.append(text)
    return {"per_sample": per_sample, "per_backend_request_ttft_ms": per_backend, "finding": "; ".join(parts)}


def plot_backends(rows: list[dict[str, Any]], path: Path) -> None:
    """Per sample, one stacked bar per backend: in-process preprocess + TTFT; endpoints server parts +
    client side (or the client TTFT alone when the server reports nothing)."""
    good = ok_rows(rows)
    parts = ("preprocess_ms", "ttft_ms", "server_queue_ms", "server_preprocess_ms", "server_compute_ms",
             "client_side_ms")
    med = {f: group_median(good, ("sample", "backend"), f) for f in (*parts, "request_ttft_ms", "server_ttft_ms")}
    keys = sorted(med["request_ttft_ms"])
    labels = [f"{s}\n{b.split('@')[0][:24]}" for s, b in keys]
    fig, (ax,) = new_figure(1, width=max(6.0, 1.3 * len(keys)))
    bottom = [0.0] * len(keys)
    for i, f in enumerate(parts):
        vals = []
        for k in keys:
            v = med[f].get(k, float("nan"))
            has_split = med["server_ttft_ms"].get(k, float("nan"))
            if f == "ttft_ms" and k[1] != IN_PROCESS and has_split == has_split:
                v = 0.0  # the endpoint's TTFT is shown by its parts
            vals.append(v if v == v and v > 0 else 0.0)
        if any(vals):
            ax.bar(labels, vals, bottom=bottom, label=f.removesuffix("_ms"), color=f"C{i}")
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("ms (median)")
    ax.set_title("request TTFT per sample and backend")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    save_figure(fig, path)
