"""`serve` refuses a request whose image / audio yields no media tokens (issue 9): a 400, never a
text-only answer. The processor that ignores media is the tokenizer AutoProcessor returns on a
machine with torchvision, simulated here (torchvision has no CPU build on this machine)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from serve_helpers import free_port, png_data_uri, wav_base64

from lmmbench.engines import GenerationRequest
from lmmbench.engines.inputs import InputError, InputPreparer
from lmmbench.serve import ServeConfig, ServerThread


def _image_message(text: str = "what is this?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": png_data_uri(56, 84, (10, 20, 200))}},
        {"type": "text", "text": text}]}]  # fmt: skip


def test_image_and_audio_without_media_tokens_are_input_errors_simulated_torchvision(tiny_vl: Any) -> None:
    tok = tiny_vl.tokenizer
    ignoring = InputPreparer(tok, processor=tok, has_audio=True)  # a tokenizer standing in for the processor
    with pytest.raises(InputError, match=r"image: processor TokenizersBackend yielded 1 image token\(s\)"):
        ignoring.prepare(GenerationRequest(messages=_image_message()))
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": wav_base64(0.5)}},
                                          {"type": "text", "text": "hi"}]}]

    class _Rate:  # the tokenizer has no feature extractor: only its sampling rate is read before the call
        sampling_rate = 16000

    tok.feature_extractor = _Rate()
    try:
        no_mel = r"audio: processor TokenizersBackend yielded 1 audio token\(s\) and 0 mel frame\(s\)"
        with pytest.raises(InputError, match=no_mel):
            ignoring.prepare(GenerationRequest(messages=audio))
    finally:
        del tok.feature_extractor
    ok = InputPreparer(tok, processor=tiny_vl.processor).prepare(GenerationRequest(messages=_image_message()))
    assert sum(1 for t in ok.input_ids if t == tok.image_token_id) > 1  # the real processor expands it


def test_serve_answers_400_when_an_image_yields_no_tokens_simulated_torchvision(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import lmmbench.models.processor_build as pb

    # the processor slipped past the load-time probe and ignores images, as the GPU machine's did
    monkeypatch.setitem(pb.PARTS_BUILDERS, "qwen_vl", lambda family, path, tok: tok)
    monkeypatch.setattr(pb, "probe_processor", lambda processor, tokenizer, family: {})
    with ServerThread(ServeConfig(model="tiny-vl", port=free_port(), warmup=False)) as srv:
        resp = httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                          json={"model": "tiny-vl", "messages": _image_message(), "max_tokens": 2})
        assert resp.status_code == 400, resp.text
        assert "image: processor TokenizersBackend yielded 1 image token(s)" in resp.json()["error"]["message"]
        text = httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                          json={"model": "tiny-vl", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert text.status_code == 200  # text-only requests are unaffected
