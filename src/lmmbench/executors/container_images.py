"""Images the container executor builds (the orchestration design's ``setup(requirements)`` / ``cleanup()``).

A container row with ``requirements`` runs in an image built once per plan from its ``image`` with them
installed: a container of the image installs them (``uv pip`` when the image has ``uv``, else
``python -m pip``; the constraints file mounted read-only), and is committed as
``localhost/lmmbench-built:<hash of image, requirements and constraints>``, labelled ``lmmbench.built=1``.
Rows with the same image and requirements share it; every attempt of a row runs from it (a retry
installs nothing again); a failed install fails the rows that need it before anything runs. A built image
is removed when the last row that runs from it ends, and at the plan's end (``cleanup``) whatever is left
(rows that never ran: a stop); the images rows name are never removed.
A plan may build at most ``built_images`` images (the limits table): images are kept while the plan runs.
The install gets the host's pip and uv settings (environment, configuration files, the files they name: all
read-only; ``container_pip``).
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from lmmbench.core.errors import UserError

__all__ = ["BUILT_REPO", "CONSTRAINTS_MOUNT", "ImageBuilder", "install_line"]

BUILT_REPO = "localhost/lmmbench-built"
CONSTRAINTS_MOUNT = "/lmmbench/constraints.txt"


def install_line(requirements: list[str], constraints: str = CONSTRAINTS_MOUNT) -> str:
    """The shell line that installs ``requirements`` in a container: ``uv pip`` when ``uv`` is on the image's
    PATH, else ``python -m pip``, both with the constraints file."""
    reqs = shlex.join(requirements)
    uv = f"uv pip install -q --python \"$(command -v python)\" -c {constraints} {reqs}"
    pip = f"python -m pip install -q --disable-pip-version-check -c {constraints} {reqs}"
    return f"if command -v uv >/dev/null 2>&1; then {uv}; else {pip}; fi"


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return " | ".join(lines[-3:]) or f"exit code {proc.returncode}"


class ImageBuilder:
    """Builds the images rows need, once each, and removes them at the end."""

    def __init__(self, engine: list[str]) -> None:
        self.engine = engine
        self.built: dict[str, str] = {}  # key -> tag of an image this plan built
        self.failed: dict[str, str] = {}  # key -> why its build failed
        self.checked: set[str] = set()  # images found here (or pulled)

    @staticmethod
    def key(image: str, requirements: list[str], constraints: Path) -> str:
        """The hash that names the image built from ``image`` with ``requirements`` under ``constraints``."""
        text = "\n".join([image, *requirements, constraints.read_text(encoding="utf-8", errors="replace")])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def build(self, image: str, requirements: list[str], constraints: Path, mounts: list[str]) -> str:
        """The tag of ``image`` with ``requirements`` installed (built on first use); ``UserError`` with the
        install's last lines when it fails. ``mounts`` are the engine's ``-v`` values the install needs."""
        from lmmbench.config.limits import check_limit

        key = self.key(image, requirements, constraints)
        if key in self.built:
            return self.built[key]
        if key in self.failed:
            raise UserError(self.failed[key])
        check_limit("built_images", len(self.built) + 1, "container executor: images this plan builds")
        tag, box = f"{BUILT_REPO}:{key}", f"lmmbench-build-{key}"
        subprocess.run([*self.engine, "rm", "-f", box], capture_output=True, check=False)
        from lmmbench.executors.container_pip import install_settings

        env, pip_mounts = install_settings()  # the host's pip / uv settings, read-only
        volumes = [a for m in [f"{constraints}:{CONSTRAINTS_MOUNT}:ro", *pip_mounts, *mounts] for a in ("-v", m)]
        envs = [a for k, v in sorted(env.items()) for a in ("-e", f"{k}={v}")]
        argv = [*self.engine, "run", "--name", box, "--network", "host", "--entrypoint", "", *volumes, *envs, image,
                "sh", "-c", install_line(requirements)]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                proc = subprocess.run([*self.engine, "commit", "--change", "LABEL lmmbench.built=1", box, tag],
                                      capture_output=True, text=True, check=False)  # fmt: skip
        finally:
            subprocess.run([*self.engine, "rm", "-f", box], capture_output=True, check=False)
        if proc.returncode != 0:
            self.failed[key] = (f"container executor: installing {', '.join(requirements)} in {image} failed: "
                                f"{_tail(proc)}")
            raise UserError(self.failed[key])
        self.built[key] = tag
        return tag

    def adopt(self, build: Callable[[], str]) -> str:
        """The tag ``build`` returns (an image this plan builds, e.g. lmmbench layered on a row's image), counted
        against ``built_images`` first and removed as the images this plan built are."""
        from lmmbench.config.limits import check_limit

        check_limit("built_images", len(self.built) + 1, "container executor: images this plan builds")
        tag = build()
        self.built[f"adopted:{tag}"] = tag
        return tag

    def present(self, image: str) -> None:
        """``image`` is here, or pulled now; ``UserError`` with the engine's last line when neither (a row never
        starts, and is never retried, on an image the engine cannot get)."""
        if image in self.checked:
            return
        proc = subprocess.run([*self.engine, "image", "inspect", image], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            proc = subprocess.run([*self.engine, "pull", image], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise UserError(f"container executor: image {image} is not here and could not be pulled: "
                                f"{_tail(proc)}")
        self.checked.add(image)

    def remove(self, tag: str) -> str | None:
        """Remove the built image ``tag`` now (its last row ended); the line saying why it could not be, or None."""
        key = next((k for k, t in self.built.items() if t == tag), None)
        if key is None:
            return None
        del self.built[key]
        proc = subprocess.run([*self.engine, "rmi", "-f", tag], capture_output=True, text=True, check=False)
        return None if proc.returncode == 0 else f"container executor: could not remove the built image {tag}: " \
                                                 f"{_tail(proc)}"  # fmt: skip

    def cleanup(self) -> list[str]:
        """Remove every image this plan built that is still here; returns the lines of those that could not be."""
        return [line for tag in list(self.built.values()) if (line := self.remove(tag)) is not None]
