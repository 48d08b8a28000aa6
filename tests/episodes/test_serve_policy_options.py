"""Every option of ``lmmbench serve-policy`` acts, seen from outside the server: the real command in a subprocess
(stopped by its pid), driven over openpi's protocol with the real ``websockets`` client; or it is refused in one
line (exit 2) where it cannot act."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from serve_policy_process import serve_policy

from lmmbench.cli.main import main


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(*args: str, host: str = "127.0.0.1") -> Iterator[int]:
    """``lmmbench serve-policy ARGS`` in a subprocess: its port once /healthz on ``host`` answers."""
    with serve_policy(*args, host=host) as (_, port):
        yield port


def _observation(episode: int) -> dict[str, Any]:
    """A toy-waypoints observation in openpi's keys, with lmmbench's episode key (task, trial, seed)."""
    import numpy as np

    image = np.zeros((3, 16, 16), np.float32)
    image[1, 9, 12] = 1.0  # one unvisited waypoint
    return {"observation/image": image, "observation/position": np.array([3, 4]),
            "lmmbench/episode": [episode, 0, 11]}


def _ask(url: str, episodes: list[int], start: threading.Barrier | None = None) -> tuple[Any, list[Any]]:
    """(the metadata, each episode's answer): one connection per episode, the requests sent together."""
    from websockets.sync.client import connect

    from lmmbench.episodes.served.codec import packb, unpackb

    answers: list[Any] = [None] * len(episodes)
    metadata: list[Any] = []

    def one(i: int) -> None:
        with connect(url, compression=None, max_size=None, open_timeout=30) as ws:
            metadata.append(unpackb(ws.recv(timeout=30)))
            if start is not None:
                start.wait(timeout=30)
            ws.send(packb(_observation(episodes[i])))
            answers[i] = unpackb(ws.recv(timeout=60))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(episodes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(a is not None for a in answers), "a request got no answer"
    return metadata[0], answers


def test_host_port_max_batch_max_wait_metrics_out_and_threads_act(tmp_path: Path) -> None:
    """Bound to 127.0.0.2 on a port chosen here: 127.0.0.1 on that port is refused. Four requests sent together
    with --max-batch 3 --max-wait-ms 1000: one forward of 3, then the fourth alone after waiting the whole window
    (its queue_ms >= 1000). --metrics-out holds that histogram at exit; --threads 2 is the server's torch threads."""
    host = "127.0.0.2"
    port = _free_port(host)
    metrics = tmp_path / "m" / "metrics.json"
    with _serve("--policy", "toy", "--host", host, "--port", str(port), "--max-batch", "3", "--max-wait-ms",
                "1000", "--metrics-out", str(metrics), "--threads", "2", host=host) as got:
        assert got == port
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        metadata, answers = _ask(f"ws://{host}:{port}", [0, 1, 2, 3], threading.Barrier(4))
    sizes = sorted(a["server_timing"]["batch_size"] for a in answers)
    assert sizes == [1, 3, 3, 3]
    alone = next(a for a in answers if a["server_timing"]["batch_size"] == 1)
    assert alone["server_timing"]["queue_ms"] >= 1000.0 * 0.999
    assert max(a["server_timing"]["queue_ms"] for a in answers if a["server_timing"]["batch_size"] == 3) < 1000.0
    assert json.loads(metrics.read_text())["batch_size_histogram"] == {"1": 1, "3": 1}
    assert metadata["torch_threads"] == 2 and metadata["max_batch"] == 3


def test_seed_env_and_config_file_act(tmp_path: Path) -> None:
    """--seed 5 given in a --config file serves the toy policy with weight seed 5: its actions are those of the
    in-process toy policy built with seed 5 (batch 1 both sides: a float tolerance of 1e-6 for the msgpack round
    trip of float64, which is exact, and thread-count differences) and not those of seed 0. --env gym:Pendulum-v1
    in the same file sets the action width the server announces (1; toy-waypoints: 2), which the driver's
    warm-up action takes."""
    import numpy as np

    from lmmbench.episodes import EpisodeKey
    from lmmbench.episodes.policies.remote import RemotePolicy
    from lmmbench.episodes.policies.toy import ToyWaypointPolicy
    from lmmbench.episodes.protocols import ActItem
    from lmmbench.episodes.served.server import native_observation

    config = tmp_path / "serve.yaml"
    config.write_text("seed: 5\nenv: gym:Pendulum-v1\n", encoding="utf-8")
    with _serve("--policy", "toy", "--port", "0", "--config", str(config)) as port:
        meta5, (ans5,) = _ask(f"ws://127.0.0.1:{port}", [0])
        remote = RemotePolicy(f"ws://127.0.0.1:{port}", timeout_s=30)
        remote.check_reachable()
        width = remote.dummy_action().shape
        remote.close()
    with _serve("--policy", "toy", "--port", "0") as port:
        meta0, (ans0,) = _ask(f"ws://127.0.0.1:{port}", [0])
    assert (meta5["action_dim"], meta0["action_dim"], width) == (1, 2, (1,))
    local = ToyWaypointPolicy(weight_seed=5)
    memory = local.new_episode(EpisodeKey(0, 0), 11)
    item = ActItem(memory, native_observation(_observation(0)), {})
    local.plan([item])
    local.act([item])
    served5, served0 = np.asarray(ans5["actions"]), np.asarray(ans0["actions"])
    want = np.asarray(memory.trace[-1])[: len(served5)]  # the server answers the executed part of the chunk
    assert len(served5) >= 1 and np.allclose(served5, want, atol=1e-6)
    assert not np.allclose(served0, want, atol=1e-3)


@pytest.mark.parametrize("args,says", [
    (["--device", "cuda"], "--device cuda: CUDA is not available"),
    (["--policy", "ws://127.0.0.1:9"], "--policy ws://127.0.0.1:9: serve-policy serves a policy lmmbench runs"),
    (["--policy", "no-such-policy"], "unknown episode_policies 'no-such-policy'"),
])
def test_what_cannot_be_served_is_refused_in_one_line(args: list[str], says: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if args[0] == "--device" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda would serve")
    code = main(["serve-policy", *args, "--port", "0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1
