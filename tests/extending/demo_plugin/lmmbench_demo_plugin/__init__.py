"""One plugin of every lmmbench registry kind, each as small as it can be (docs/extending.md).

Every object here is named by an entry point in ``pyproject.toml``; lmmbench imports this module
the first time it looks a name up in that registry. Nothing here is imported by lmmbench itself.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from lmmbench.core.request_records import PerfRequest
from lmmbench.episodes.protocols import ActItem, EnvSuite, EpisodeKey, EpisodeMemory
from lmmbench.metrics.accuracy import AccuracyMetric
from lmmbench.models.families import ModelFamily
from lmmbench.profiling.families import ModuleLayout
from lmmbench.specs.base import Case, RunOptions, Spec, SpecContext


# lmmbench.stream_clients: how perf sends a request (a class is its own factory: DemoClient(**kwargs))
class DemoClient:
    """A stream client that only remembers how it was built (a real one implements loadgen.protocol.StreamClient)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


# lmmbench.arrivals: the next arrival time (seconds) after arrival ``index`` placed at ``t_s``
def every_other_gap(rng: random.Random, rate: float, burstiness: float, index: int, t_s: float) -> float:
    """Gaps alternate between half and one and a half of the mean gap (mean rate unchanged)."""
    return t_s + (0.5 if index % 2 == 0 else 1.5) / rate


# lmmbench.tasks: the path of a task file (its data path is relative to it)
DEMO_TASK = Path(__file__).with_name("demo_qa.yaml")


# lmmbench.accuracy_metrics: a per-sample score and how scores aggregate
def _exact(sample: Any, opts: Any) -> float:
    refs = sample.get("references")
    refs = [refs] if isinstance(refs, str) else list(refs or [])
    return float(str(sample.get("prediction") or "").strip() in refs)


DEMO_METRIC = AccuracyMetric("demo_exact", ("generate",), _exact, lambda vs: sum(float(v) for v in vs) / len(vs),
                             lmeval_aggregation="mean")  # also usable from lm-eval-format task files


# lmmbench.model_families + lmmbench.hook_layouts + lmmbench.processor_parts: one family, its hook
# layout and its processor builder, tied together by the names the family carries
DEMO_FAMILY = ModelFamily(
    name="demo_vlm", description="a plugin's vision-language family", model_class="AutoModelForCausalLM",
    model_types=("demo_vlm",), vision=True, parts="demo_parts", processor_class="DemoProcessor",
    hook_layout="demo_vlm",
)
DEMO_LAYOUT = ModuleLayout(family="demo_vlm", visual=("vision",), llm=("body",), multimodal=True,
                           class_markers=("DemoVLM",))


def demo_parts(family: ModelFamily, path: Path, tokenizer: Any) -> Any:
    """The processor of a model directory, assembled from its parts."""
    return {"family": family.name, "path": str(path), "tokenizer": tokenizer}


# lmmbench.specs: a named experiment (``lmmbench run demo-sum``); no model needed
class DemoOptions(RunOptions):
    """Options of demo-sum."""

    sizes: list[int] = Field(default_factory=lambda: [1000], description="How many integers to sum.")
    demo_sink: str = Field("demo_sink.jsonl", description="File (in the run folder) the demo_sink run sink writes.")


class DemoSumSpec(Spec):
    """Time ``sum(range(n))`` for each size."""

    name: ClassVar[str] = "demo-sum"
    help: ClassVar[str] = "Demo plugin spec: time sum(range(n))."
    options_model: ClassVar[type[RunOptions]] = DemoOptions
    columns: ClassVar[tuple[str, ...]] = ("n", "sum_ms", "ttft_ms")
    stage_fields: ClassVar[tuple[str, ...]] = ("sum_ms",)

    def setup(self, ctx: SpecContext) -> list[Case]:
        return [Case(id=f"n{n}", params={"n": n}) for n in ctx.options.sizes]

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        n = int(case.params["n"])
        t0 = time.perf_counter_ns()
        total = sum(range(n))
        ms = (time.perf_counter_ns() - t0) / 1e6
        assert total == n * (n - 1) // 2
        return {"n": n, "sum_ms": ms, "ttft_ms": ms}


# lmmbench.engines: (model, device, dtype) -> an engine the batching server drives
def demo_engine(model: str, device: str = "cpu", dtype: str = "float32") -> Any:
    """The transformers engine, under another name (a hardware backend would bring its own)."""
    from lmmbench.engines.engine_registry import ENGINES

    return ENGINES.get("transformers")(model, device, dtype)


# lmmbench.executors: where plan rows run (settings -> an object with run(jobs, done))
class DemoInlineExecutor:
    """Runs every row in this process, and notes each row it ran in the plan folder."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def run(self, jobs: list[Any], done: Any) -> None:
        from lmmbench.executors.jobs import execute_job

        for job in jobs:
            with (Path(self.settings.plan_dir) / "demo_executor.log").open("a", encoding="utf-8") as fh:
                fh.write(job.name + "\n")
            done(execute_job(job))


# lmmbench.perf_dataset: (perf config, n, tokenizer, rng) -> n requests
def demo_dataset(cfg: Any, n: int, tok: Any, rng: random.Random) -> list[PerfRequest]:
    """``n`` one-line chat prompts of a random number of words."""
    out = []
    for i in range(n):
        words = rng.randint(1, 8)
        body = {"messages": [{"role": "user", "content": " ".join(["word"] * words)}], "max_tokens": 4}
        out.append(PerfRequest(i, body, "chat", None, 4))
    return out


# lmmbench.episode_suites + lmmbench.episode_policies: an environment suite and a policy for it
class CountEnv:
    """Reach 3 by adding the action (0 or 1) each step."""

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.total = 0
        return self.total, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.total += int(action)
        done = self.total >= 3
        return self.total, float(done), done, False, {"success": done}

    def close(self) -> None:
        pass


DEMO_SUITE = EnvSuite("demo-suite", lambda task: CountEnv(), None, "demo-policy", 10, "count to three")


class DemoPolicy:
    """Always adds one: a policy is a factory of settings (the class itself) with these methods."""

    name = "demo-policy"
    batched_planning = False

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> Any:
        return 0

    def plan(self, items: Sequence[ActItem]) -> None:
        pass

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        return [[1] for _ in items]

    def needs_plan(self, item: ActItem) -> bool:
        return False


# lmmbench.report_writers: one report file per finished run folder
class DemoReport:
    """Writes demo_report.txt: the files of the run folder."""

    def _write(self, folder: Path) -> Path:
        path = folder / "demo_report.txt"
        path.write_text("\n".join(sorted(p.name for p in folder.iterdir())) + "\n", encoding="utf-8")
        return path

    def spec_run(self, spec_dir: Path, spec_name: str) -> Path:
        return self._write(spec_dir)

    def perf_run(self, run_dir: Path) -> Path:
        return self._write(run_dir)

    def eval_run(self, run_dir: Path) -> Path:
        return self._write(run_dir)


DEMO_REPORT = DemoReport()  # the registry holds a writer object


# lmmbench.run_sinks: (run log, run folder, target) for every finished run whose config names the sink
def demo_sink(run_log: Any, run_dir: Path, target: str) -> None:
    """Append the run's id and headline to ``<run folder>/<target>``."""
    with (run_dir / target).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"run_id": run_log.run_id, "kind": run_log.kind, "headline": run_log.headline}) + "\n")


# lmmbench.prompts: a named, versioned template (the entry's name is name@version)
def _demo_prompt() -> Any:
    from lmmbench.evaluation.prompt_registry import Prompt

    return Prompt("demo-qa", "1", "Question: {{question}}\nAnswer in one word:", "python:lmmbench_demo_plugin")


DEMO_PROMPT = _demo_prompt()


# lmmbench.lmms_tasks: a multimodal benchmark (here ChartQA's scoring under another name and split)
def _demo_chartqa() -> Any:
    import dataclasses

    from lmmbench.evaluation.lmms.image_tasks import IMAGE_TASKS

    chartqa = next(t for t in IMAGE_TASKS if t.name == "chartqa")
    return dataclasses.replace(chartqa, name="demo_chartqa", split="train")


demo_chartqa = _demo_chartqa()
