"""The batching engine on real tiny models: batch invariance, joins/leaves per step, stops, cancels."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from serve_helpers import png_data_uri, wav_base64

from lmmbench.engines import (
    BatchEngine,
    FcfsScheduler,
    GenerationEvent,
    GenerationRequest,
    SamplingParams,
    TransformersEngine,
)


def _greedy(n: int, **kw: Any) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True, **kw)


def _prompts() -> list[str]:
    return [("tell me " * (3 * i + 1)) + f"story {i}" for i in range(16)]


def test_greedy_same_alone_and_in_full_batch_tiny_llm(llm_engine: BatchEngine, tiny_llm: Any) -> None:
    prompts = _prompts()
    alone = [llm_engine.generate(GenerationRequest(prompt=p, sampling=_greedy(12))) for p in prompts]
    batch = llm_engine.generate_many([GenerationRequest(prompt=p, sampling=_greedy(12)) for p in prompts])
    assert len({len(llm_engine.engine.prepare(GenerationRequest(prompt=p)).input_ids) for p in prompts}) == 16
    for a, b in zip(alone, batch, strict=True):
        assert a.token_ids == b.token_ids and len(a.token_ids) == 12
        assert a.text == b.text
    # and the same as transformers' own greedy generate
    ids = torch.tensor([tiny_llm.tokenizer(prompts[5])["input_ids"]])
    ref = tiny_llm.model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, min_new_tokens=12, do_sample=False
    )
    assert ref[0, ids.shape[1] :].tolist() == alone[5].token_ids


def test_greedy_same_alone_and_in_batch_tiny_vl(tiny_vl: Any) -> None:
    engine = BatchEngine(TransformersEngine(tiny_vl), max_batch_size=8)

    def req(i: int) -> GenerationRequest:
        content: list[dict[str, Any]] = [{"type": "text", "text": "describe " * (i + 1)}]
        if i % 2 == 0:
            content.insert(
                0, {"type": "image_url", "image_url": {"url": png_data_uri(28 * (i + 2), 56, (40 * i, 9, 0))}}
            )
        return GenerationRequest(messages=[{"role": "user", "content": content}], sampling=_greedy(8))

    alone = [engine.generate(req(i)) for i in range(6)]
    batch = engine.generate_many([req(i) for i in range(6)])
    assert all(o.error is None for o in alone + batch)
    assert [a.token_ids for a in alone] == [b.token_ids for b in batch]
    assert len({a.metrics.prompt_tokens for a in alone}) == 6
    # image request against transformers' generate
    prepared = engine.engine.prepare(req(2))
    ids = torch.tensor([prepared.input_ids])
    tiny_vl.model.model.rope_deltas = None
    ref = tiny_vl.model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, min_new_tokens=8, do_sample=False,
        **prepared.model_kwargs,
    )  # fmt: skip
    assert ref[0, ids.shape[1] :].tolist() == alone[2].token_ids


def test_requests_join_and_leave_at_every_step(llm_engine: BatchEngine) -> None:
    prompts = _prompts()[:6]
    alone = [
        llm_engine.generate(GenerationRequest(prompt=p, sampling=_greedy(4 + 2 * i))) for i, p in enumerate(prompts)
    ]
    outputs: dict[str, Any] = {}
    sizes = []

    def collect(ev: GenerationEvent) -> None:
        if ev.output is not None:
            outputs[ev.request_id] = ev.output

    ids = []
    for i, p in enumerate(prompts):  # one newcomer per step while earlier ones run and finish
        req = GenerationRequest(prompt=p, sampling=_greedy(4 + 2 * i))
        ids.append(req.request_id)
        llm_engine.submit(req, collect)
        llm_engine.step()
        sizes.append(len(llm_engine.running))
    while llm_engine.has_work():
        llm_engine.step()
        sizes.append(len(llm_engine.running))
    assert max(sizes) >= 3 and sizes[-1] == 0
    assert [outputs[r].token_ids for r in ids] == [a.token_ids for a in alone]
    assert llm_engine.engine.kv.rows == 0  # type: ignore[attr-defined]


def test_newcomer_prefill_stalls_running_requests_at_most_one_step(tiny_llm: Any) -> None:
    engine = BatchEngine(TransformersEngine(tiny_llm), max_batch_size=16, max_prefill_tokens=8)
    tokens: dict[str, int] = {}

    def count(ev: GenerationEvent) -> None:
        tokens[ev.request_id] = ev.completion_tokens

    first = GenerationRequest(prompt="a running request", sampling=_greedy(40))
    engine.submit(first, count)
    engine.step()
    for i in range(6):  # long prompts: the 8-token budget admits one newcomer per step
        engine.submit(GenerationRequest(prompt="many words here " * (4 + i), sampling=_greedy(3)), count)
    for step in range(6):
        before = tokens[first.request_id]
        waiting_before = engine.scheduler.num_waiting()
        engine.step()
        assert tokens[first.request_id] == before + 1  # the running request got its token this step
        assert engine.scheduler.num_waiting() == waiting_before - 1, step  # exactly one newcomer prefilled


def test_stop_strings_cut_text_and_stream_deltas_add_up(llm_engine: BatchEngine) -> None:
    base = llm_engine.generate(GenerationRequest(prompt="stop here please", sampling=_greedy(24)))
    text = base.text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop and stop in text
    deltas: list[str] = []
    out: dict[str, Any] = {}

    def on(ev: GenerationEvent) -> None:
        deltas.append(ev.text_delta)
        if ev.output is not None:
            out["o"] = ev.output

    llm_engine.submit(GenerationRequest(prompt="stop here please", sampling=_greedy(24, stop=[stop])), on)
    while llm_engine.has_work():
        llm_engine.step()
    assert out["o"].finish_reason == "stop"
    assert out["o"].text == text[: text.index(stop)]
    assert "".join(deltas) == out["o"].text


def test_max_tokens_stop_token_ids_and_eos_handling(llm_engine: BatchEngine) -> None:
    base = llm_engine.generate(GenerationRequest(prompt="count", sampling=_greedy(8)))
    assert base.finish_reason == "length" and len(base.token_ids) == 8
    third = base.token_ids[2]
    cut = llm_engine.generate(GenerationRequest(prompt="count", sampling=_greedy(8, stop_token_ids=[third])))
    assert cut.finish_reason == "stop" and cut.token_ids == base.token_ids[: base.token_ids.index(third) + 1]
    # make the first greedy token an end-of-sequence token: it stops unless ignore_eos / min_tokens
    llm_engine.engine.eos_token_ids.append(base.token_ids[0])
    llm_engine.sampler.eos_token_ids.append(base.token_ids[0])  # type: ignore[attr-defined]
    try:
        stopped = llm_engine.generate(GenerationRequest(prompt="count", sampling=SamplingParams(max_tokens=8)))
        assert stopped.finish_reason == "stop" and stopped.token_ids == base.token_ids[:1]
        ignored = llm_engine.generate(GenerationRequest(prompt="count", sampling=_greedy(8)))
        assert ignored.token_ids == base.token_ids
        min_tok = llm_engine.generate(
            GenerationRequest(prompt="count", sampling=SamplingParams(max_tokens=8, min_tokens=3))
        )
        assert len(min_tok.token_ids) >= 3 and min_tok.token_ids[0] != base.token_ids[0]
    finally:
        llm_engine.engine.eos_token_ids.pop()
        llm_engine.sampler.eos_token_ids.pop()  # type: ignore[attr-defined]


def test_seeded_sampling_is_reproducible_alone_and_in_batch(llm_engine: BatchEngine) -> None:
    def req(seed: int) -> GenerationRequest:
        return GenerationRequest(
            prompt="sample me", sampling=_greedy(10, temperature=1.0, top_p=0.95, top_k=50, seed=seed)
        )

    alone = llm_engine.generate(req(7))
    batch = llm_engine.generate_many([req(1), req(7), req(3)])
    assert batch[1].token_ids == alone.token_ids
    assert len({tuple(o.token_ids) for o in batch}) > 1


def test_cancel_frees_the_slot_and_bad_input_does_not_stop_others(llm_engine: BatchEngine) -> None:
    events: list[GenerationEvent] = []
    req = GenerationRequest(prompt="long one", sampling=_greedy(500))
    llm_engine.submit(req, events.append)
    for _ in range(3):
        llm_engine.step()
    assert len(llm_engine.running) == 1
    llm_engine.cancel(req.request_id)
    llm_engine.step()
    assert llm_engine.running == [] and events[-1].output is not None
    assert events[-1].output.finish_reason == "abort"
    outs = llm_engine.generate_many(
        [
            GenerationRequest(prompt="fine", sampling=_greedy(3)),
            GenerationRequest(prompt_token_ids=[10**7], sampling=_greedy(3)),
            GenerationRequest(prompt="too long", sampling=_greedy(10**6)),
        ]
    )
    assert outs[0].finish_reason == "length" and len(outs[0].token_ids) == 3
    assert outs[1].finish_reason == "error" and "token ids" in (outs[1].error or "")
    assert outs[2].finish_reason == "error" and "context" in (outs[2].error or "")


def test_metrics_are_ordered_and_consistent(llm_engine: BatchEngine) -> None:
    outs = llm_engine.generate_many([GenerationRequest(prompt=p, sampling=_greedy(6)) for p in _prompts()[:4]])
    for o in outs:
        m = o.metrics
        assert 0 <= m.queue_ms <= m.ttft_ms <= m.e2e_ms
        assert m.tpot_ms > 0 and m.completion_tokens == 6 and m.prompt_tokens > 0
        assert m.process_peak_memory_bytes > 10 * 2**20


def test_background_thread_serves_concurrent_submissions(llm_engine: BatchEngine) -> None:
    llm_engine.start()
    try:
        outs = llm_engine.generate_many([GenerationRequest(prompt=p, sampling=_greedy(5)) for p in _prompts()[:5]])
    finally:
        llm_engine.stop()
    assert [len(o.token_ids) for o in outs] == [5] * 5


@pytest.mark.parametrize("scheduler_queue", [2])
def test_queue_bound_raises_queue_full(tiny_llm: Any, scheduler_queue: int) -> None:
    from lmmbench.engines import QueueFullError

    engine = BatchEngine(TransformersEngine(tiny_llm), scheduler=FcfsScheduler(1, scheduler_queue))
    for _ in range(scheduler_queue):
        engine.submit(GenerationRequest(prompt="x", sampling=_greedy(2)))
    with pytest.raises(QueueFullError):
        engine.submit(GenerationRequest(prompt="x", sampling=_greedy(2)))


def test_omni_audio_and_image_input() -> None:
    from lmmbench.models import load_model

    engine = BatchEngine(TransformersEngine(load_model("tiny-omni")), max_batch_size=4)
    content = [
        {"type": "input_audio", "input_audio": {"data": wav_base64(0.5), "format": "wav"}},
        {"type": "image_url", "image_url": {"url": png_data_uri(56, 56, (0, 200, 0))}},
        {"type": "text", "text": "what do you hear and see"},
    ]
    audio_req = GenerationRequest(messages=[{"role": "user", "content": content}], sampling=_greedy(4))
    text_req = GenerationRequest(messages=[{"role": "user", "content": "just text"}], sampling=_greedy(4))
    alone = engine.generate(audio_req)
    both = engine.generate_many(
        [
            GenerationRequest(messages=audio_req.messages, sampling=_greedy(4)),
            text_req,
        ]
    )
    assert alone.error is None and len(alone.token_ids) == 4
    assert both[0].token_ids == alone.token_ids
    prepared = engine.engine.prepare(audio_req)
    assert "input_features" in prepared.model_kwargs and "pixel_values" in prepared.model_kwargs


def test_memory_reading_uses_cuda_allocator_on_gpu_mocked_gpu(tiny_llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = TransformersEngine(tiny_llm)
    monkeypatch.setattr(engine, "device", torch.device("cuda", 0))
    seen: list[Any] = []
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: seen.append(dev) or 123456)
    assert engine.memory_bytes() == 123456 and seen == [torch.device("cuda", 0)]


def test_a_registered_engine_replaces_the_transformers_one(tiny_llm: Any) -> None:
    from lmmbench.engines import ENGINES

    made: list[str] = []

    def vendor_engine(model: str, device: str, dtype: str) -> Any:
        made.append(f"{model}/{device}/{dtype}")
        return TransformersEngine(tiny_llm)

    ENGINES.add("test-vendor", vendor_engine)
    engine = BatchEngine.from_model("tiny-llm", engine="test-vendor", max_batch_size=2)
    assert made == ["tiny-llm/cpu/float32"] and "transformers" in ENGINES.names()
    assert len(engine.generate(GenerationRequest(prompt="x", sampling=_greedy(3))).token_ids) == 3


def test_an_engine_failure_fails_its_requests_and_the_loop_goes_on(tiny_llm: Any) -> None:
    class FlakyEngine(TransformersEngine):
        fail_next = True

        def decode(self, states: Any) -> Any:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("injected decode failure")
            return super().decode(states)

    engine = BatchEngine(FlakyEngine(tiny_llm), max_batch_size=4)
    failed = engine.generate_many([GenerationRequest(prompt=f"p{i}", sampling=_greedy(4)) for i in range(3)])
    assert [o.finish_reason for o in failed] == ["error"] * 3
    assert all("injected decode failure" in (o.error or "") for o in failed)
    assert engine.running == [] and engine.engine.kv.rows == 0  # type: ignore[attr-defined]
    ok = engine.generate(GenerationRequest(prompt="after", sampling=_greedy(4)))
    assert ok.finish_reason == "length" and len(ok.token_ids) == 4
