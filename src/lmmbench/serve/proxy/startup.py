"""``lmmbench proxy``'s start-up: the upstream's URL read (its user info kept as credentials, never printed and
never part of a host name), the check that an OpenAI-compatible server answers there with a models list, and the
listening socket bound before the address is printed (so ``--port 0`` prints the port it got)."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from lmmbench.core.errors import UserError
from lmmbench.core.secrets import redact_text, url_credentials

__all__ = ["Upstream", "bind_socket", "check_upstream", "parse_upstream", "upstream_base"]


@dataclass(frozen=True)
class Upstream:
    """The upstream's base URL (no user info) and the ``Authorization`` header its user info gives, if any."""

    base: str
    authorization: str | None = None

    def __repr__(self) -> str:  # the credentials never reach a log line
        return f"Upstream(base={self.base!r}, authorization={'***' if self.authorization else None})"


def parse_upstream(url: str) -> Upstream:
    """The upstream of ``--upstream URL`` (with or without ``/v1``); ``UserError`` for anything that is not an
    http(s) base URL: an endpoint path such as ``/v1/chat/completions`` is refused with the base URL to give."""
    shown = redact_text(url.strip())
    bad = UserError(f"--upstream {shown!r}: expected the server's URL, e.g. http://127.0.0.1:8000")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/models"):
        if path.endswith(tail):
            raise UserError(f"--upstream {shown!r}: that is an endpoint, not the server's base URL; give "
                            f"{parts.scheme}://{_host_port(parts.hostname, port)}{path[: -len(tail)]}")  # fmt: skip
    path = path[:-3] if path.endswith("/v1") else path
    auth = url_credentials(url.strip())[1]  # the password is registered: masked wherever it might appear
    return Upstream(f"{parts.scheme}://{_host_port(parts.hostname, port)}{path}", auth)


def _host_port(host: str, port: int | None) -> str:
    host = f"[{host}]" if ":" in host else host
    return host if port is None else f"{host}:{port}"


def upstream_base(url: str) -> str:
    """``http://host:port`` (plus any path prefix, never user info) of an upstream URL."""
    return parse_upstream(url).base


def _get(up: Upstream, path: str, timeout_s: float) -> tuple[int, bytes]:
    headers = {"Authorization": up.authorization} if up.authorization else {}
    req = urllib.request.Request(up.base + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), resp.read(1 << 22)
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, ssl.SSLError):
        return f"no TLS there ({reason.reason or reason}); if the server speaks plain HTTP, use http://"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer in time"
    return str(reason)


def _speaks_plain_http(base: str, timeout_s: float) -> bool:
    """Whether a plain-HTTP request to an https URL's host and port gets an HTTP answer (a scheme mismatch)."""
    parts = urlsplit(base)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 443), timeout=timeout_s) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return sock.recv(5) == b"HTTP/"
    except OSError:
        return False


def check_upstream(up: Upstream | str, timeout_s: float = 5.0) -> None:
    """``UserError`` unless an OpenAI-compatible server answers at the upstream: ``GET /v1/models`` with a models
    list (``{"data": [...]}``). A server that answers ``/v1/models`` with a 5xx while its ``/health`` is 200 (as
    ``transformers serve`` does until its cache folder exists) passes; a 404 there does not: that is not the base
    URL of an OpenAI-compatible server."""
    up = up if isinstance(up, Upstream) else parse_upstream(up)
    try:
        status, content = _get(up, "/v1/models", timeout_s)
        if status == 200:
            try:
                data = json.loads(content).get("data")
            except (ValueError, AttributeError, RecursionError):
                data = None
            if isinstance(data, list):
                return
            raise UserError(f"--upstream {up.base}: GET /v1/models answered 200 without a models list "
                            '({"data": [...]}); is this an OpenAI-compatible server\'s base URL?')  # fmt: skip
        if status >= 500 and _get(up, "/health", timeout_s)[0] == 200:
            return
    except (OSError, ValueError, ssl.SSLError) as exc:
        if up.base.startswith("https://") and _speaks_plain_http(up.base, timeout_s):
            raise UserError(f"--upstream {up.base}: the server there speaks plain HTTP, not TLS; use "
                            f"{up.base.replace('https://', 'http://', 1)}") from None  # fmt: skip
        raise UserError(f"--upstream {up.base}: nothing answers there ({_reason(exc)}); start the server first, "
                        "or fix the URL") from None  # fmt: skip
    hint = "start the server first" if status >= 500 else "is this the server's base URL (e.g. http://host:port)?"
    raise UserError(f"--upstream {up.base}: GET /v1/models answered HTTP {status}, not a models list; {hint}")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one, read back with ``getsockname``); ``UserError``
    when it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"--host {host}: cannot listen there ({exc})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UserError(f"could not listen on {host}:{port} ({exc.strerror or exc}); choose another --port, or "
                        "--port 0 for a free one") from None  # fmt: skip
    sock.setblocking(False)
    return sock
