"""`lmmbench proxy` (a real subprocess, `--port 0`) in front of an upstream that misbehaves (a 300 MB line, a tool
call at index 2e9, a string index, a string `function`, a cut stream, broken chunked framing, non-JSON events, a
stalled stream), every bad request streamed and whole, all at once, while another client keeps asking `/health`
and normal completions. The order of events is the proof: every bad request holds the proxy for the upstream's
injected delay before its bad part (ground truth: the upstream notes the instant), and during that window the
other client's `/health` and normal requests are answered; each bad request then ends with its cause (502 naming
it, or an `error` event in a started stream); the proxy's peak memory grows by less than a few times the
`sse_line_bytes` bound of the limits table, although 300 MB are offered; one log line per failed request, no
traceback. The load generator (`perf`) through the same SSE reader survives the same upstream and counts each bad
request as failed with its cause.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from misbehaving_upstream import MB, MisbehavingUpstream
from proxy_process import proxy_process

from lmmbench.cli.main import main

LINE_BYTES = 8 * MB  # sse_line_bytes (and answer_bytes) for the proxy under test: 300 MB is offered
IDLE_S = 3  # sse_idle_s: above the upstream's delay before its bad part, which is silence too
DELAY_S = 1.5
LIMITS_ENV = {"LMMBENCH_LIMIT_SSE_LINE_BYTES": str(LINE_BYTES), "LMMBENCH_LIMIT_ANSWER_BYTES": str(LINE_BYTES),
              "LMMBENCH_LIMIT_SSE_IDLE_S": str(IDLE_S)}  # fmt: skip

# case -> (what the whole answer's 502 names, what the stream's error event names, as regular expressions; None:
# relayed as the upstream sent it)
CASES: dict[str, tuple[str, str | None]] = {
    "huge-line": ("sse_line_bytes", "sse_line_bytes"),
    "tool-index": ("answer_index", None),
    "index-str": (r"choices\[0\]\.index", None),
    "function-str": (r"tool_calls\[0\]\.function", None),
    "cut": ("broke off", "broke off"),
    # aiohttp's C parser reports nothing on an invalid chunk size (its Python parser does): the upstream's silence
    # after it then ends the request on the idle bound, either way with a cause and never waiting forever
    "bad-chunk": ("broke off|sse_idle_s", "broke off|sse_idle_s"),
    "non-json": ("not JSON", None),
    "stall": ("sse_idle_s", "sse_idle_s"),
}


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _ask(case: str, stream: bool) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"case:{case}"}], "stream": stream}


@dataclass
class Done:
    what: str
    sent: float
    answered: float
    status: int
    body: bytes


def _peak_rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, bytes."""
    text = Path(f"/proc/{pid}/status").read_text()
    rss, hwm = (int(re.search(rf"{k}:\s+(\d+) kB", text).group(1)) * 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[union-attr]
    return rss, hwm


def _pinger(url: str, stop: threading.Event, out: list[Done]) -> None:
    while not stop.is_set():
        t = time.monotonic()
        try:
            with urllib.request.urlopen(url + "/health", timeout=60) as resp:
                out.append(Done("health", t, time.monotonic(), resp.status, b""))
        except OSError as exc:
            out.append(Done("health", t, time.monotonic(), getattr(exc, "code", 0), b""))
        t = time.monotonic()
        status, body = _post(url, _ask("normal", False))
        out.append(Done("normal", t, time.monotonic(), status, body))


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_bad_upstream_answers_end_with_their_cause_while_other_clients_are_answered() -> None:
    with MisbehavingUpstream(delay_s=DELAY_S) as up, proxy_process(up.url, LIMITS_ENV) as (url, proc):
        for _ in range(3):  # warm: connections, imports on first use
            assert _post(url, _ask("normal", False))[0] == 200
            assert _post(url, _ask("normal", True))[0] == 200
        base_rss, _ = _peak_rss(proc.pid)
        pings: list[Done] = []
        bad: dict[tuple[str, bool], Done] = {}
        stop = threading.Event()
        pinger = threading.Thread(target=_pinger, args=(url, stop, pings))
        pinger.start()

        def one(case: str, stream: bool) -> None:
            t = time.monotonic()
            status, body = _post(url, _ask(case, stream))
            bad[case, stream] = Done(case, t, time.monotonic(), status, body)

        workers = [threading.Thread(target=one, args=(c, s)) for c in CASES for s in (False, True)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(150)
        stop.set()
        pinger.join(60)
        _, peak = _peak_rss(proc.pid)
        assert proc.poll() is None  # the proxy is still up
    err = proc.stderr.read() if proc.stderr else ""
    assert set(bad) == {(c, s) for c in CASES for s in (False, True)}
    marks = {c: min(t for k, t in up.marks if k == c) for c in CASES}  # each case's first bad part
    assert sorted(k for k, _ in up.marks) == sorted([*CASES, *CASES])  # each bad request got its bad part
    for (case, stream), r in bad.items():
        assert r.answered >= marks[case], case  # the bad part came first (the upstream's own instant)
        for kind in ("health", "normal"):  # answered while this bad request was still open
            assert any(p.what == kind and p.status == 200 and r.sent <= p.sent and p.answered <= r.answered
                       for p in pings), (case, stream, kind)  # fmt: skip
        whole_cause, stream_cause = CASES[case]
        text = r.body.decode("utf-8", "replace")
        if not stream:
            assert r.status == 502 and re.search(whole_cause, json.loads(text)["error"]["message"]), (case, text[:300])
        elif stream_cause is None:  # relayed as the upstream sent it: the client's parser decides
            assert r.status == 200 and text.rstrip().endswith("data: [DONE]") and '"error"' not in text, case
        else:
            last = json.loads(text.strip().splitlines()[-1].removeprefix("data: "))
            assert r.status == 200 and re.search(stream_cause, last["error"]["message"]), (case, text[-300:])
    assert pings and all(p.status == 200 for p in pings)  # no other client failed
    assert up.huge_sent < 300 * MB  # the proxy hung up on the 300 MB line
    assert peak - base_rss < 4 * LINE_BYTES, (peak - base_rss) / MB  # the line bound holds the proxy's memory
    failed = [ln for ln in err.splitlines() if ln.startswith("lmmbench proxy: POST")]
    expected = sum(1 for c, (_, s) in CASES.items() for st in (False, True) if not st or s is not None)
    assert len(failed) == expected and "Traceback" not in err, err[-3000:]


@pytest.mark.timeout(300)
def test_the_load_generator_counts_each_bad_request_failed_with_its_cause(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """perf straight at the same upstream (no proxy): each bad request is one failed record with its cause."""
    for name, value in LIMITS_ENV.items():
        monkeypatch.setenv(name, value)
    expected = {"huge-line": "sse_line_too_long", "cut": "disconnect", "bad-chunk": "malformed_sse",
                "non-json": "malformed_sse", "stall": "stream_idle", "normal": ""}  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"case:{c}"}) + "\n" for c in ["normal", *expected]))
    with MisbehavingUpstream(delay_s=DELAY_S) as up:
        code = main(["perf", "--url", up.url, "--model", "m", "--endpoint", "chat", "--dataset", "jsonl",
                     "--dataset-path", str(rows), "--num-requests", str(len(expected) + 1), "--concurrency", "8",
                     "--output-tokens", "3", "--no-plots", "--no-progress", "--out-dir", str(tmp_path / "out")])
    assert code in (0, 1, 3), code
    records = [json.loads(x) for f in (tmp_path / "out").rglob("records.jsonl") for x in f.read_text().splitlines()]
    got = sorted((r.get("error_kind") or "", r.get("error_message") or "") for r in records)
    kinds = sorted(k for k, _ in got)
    assert kinds == sorted(["", *expected.values()]), got
    assert any("sse_line_bytes" in m for _, m in got) and any("sse_idle_s" in m for _, m in got), got
