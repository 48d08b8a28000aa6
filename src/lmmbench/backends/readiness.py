"""Readiness and identity of an OpenAI-compatible server, before anything is measured.

``wait_for_server(url, model, timeout_s)`` polls ``GET /v1/models`` until the server answers (a
server still starting refuses connections for a while: ``testserver &`` followed by ``perf`` must
not race), then checks that it lists ``model`` (so a different server that already held the port is
not measured by mistake). A server whose ``/v1/models`` fails (``transformers serve`` without an HF
cache answers 500) gets a warning, not a refusal. It also reports ``max_model_len`` per model when
the server says it (vLLM does). perf, eval, backend-comparison and plan executors call it.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from lmmbench.core.errors import UserError
from lmmbench.core.secrets import url_credentials

__all__ = ["ServerInfo", "models_url", "wait_for_server"]


@dataclass
class ServerInfo:
    """What ``/v1/models`` said: the model ids, their context lengths when given, and any warning."""

    url: str
    models: list[str] = field(default_factory=list)
    max_model_len: dict[str, int] = field(default_factory=dict)
    listed: bool = False  # False when /v1/models failed (the model could not be checked)
    warning: str | None = None


def models_url(url: str) -> str:
    """``<base>/v1/models`` for a base URL given with or without ``/v1``."""
    base = url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return f"{base}/models"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _get(url: str, api_key: str | None, timeout_s: float, basic: str | None = None) -> tuple[int, bytes]:
    auth = f"Bearer {api_key}" if api_key else basic
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), bytes(resp.read(8 * 1024 * 1024))
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""


def _parse(info: ServerInfo, status: int, body: bytes) -> None:
    if status != 200:
        info.warning = f"{info.url} answered HTTP {status}: cannot check which models it serves"
        return
    try:
        data = json.loads(body).get("data")
        entries = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else None
    except (ValueError, AttributeError, RecursionError):
        entries = None
    if entries is None:
        info.warning = f"{info.url} did not answer a model list: cannot check which models it serves"
        return
    info.listed = True
    for m in entries:
        mid = str(m.get("id"))
        info.models.append(mid)
        n = m.get("max_model_len")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            info.max_model_len[mid] = n


def wait_for_server(
    url: str,
    model: str | None,
    timeout_s: float = 10.0,
    *,
    api_key: str | None = None,
    notify: Callable[[str], None] = _stderr,
) -> ServerInfo:
    """Wait up to ``timeout_s`` for the server at ``url`` to answer, then check that it lists ``model``.

    A server that never answers, or lists models without ``model``, is a ``UserError``; a failing
    ``/v1/models`` is a warning (passed to ``notify``) and the returned info has ``listed=False``.
    """
    url, basic = url_credentials(url)  # user:password@ is credentials: never part of the host name, never printed
    info = ServerInfo(models_url(url))
    deadline = time.monotonic() + timeout_s
    announced = False
    while True:
        try:
            status, body = _get(info.url, api_key, max(1.0, min(10.0, timeout_s)), basic)
            break
        except (OSError, ValueError) as exc:  # refused, reset, timed out, or a malformed URL (ValueError)
            if isinstance(exc, ValueError) or time.monotonic() >= deadline:
                raise UserError(
                    f"cannot reach {url}: no server answered within {timeout_s:g} s ({getattr(exc, 'reason', exc)}); "
                    f"start it first, or wait longer with --wait-for-server SECONDS"
                ) from None
            if not announced:
                notify(f"waiting up to {timeout_s:g} s for the server at {url} to start...")
                announced = True
            time.sleep(0.2)
    _parse(info, status, body)
    if info.warning:
        notify(f"warning: {info.warning}")
    elif model is not None and model not in info.models:
        raise UserError(
            f"model '{model}' is not served at {url} (it lists: {', '.join(info.models) or 'nothing'}); "
            f"another server may hold that port, or pass the right --model"
        )
    return info
