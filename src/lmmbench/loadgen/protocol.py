"""The small interface the load generator drives; concrete clients live in ``lmmbench.backends``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from lmmbench.core.registry import Registry
from lmmbench.core.request_records import PerfRequest, RequestRecord

__all__ = ["STREAM_CLIENTS", "StreamClient", "StreamClientFactory", "make_client"]


class StreamClient(Protocol):
    """A callback-driven streaming client with a pool of persistent connections."""

    def encode(self, req: PerfRequest, stream: bool = True) -> bytes:
        """Request bytes, encoded before the load."""

    async def open(self, n: int) -> None:
        """Open ``n`` connections before the load."""

    def send(self, rec: RequestRecord, data: bytes, on_done: Callable[[RequestRecord], None]) -> None:
        """Send now; ``on_done(rec)`` is called once the response is complete or failed."""

    def sweep(self, now_ns: int) -> int:
        """Fail requests past their time-out."""

    def cancel_all(self, reason: str = ...) -> None:
        """Fail every request in flight."""

    async def close(self) -> None:
        """Close every connection."""

    def finalize(self, rec: RequestRecord, tokenizer: Any | None, keep_text: bool) -> RequestRecord:
        """Parse the raw stream of a finished record (after the load)."""


class StreamClientFactory(Protocol):
    """Builds a client from its keyword arguments (a client class is one)."""

    def __call__(self, **kwargs: Any) -> StreamClient: ...


#: Stream clients by name (entry-point group ``lmmbench.stream_clients``). Built-in ones import
#: their module on first use, so loadgen never imports a concrete backend.
STREAM_CLIENTS: Registry[StreamClientFactory] = Registry("stream_clients")


def _lazy(target: str) -> StreamClientFactory:
    module, _, name = target.partition(":")

    def build(**kwargs: Any) -> StreamClient:
        cls = getattr(importlib.import_module(module), name)
        client: StreamClient = cls(**kwargs)
        return client

    build.__doc__ = f"Build {target}."
    return build


STREAM_CLIENTS.add("openai-http", _lazy("lmmbench.backends.openai_http:OpenAIHttpClient"))


def make_client(backend: str, **kwargs: Any) -> StreamClient:
    """Build the client registered as ``backend`` with ``kwargs``."""
    return STREAM_CLIENTS.get(backend)(**kwargs)
