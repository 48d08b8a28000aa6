"""Secrets given on the command line (``--api-key``, ``--header``) never reach a file or a log line.

``redact_config`` masks secret fields of a config mapping before it is written (run.json, report,
logs); ``redact_argv`` masks them in a command line; ``redact_text`` removes any registered secret
value from free text (an error message that quotes a header); ``RedactingFilter`` does the same to
every log record. A secret value is registered with ``register_secret`` when a config is built.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = [
    "MASK",
    "SECRET_KEYS",
    "RedactingFilter",
    "redact_argv",
    "redact_config",
    "redact_text",
    "register_secret",
]

MASK = "***"
#: Config fields and header names whose values are secrets (compared case-insensitively).
SECRET_KEYS = ("api_key", "apikey", "authorization", "headers", "header", "token", "password", "secret",
               "x-api-key", "proxy-authorization", "cookie")
#: ``token`` is a secret alone or with these prefixes only: a measured field may end in ``_token``
#: (``first_token``, ``visual_ms_per_token``) and must never be masked.
_SECRET_TOKEN_KEYS = ("token", "api_token", "auth_token", "access_token", "hf_token", "bearer_token",
                      "secret_token", "refresh_token", "session_token", "id_token")
_SECRET_FLAGS = ("--api-key", "--header", "--headers", "--token", "--password")
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember ``value`` so that ``redact_text`` and the log filter remove it wherever it appears."""
    if value and len(value) >= 4:
        _registered.add(value)
        if value.lower().startswith("bearer "):
            _registered.add(value[7:])


def _is_secret_key(key: str) -> bool:
    k = key.lower().replace("-", "_")
    if k.endswith("token"):
        return k in _SECRET_TOKEN_KEYS
    return any(k == s.replace("-", "_") or k.endswith("_" + s.replace("-", "_")) for s in SECRET_KEYS)


def redact_config(obj: Any) -> Any:
    """A copy of ``obj`` (mappings / lists) with the values of secret keys masked; non-empty only."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and _is_secret_key(k) and v not in (None, "", {}, []):
                out[k] = {hk: MASK for hk in v} if isinstance(v, dict) else MASK
            else:
                out[k] = redact_config(v)
        return out
    if isinstance(obj, list):
        return [redact_config(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret flags (``--api-key X``, ``--api-key=X``) masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in _SECRET_FLAGS:
            out.append(f"{flag}={MASK}" if eq else arg)
            mask_next = not eq
            continue
        out.append(redact_text(arg))
    return out


_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{4,}")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]+@")  # user:password@ of a URL: credentials


def redact_text(text: str) -> str:
    """``text`` with every registered secret, any ``Bearer <token>`` and a URL's user info masked."""
    for value in sorted(_registered, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    return _USERINFO.sub(rf"\g<1>{MASK}@", _BEARER.sub(rf"\g<1>{MASK}", text))


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in every record's message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _registered or "earer" in str(record.msg):
            record.msg = redact_text(record.getMessage())
            record.args = ()
        return True


def url_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its user info, and the ``Authorization: Basic`` value that user info stands for (None
    without one). The password is registered as a secret: masked wherever it might still be printed. A URL
    that cannot be split is returned as it is (its user info masked by ``redact_text`` in messages)."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        user, password, host = parts.username, parts.password, parts.netloc.rpartition("@")[2]
    except ValueError:
        return url, None
    if user is None and password is None:
        return url, None
    register_secret(password)
    pair = f"{unquote(user or '')}:{unquote(password or '')}"
    clean = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return clean, "Basic " + base64.b64encode(pair.encode()).decode("ascii")
