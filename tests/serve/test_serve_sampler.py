"""Sampler filters, EOS suppression and stop-string hold-back, on small injected inputs."""

from __future__ import annotations

import torch

from lmmbench.engines import GenerationRequest, PreparedInput, RequestState, SamplingParams, TorchSampler
from lmmbench.engines.detokenizer import held_back_chars
from lmmbench.engines.sampler import filter_logits


def _state(**kw: object) -> RequestState:
    req = GenerationRequest(prompt_token_ids=[1], sampling=SamplingParams(**kw))  # type: ignore[arg-type]
    return RequestState(request=req, prepared=PreparedInput([1]))


def test_top_k_and_top_p_keep_exactly_the_expected_tokens() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept_k = torch.isfinite(filter_logits(logits, SamplingParams(temperature=1.0, top_k=2)))
    assert kept_k.tolist() == [True, True, False, False]
    kept_p = torch.isfinite(filter_logits(logits, SamplingParams(temperature=1.0, top_p=0.75)))
    assert kept_p.tolist() == [True, True, False, False]  # 0.5 < 0.75 so the second is needed, not the third
    kept_all = torch.isfinite(filter_logits(logits, SamplingParams(temperature=1.0, top_p=0.96)))
    assert kept_all.tolist() == [True, True, True, True]


def test_sampling_follows_the_distribution_and_seed() -> None:
    sampler = TorchSampler(eos_token_ids=[])
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    draws = [sampler.sample([_state(temperature=1.0, seed=s)], logits)[0] for s in range(400)]
    share = draws.count(0) / len(draws)
    assert 0.6 < share < 0.8
    again = [sampler.sample([_state(temperature=1.0, seed=s)], logits)[0] for s in range(400)]
    assert again == draws


def test_greedy_and_min_tokens_suppress_eos() -> None:
    sampler = TorchSampler(eos_token_ids=[0])
    logits = torch.tensor([[5.0, 1.0, 2.0], [5.0, 1.0, 2.0]])
    assert sampler.sample([_state(), _state(min_tokens=2)], logits) == [0, 2]
    ignoring = _state(min_tokens=2, ignore_eos=True)
    assert sampler.sample([ignoring], logits[:1]) == [0]


def test_stop_string_prefixes_are_held_back() -> None:
    assert held_back_chars("hello wor", ["world"]) == 3
    assert held_back_chars("hello", ["xyz"]) == 0
    assert held_back_chars("abc", ["c!", "bc?"]) == 2


def test_sampling_params_validation() -> None:
    for bad in (dict(max_tokens=0), dict(temperature=-1.0), dict(top_p=0.0), dict(min_tokens=5, max_tokens=2)):
        try:
            SamplingParams(**bad).validate()  # type: ignore[arg-type]
        except ValueError:
            continue
        raise AssertionError(f"{bad} was accepted")


def test_scheduler_budget_and_prefill_wait() -> None:
    from lmmbench.engines import FcfsScheduler

    sched = FcfsScheduler(max_batch_size=4, max_queue=8, max_prefill_tokens=4096, prefill_wait_steps=3)
    a = _state()
    sched.add(a)
    assert sched.schedule(num_running=0) == [a]  # nothing running: no reason to wait
    b = _state()
    sched.add(b)
    assert sched.schedule(num_running=1) == [] and sched.schedule(num_running=1) == []
    assert sched.schedule(num_running=1) == [b]  # waited 3 steps
    more = [_state() for _ in range(3)]
    for s in more:
        sched.add(s)
    assert sched.schedule(num_running=1) == more  # enough to fill the free slots: admitted at once
    budget = FcfsScheduler(max_batch_size=8, max_queue=8, max_prefill_tokens=1)
    two = [_state(), _state()]
    for s in two:
        budget.add(s)
    assert budget.schedule(0) == two[:1] and budget.schedule(1) == two[1:]  # first always, then budget
