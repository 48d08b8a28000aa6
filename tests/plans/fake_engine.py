"""A fake container engine (no Docker daemon runs here): answers `info`, and runs `run` commands
on the host with the container paths of `-v` / `-w` / `-e` mapped back to host paths. It records
every argv in $FAKE_ENGINE_LOG. With FAKE_ENGINE_DOWN=1 `info` fails like an unreachable daemon. An install
container (`run --name lmmbench-build-...`) runs nothing (it would install into the host's Python): it succeeds, or
fails with FAKE_ENGINE_INSTALL_FAIL=1; `commit`, `rm`, `rmi`, `image inspect` succeed. With FAKE_ENGINE_RUN_EXIT=N a
row's `run` fails as the engine itself does (exit N, one line on stderr). The image probe (`run --label
lmmbench.probe=1`) finds python 3.11.2 and lmmbench 0.1.0 in every image but those named bare* (no lmmbench) and
nopython* (no python)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    with open(os.environ["FAKE_ENGINE_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(argv) + "\n")
    if argv[:1] == ["info"]:
        if os.environ.get("FAKE_ENGINE_DOWN"):
            print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", file=sys.stderr)
            return 1
        return 0
    if argv[0] in ("commit", "rm", "rmi", "image"):
        return 0
    assert argv[0] == "run", argv
    if "--name" in argv and argv[argv.index("--name") + 1].startswith("lmmbench-build-"):
        if os.environ.get("FAKE_ENGINE_INSTALL_FAIL"):
            print("ERROR: No matching distribution found for pkg-a>=1", file=sys.stderr)
            return 1
        return 0
    if "lmmbench.probe=1" in argv:  # the image's python and lmmbench: both there, unless FAKE_ENGINE_BARE=1
        image = argv[argv.index("sh") - 1]
        print("none" if image.startswith("nopython") else f"3.11.2 {'none' if image.startswith('bare') else '0.1.0'}")
        return 0
    if os.environ.get("FAKE_ENGINE_RUN_EXIT"):  # the engine's own failure (125 / 126 / 127), nothing run
        print(f"Error: fake engine failure {os.environ['FAKE_ENGINE_RUN_EXIT']}", file=sys.stderr)
        return int(os.environ["FAKE_ENGINE_RUN_EXIT"])
    mounts: dict[str, str] = {}
    env: dict[str, str] = {}
    workdir = None
    i = 1
    while argv[i].startswith("-"):
        flag = argv[i]
        if flag in ("--rm",):
            i += 1
            continue
        value = argv[i + 1]
        if flag == "-v":
            host, ctr = value.split(":")[:2]
            mounts[ctr] = host
        elif flag == "-e":
            k, v = value.split("=", 1)
            env[k] = v
        elif flag == "-w":
            workdir = value
        i += 2
    image, cmd = argv[i], argv[i + 1:]

    def host(text: str) -> str:
        for ctr, h in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(ctr, h)
        return text

    assert image, "no image"
    cmd = [host(c).replace("python -m", f"{sys.executable} -m") for c in cmd]
    proc_env = {**os.environ, **{k: host(v) for k, v in env.items()}}
    return subprocess.call(cmd, env=proc_env, cwd=host(workdir) if workdir else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
