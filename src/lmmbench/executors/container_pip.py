"""The host's pip and uv settings for installs in containers (issue 58): a machine whose pip needs an index, a
certificate or a proxy gives the same to a container row's ``requirements`` install.

- The environment: every ``PIP_*`` and ``UV_*`` variable, and the proxy / certificate variables (``HTTP(S)_PROXY``,
  ``NO_PROXY``, ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``), passed as they are.
- pip's configuration files as pip reads them (``/etc/pip.conf``, ``/etc/xdg/pip/pip.conf``, the user's
  ``$XDG_CONFIG_HOME/pip/pip.conf`` and ``~/.pip/pip.conf``, ``PIP_CONFIG_FILE``) and uv's (``/etc/uv/uv.toml``,
  ``$XDG_CONFIG_HOME/uv/uv.toml``), mounted read-only where the container's pip / uv (user root) reads them.
- Every existing host path those values name (a certificate, a ``find-links`` folder, a ``file://`` index: the
  folder above a ``simple/`` one, whose pages link to files beside it), mounted read-only at the same path.
- uv does not read pip's files: an ``index-url``, ``extra-index-url``, ``find-links``, ``cert`` or ``no-index``
  pip's settings give, and no ``UV_*`` variable overrides, reaches uv as ``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL``,
  ``UV_FIND_LINKS``, ``SSL_CERT_FILE`` or ``UV_OFFLINE`` (no index: only the ``find-links`` and the cache).
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path

__all__ = ["install_settings"]

_PASSED = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE",
           "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
_TO_UV = {"index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL", "find-links": "UV_FIND_LINKS",
          "cert": "SSL_CERT_FILE"}


def _config_files(env: dict[str, str]) -> list[tuple[Path, str]]:
    """(host file, where the container's installer reads it) of every pip / uv configuration file here."""
    xdg = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files = [(Path("/etc/pip.conf"), "/etc/pip.conf"), (Path("/etc/xdg/pip/pip.conf"), "/etc/xdg/pip/pip.conf"),
             (xdg / "pip" / "pip.conf", "/root/.config/pip/pip.conf"), (Path.home() / ".pip" / "pip.conf",
                                                                         "/root/.pip/pip.conf"),
             (Path("/etc/uv/uv.toml"), "/etc/uv/uv.toml"), (xdg / "uv" / "uv.toml", "/root/.config/uv/uv.toml")]
    if env.get("PIP_CONFIG_FILE"):
        files.append((Path(env["PIP_CONFIG_FILE"]), env["PIP_CONFIG_FILE"]))
    return [(f, c) for f, c in files if f.is_file()]


def _pip_values(path: Path) -> dict[str, str]:
    """pip's settings in one configuration file (``[global]`` then ``[install]``), key -> value."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return {}
    out: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            out.update({k.replace("_", "-"): v for k, v in parser.items(section)})
    return out


def _paths_named(values: list[str]) -> set[Path]:
    """Existing absolute host paths the values name (plain, or ``file://``), word by word."""
    found: set[Path] = set()
    for value in values:
        for word in value.split():
            index = word.startswith("file://")
            word = word.removeprefix("file://")
            if word.startswith("/") and Path(word).exists():
                path = Path(word).resolve()
                # a local index's pages link to its files beside them (simple/x/ -> ../../files/x.whl)
                found.add(path.parent if index and path.name == "simple" and path.parent != path else path)
    return found


def install_settings(env: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment and the engine's read-only ``-v`` values that give a container install the host's pip and
    uv settings (see the module docstring)."""
    env = dict(os.environ if env is None else env)
    passed = {k: v for k, v in env.items() if k.startswith(("PIP_", "UV_")) or k in _PASSED}
    files = _config_files(env)
    pip: dict[str, str] = {}
    for host, _ in files:
        if host.suffix == ".conf" or str(host) == env.get("PIP_CONFIG_FILE"):
            pip.update(_pip_values(host))
    pip.update({k[4:].lower().replace("_", "-"): v for k, v in env.items() if k.startswith("PIP_")})
    for key, uv in _TO_UV.items():
        if key in pip and uv not in env:
            passed[uv] = " ".join(pip[key].split()) if uv != "UV_FIND_LINKS" else pip[key].split()[0]
    if pip.get("no-index", "").lower() in ("1", "true", "yes", "on") and "UV_OFFLINE" not in env:
        passed["UV_OFFLINE"] = "1"
    mounts = [f"{host}:{ctr}:ro" for host, ctr in files]
    named = _paths_named([*pip.values(), *passed.values()])
    held = {Path(m.split(":")[0]) for m in mounts}
    for path in sorted(named):  # a parent first: a file inside a folder already mounted goes with it
        if not any(path == h or h in path.parents for h in held):
            held.add(path)
            mounts.append(f"{path}:{path}:ro")
    return passed, mounts
