"""`lmmbench serve-policy`: any policy lmmbench runs, over openpi's websocket protocol with cross-connection
batching (``episodes.served.server``)."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict, Field

from lmmbench.config.cli_options import command_from_model


class ServePolicyConfig(BaseModel):
    """Serve a policy over openpi's websocket protocol (metadata on connect, msgpack-numpy, /healthz), batching the
    action calls of different connections that arrive within --max-wait-ms into one forward."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field("toy", description="Policy: a built-in name (toy, pi0-tiny, ...) or module:Class / "
                        "file.py:Class, as run episodic-eval's --policy.")
    env: str = Field("toy-waypoints", description="The suite the policy is built for (its task-0 environment gives "
                     "the action space and the control period), as run episodic-eval's --env.")
    host: str = Field("127.0.0.1", description="Address to bind; anything but loopback is exposed to the network.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free one, printed when listening).")
    max_batch: int = Field(8, ge=1, le=1024, description="Most requests in one forward.")
    max_wait_ms: float = Field(2.0, ge=0, description="How long the first request of a batch waits for others "
                               "(requests already queued join it at once, also with 0).")
    metrics_out: Path | None = Field(None, description="Write the batch-size histogram and queueing times here "
                                     "(JSON) at exit; also served at GET /metrics.")
    seed: int = Field(0, description="Weight seed of the built-in policies.")
    device: str = Field("cpu", description="torch device of the policy: cpu, cuda[:N] or auto (CUDA asked for on a "
                        "machine without it is refused).")
    threads: int | None = Field(1, ge=1, description="torch CPU threads of the policy's forward (sent in the "
                                "metadata as torch_threads).")


def _serve_policy(cfg: ServePolicyConfig) -> None:
    import asyncio

    import numpy as np
    import torch

    from lmmbench.core.errors import UserError
    from lmmbench.episodes import PolicySettings, make_policy, resolve_suite
    from lmmbench.episodes.custom import close_env
    from lmmbench.episodes.policies.remote import is_remote
    from lmmbench.episodes.served.server import PolicyServer
    from lmmbench.specs.episodic_build import resolve_device

    if is_remote(cfg.policy):
        raise UserError(f"--policy {cfg.policy}: serve-policy serves a policy lmmbench runs in this process; a served "
                        "one is driven with run episodic-eval --policy ws://HOST:PORT")
    if cfg.metrics_out is not None:  # before the policy is built and the port bound
        from lmmbench.config.input_files import check_output_file

        check_output_file(cfg.metrics_out, "--metrics-out")
    device = resolve_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    suite = resolve_suite(cfg.env)
    probe = suite.make_env(0)
    try:
        settings = PolicySettings(device=device, weight_seed=cfg.seed, probe_env=probe,
                                  control_period_s=float(getattr(probe, "control_period_s", 0.1)))
        try:
            policy = make_policy(cfg.policy, settings)
        except ValueError as exc:
            raise UserError(f"--policy {cfg.policy}: {exc}") from None
        shape = getattr(getattr(probe, "action_space", None), "shape", None)
    finally:
        close_env(probe)
    metadata = {"env": cfg.env, "device": device, "weight_seed": cfg.seed, "torch_threads": torch.get_num_threads()}
    if not shape:  # an environment without a gym action space: the width of the policy's own warm-up action
        shape = np.shape(policy.dummy_action())
    if shape:  # the action width: the driver's warm-up action (RemotePolicy.dummy_action) has it
        metadata["action_dim"] = int(shape[-1])
    server = PolicyServer(policy, max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms,
                          metadata=metadata, metrics_out=cfg.metrics_out)

    def ready(port: int) -> None:
        import sys

        typer.echo(f"serving {cfg.policy} on ws://{cfg.host}:{port} (max batch {cfg.max_batch}, wait "
                   f"{cfg.max_wait_ms} ms)")
        sys.stdout.flush()  # a parent reading the port from a pipe sees it now

    try:
        asyncio.run(server.serve(cfg.host, cfg.port, ready))
    except KeyboardInterrupt:
        server.write_metrics()
        raise


def register(app: typer.Typer) -> None:
    """Add ``lmmbench serve-policy``."""
    command_from_model(app, "serve-policy", ServePolicyConfig, _serve_policy)
