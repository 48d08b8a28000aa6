"""`lmmbench proxy` against malformed clients and wrong start-up input: a client's malformed request is a 400
naming the field (a body past `body_bytes` a 413), logged in one line, and the proxy goes on; the start-up check
wants a models list (an endpoint URL, a 404 and TLS against a plain server are each one line, exit 2); the user
info of `--upstream` is sent as credentials and never printed; a whole JSON answer under an event-stream label
keeps its text."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from misbehaving_upstream import MisbehavingUpstream
from proxy_process import proxy_process
from test_proxy_misbehaving import _ask, _post

from lmmbench.core.net import free_loopback_port


def _raw_post(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url + "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


BAD_BODIES: dict[str, tuple[bytes, int, str]] = {  # name -> (body, status, what the message names)
    "not-json": (b"{not json", 400, "request body: not JSON"),
    "a-list": (b"[1, 2]", 400, "request body: expected a JSON object"),
    "nested-100000": (b"[" * 100_000 + b"]" * 100_000, 400, "request body: nested"),
    "nested-past-bound": (json.dumps({"messages": [[[[[[[["x"]]]]]]]]}).encode(), 400, "limit json_depth"),
    "stream_options-string": (json.dumps({"model": "m", "stream_options": "include_usage"}).encode(), 400,
                              "stream_options: expected an object"),
    "include_usage-string": (json.dumps({"stream_options": {"include_usage": "yes"}}).encode(), 400,
                             "stream_options.include_usage"),
    "stream-string": (json.dumps({"stream": "yes"}).encode(), 400, "stream: expected true or false"),
    "max_tokens-string": (json.dumps({"max_tokens": "5"}).encode(), 400, "max_tokens: expected a whole number"),
    "too-big": (json.dumps({"messages": [{"content": "x" * 300_000}]}).encode(), 413, "limit body_bytes"),
}


def test_malformed_client_requests_are_400_naming_the_field_in_one_log_line_each() -> None:
    env = {"LMMBENCH_LIMIT_BODY_BYTES": "300000", "LMMBENCH_LIMIT_JSON_DEPTH": "6"}
    with MisbehavingUpstream() as up, proxy_process(up.url, env) as (url, proc):
        for name, (body, status, named) in BAD_BODIES.items():
            got, answer = _raw_post(url, body)
            assert got == status and named in answer["error"]["message"], (name, got, answer)
        assert _post(url, _ask("normal", False))[0] == 200  # the proxy goes on
        assert up.posts == 1  # none of the bad ones reached the upstream
    err = proc.stderr.read() if proc.stderr else ""
    lines = [x for x in err.splitlines() if x.startswith("lmmbench proxy: POST")]
    assert len(lines) == len(BAD_BODIES) and "Traceback" not in err, err[-2000:]


def test_a_whole_json_answer_under_an_event_stream_label_keeps_its_text() -> None:
    with MisbehavingUpstream() as up, proxy_process(up.url) as (url, _):
        for stream in (False, True):
            status, body = _post(url, _ask("sse-json", stream))
            answer = json.loads(body)
            assert status == 200 and answer["choices"][0]["message"]["content"] == "whole answer", body[:300]
            assert answer["metrics"]["e2e_ms"] > 0 and answer["metrics"]["ttft_ms"] is None  # its first token unseen


def _proxy_exit(upstream: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lmmbench.cli.main", "proxy", "--upstream", upstream, "--port", "0"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_start_up_wants_a_models_list_and_names_an_endpoint_url_a_404_and_tls_to_a_plain_server() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port404 = srv.server_address[1]
    try:
        with MisbehavingUpstream() as up:
            cases = {f"{up.url}/v1/chat/completions": f"give {up.url}",
                     f"http://127.0.0.1:{port404}": "answered HTTP 404",
                     up.url.replace("http://", "https://"): "use http://"}  # fmt: skip
            for arg, named in cases.items():
                proc = _proxy_exit(arg)
                lines = proc.stderr.strip().splitlines()
                assert proc.returncode == 2 and len(lines) == 1 and named in lines[0], (arg, proc.stderr[-1000:])
                assert "--upstream" in lines[0] and "Traceback" not in proc.stderr
    finally:
        srv.shutdown()
        srv.server_close()


def test_user_info_of_the_upstream_url_is_sent_as_credentials_and_never_printed() -> None:
    proc = _proxy_exit(f"http://user:s3cret@127.0.0.1:{free_loopback_port()}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "s3cret" not in out and "user:" not in out and "nothing answers" in out, out
    with MisbehavingUpstream() as up:
        with proxy_process(up.url.replace("http://", "http://user:s3cret@")) as (url, px):
            assert _post(url, _ask("normal", False))[0] == 200
        printed = (px.stdout.read() if px.stdout else "") + (px.stderr.read() if px.stderr else "")
    basic = "Basic " + base64.b64encode(b"user:s3cret").decode()
    assert up.authorization and set(up.authorization) == {basic}  # the models check and the request
    assert "s3cret" not in printed


@pytest.mark.parametrize("arg", ["http://user:pw@[::1", "ftp://u:p@127.0.0.1:1"])
def test_a_malformed_upstream_with_user_info_never_prints_it(arg: str) -> None:
    proc = _proxy_exit(arg)
    assert proc.returncode == 2 and ":pw@" not in proc.stderr and "u:p@" not in proc.stderr, proc.stderr


def test_perf_sends_the_urls_user_info_as_credentials_and_never_prints_it(tmp_path: Any,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from lmmbench.cli.main import main

    free = free_loopback_port()
    code = main(["perf", "--url", f"http://user:s3cret@127.0.0.1:{free}", "--model", "m", "--num-requests", "1",
                 "--no-plots", "--no-progress", "--out-dir", str(tmp_path / "a")])  # fmt: skip
    out = capsys.readouterr()
    assert code == 2 and "s3cret" not in out.err + out.out and f"127.0.0.1:{free}" in out.err, out.err
    with MisbehavingUpstream() as up:
        code = main(["perf", "--url", up.url.replace("http://", "http://user:s3cret@"), "--model", "m",
                     "--endpoint", "chat", "--num-requests", "2", "--output-tokens", "3", "--no-plots",
                     "--no-progress", "--out-dir", str(tmp_path / "b")])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    assert set(up.authorization) == {"Basic " + base64.b64encode(b"user:s3cret").decode()}
    assert "s3cret" not in out.err + out.out
