"""Run in a fresh interpreter with the demo plugin on the path: use each plugin that the CLI cannot
select (or only through a long run) through the library call that consumes it, and print one JSON
object of what came back."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    from lmmbench.loadgen.protocol import make_client

    out["stream_clients"] = make_client("demo-client", base_url="http://127.0.0.1:1").kwargs
    from lmmbench.loadgen.arrivals import arrival_offsets_ns

    out["arrivals"] = arrival_offsets_ns("demo-arrival", 10.0, count=4)
    from lmmbench.metrics.accuracy import get_metric

    metric = get_metric("demo_exact", "generate", "use_plugins")
    scores = [metric.score({"prediction": "4", "references": ["4"]}, {}),
              metric.score({"prediction": "Lyon", "references": ["Paris"]}, {})]  # fmt: skip
    out["accuracy_metrics"] = metric.aggregate(scores)
    from lmmbench.evaluation.lmeval.tasks import lmeval_aggregations

    out["lmeval_aggregation"] = lmeval_aggregations().get("demo_exact")
    out.update(_models(work))
    out.update(_datasets())
    out.update(_episodes())
    out["pending_cli"] = _pending_cli()
    out.update(_eval_registries())
    return out


def _eval_registries() -> dict[str, Any]:
    from lmmbench.evaluation.lmms import get_lmms_task
    from lmmbench.evaluation.prompt_registry import resolve_prompt

    prompt = resolve_prompt("demo-qa@1", Path.cwd())
    task = get_lmms_task("demo_chartqa")
    return {"prompts": [prompt.ref, prompt.text.splitlines()[0]],
            "lmms_tasks": [task.name, task.dataset, task.split, list(task.metrics)]}  # fmt: skip


def _models(work: Path) -> dict[str, Any]:
    from lmmbench.models.families import family_from_config
    from lmmbench.models.processor_build import PROCESSOR_PARTS
    from lmmbench.profiling.families import resolve_modules

    model_dir = work / "demo-model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({"model_type": "demo_vlm"}))
    family = family_from_config(model_dir)
    processor = PROCESSOR_PARTS.get(family.parts)(family, model_dir, "tok")

    class DemoVLMForConditionalGeneration:  # a model object with the layout's module paths
        vision = "the vision tower"
        body = "the text model"
        lm_head = "the head"

    found = resolve_modules(DemoVLMForConditionalGeneration())
    return {"model_families": family.name, "processor_parts": processor["family"],
            "hook_layouts": [found.family, found.visual, found.llm]}  # fmt: skip


def _datasets() -> dict[str, Any]:
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.datasets.perf.registry import PERF_DATASETS

    # PerfConfig.dataset is still a Literal: the builder is called by name, as build_requests would
    cfg = PerfConfig(url="http://127.0.0.1:1", model="m")
    import random

    reqs = PERF_DATASETS.get("demo-dataset")(cfg, 3, None, random.Random(0))
    return {"perf_dataset": [r.payload["messages"][0]["content"] for r in reqs]}


def _episodes() -> dict[str, Any]:
    from lmmbench.episodes.protocols import ActItem, EpisodeKey
    from lmmbench.episodes.suites import PolicySettings, make_policy, resolve_suite

    suite = resolve_suite("demo-suite")
    env = suite.make_env(0)
    policy = make_policy(suite.default_policy, PolicySettings(probe_env=env))
    memory = policy.new_episode(EpisodeKey(0, 0), 0)
    obs, info = env.reset(seed=0)
    steps, done = 0, False
    while not done and steps < suite.default_max_steps:
        for action in policy.act([ActItem(memory, obs, info)])[0]:
            obs, _, done, _, info = env.step(action)
            steps += 1
    return {"episode_suites": suite.name, "episode_policies": [policy.name, steps, info.get("success")]}


def _pending_cli() -> dict[str, bool]:
    """Whether ``perf`` accepts the plugin's arrival and data set by name yet (not while config/perf/options.py
    keeps Literal copies of the registries' names; config.registry_field replaces them)."""
    from pydantic import ValidationError

    from lmmbench.config.perf.options import PerfConfig

    accepted = {}
    for field, name in (("arrival", "demo-arrival"), ("dataset", "demo-dataset")):
        try:
            PerfConfig.model_validate({"url": "http://127.0.0.1:1", field: name})
            accepted[field] = True
        except ValidationError:
            accepted[field] = False
    return accepted


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
