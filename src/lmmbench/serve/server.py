"""Start ``lmmbench serve``: load the model, start the batching engine, run uvicorn.

``ServeConfig`` is the pydantic model the CLI options are derived from. ``build_server`` returns
the engine and the app; ``serve`` runs it in the foreground; ``ServerThread`` runs it on a
background thread (tests, benchmarks, notebooks).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lmmbench.config.common import Dtype, device_field, dtype_field, revision_field, threads_field, with_revision
from lmmbench.core.errors import UserError, require
from lmmbench.engines.batch_engine import BatchEngine
from lmmbench.engines.requests import GenerationRequest, SamplingParams
from lmmbench.serve.app import AppSettings, create_app

__all__ = ["ServeConfig", "ServerThread", "build_server", "serve"]

log = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class ServeConfig(BaseModel):
    """Serve a model over an OpenAI-compatible HTTP API with continuous batching."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny-llm", description="Built-in tiny model name, a hub id (ORG/NAME) or a local model "
                       "directory.")
    revision: str | None = revision_field()

    @model_validator(mode="after")
    def _hub_revision(self) -> Self:
        self.model = with_revision(self.model, self.revision)  # type: ignore[assignment]
        return self

    host: str = Field("127.0.0.1", description="Address to bind; anything but loopback is exposed to the network.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port.")
    max_batch_size: int = Field(16, ge=1, le=1024, description="Most requests decoded together.")
    max_queue: int = Field(64, ge=0, description="Most requests waiting for a batch slot; more get 429.")
    max_prefill_tokens: int = Field(4096, ge=1, description="Prompt tokens admitted per engine step.")
    gil_switch_ms: float | None = Field(
        None,
        gt=0,
        description="Python thread switch interval in ms (default: Python's 5 ms).",
    )
    engine: str = Field("transformers", description="Registered engine running the model (lmmbench.engines.ENGINES).")
    prefill_wait_steps: int = Field(
        0, ge=0, description="While requests run, let newcomers wait up to N steps to share one prefill forward."
    )
    device: str = device_field()
    dtype: Dtype = dtype_field()
    threads: int | None = threads_field()
    api_key: str | None = Field(None, description="Require 'Authorization: Bearer <key>' on /v1 routes.")
    served_model_name: str | None = Field(None, description="Model id clients use (default: the model name).")
    max_body_mb: float = Field(16.0, gt=0, description="Largest request body accepted, in MiB (else 413).")
    default_max_tokens: int = Field(256, ge=1, description="max_tokens when a request gives none.")
    warmup: bool = Field(True, description="Run one short generation before accepting requests.")
    log_level: str = Field("warning", description="uvicorn log level.")


def build_server(cfg: ServeConfig) -> tuple[BatchEngine, Any]:
    """Load the model, warm it up, start the engine thread; returns ``(engine, app)``."""
    require("fastapi", "serve")
    require("uvicorn", "serve")
    if cfg.gil_switch_ms is not None:
        sys.setswitchinterval(cfg.gil_switch_ms / 1000.0)
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(cfg.threads)
    engine = BatchEngine.from_model(
        cfg.model,
        device=cfg.device,
        dtype=cfg.dtype,
        engine=cfg.engine,
        max_batch_size=cfg.max_batch_size,
        max_queue=cfg.max_queue,
        max_prefill_tokens=cfg.max_prefill_tokens,
        prefill_wait_steps=cfg.prefill_wait_steps,
    )
    if cfg.warmup:
        for _ in range(2):
            engine.generate(GenerationRequest(prompt="warm up", sampling=SamplingParams(max_tokens=4, ignore_eos=True)))
    engine.start()
    name = cfg.served_model_name or cfg.model
    settings = AppSettings(
        model_name=name,
        model_aliases=(cfg.model,) if cfg.model != name else (),
        api_key=cfg.api_key,
        max_body_bytes=int(cfg.max_body_mb * 1024 * 1024),
        default_max_tokens=cfg.default_max_tokens,
    )
    return engine, create_app(engine, settings)


def _uvicorn_config(app: Any, cfg: ServeConfig) -> Any:
    import uvicorn

    return uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level=cfg.log_level, access_log=False, timeout_keep_alive=30
    )


def serve(cfg: ServeConfig) -> None:
    """Run the server in the foreground until interrupted."""
    import uvicorn

    from lmmbench.core.net import ensure_port_free

    ensure_port_free(cfg.host, cfg.port)  # before the model is loaded: one line, exit 2
    if cfg.host not in LOOPBACK and cfg.api_key is None:
        log.warning("binding %s without --api-key: anyone who can reach this port can use the model", cfg.host)
    engine, app = build_server(cfg)
    print(
        f"lmmbench serve: {cfg.served_model_name or cfg.model} on http://{cfg.host}:{cfg.port} "
        f"(max batch {cfg.max_batch_size}, queue {cfg.max_queue})",
        flush=True,
    )
    try:
        server = uvicorn.Server(_uvicorn_config(app, cfg))
        server.run()
        if not server.started:
            raise UserError(f"could not listen on {cfg.host}:{cfg.port} (in use, or not allowed)")
    finally:
        engine.stop()


class ServerThread:
    """``lmmbench serve`` on a background thread: ``with ServerThread(cfg) as srv: srv.url``."""

    def __init__(self, cfg: ServeConfig) -> None:
        import uvicorn

        self.cfg = cfg
        self.engine, self.app = build_server(cfg)
        self.server = uvicorn.Server(_uvicorn_config(self.app, cfg))
        self.thread = threading.Thread(target=self.server.run, name="lmmbench-serve", daemon=True)

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000``."""
        return f"http://{self.cfg.host}:{self.cfg.port}"

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        """Start and wait until the port accepts connections."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.engine.stop()
                raise RuntimeError(f"server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop uvicorn and the engine thread."""
        self.server.should_exit = True
        self.thread.join(10)
        self.engine.stop()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
