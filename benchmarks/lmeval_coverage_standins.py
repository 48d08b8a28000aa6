"""Stand-ins inside benchmarks/lmeval_coverage.py's run for what this machine cannot fetch: metrics that raise
when used, hub metric scripts as empty files, an untrained Punkt splitter, a word-level tokenizer for the tasks
that generate their own documents, and ``Dataset.filter`` keeping a split's synthetic rows. None of them makes or
changes a request; each is described in docs/benchmarks.md."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


class UnavailableMetric:
    """Stands in for a metric that cannot be loaded here; any use of it raises, except the self-test a task module
    runs at its top level while it is imported (``code_eval``: "is code execution enabled?"), which gets no
    result."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if sys._getframe(1).f_code.co_name == "<module>":  # read at a module's top level: an import-time self-test
            return self._import_time_call
        raise RuntimeError(f"metric {self.name} is not available here (coverage run stand-in)")

    def _import_time_call(self, *args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_code.co_name != "<module>":
            raise RuntimeError(f"metric {self.name} is not available here (coverage run stand-in)")
        return None, None


def stub_unavailable_metrics() -> None:
    """Within a coverage run, metrics that cannot be loaded here do not stop a task from being built: a hub metric
    script (``evaluate.load`` offline, a metric script a task fetches with ``hf_hub_download``),
    ``datasets.load_metric`` (gone from datasets 5) and ``transformers.data.metrics`` (gone from transformers 5)
    become stand-ins that raise when used. Metrics score answers; the requests this check compares never use
    them."""
    import types

    import datasets
    import evaluate
    import huggingface_hub

    if not hasattr(datasets, "load_metric"):
        datasets.load_metric = lambda path, *a, **k: UnavailableMetric(f"datasets.load_metric({path!r})")
    _stub_hub_metric_scripts(huggingface_hub)

    real = evaluate.load
    if getattr(real, "_stands_in", False):
        return

    absent: dict[str, UnavailableMetric] = {}

    def load(path: str, *args: Any, **kwargs: Any) -> Any:
        if str(path) in absent:  # looked for once: offline look-ups are slow
            return absent[str(path)]
        try:
            return real(path, *args, **kwargs)
        except (FileNotFoundError, ConnectionError, OSError):
            return absent.setdefault(str(path), UnavailableMetric(str(path)))
        except Exception:  # a metric script fetched from the hub is an empty stand-in file here
            if not str(path).startswith(_PLACEHOLDERS):
                raise
            return absent.setdefault(str(path), UnavailableMetric(str(path)))

    load._stands_in = True  # type: ignore[attr-defined]
    evaluate.load = load
    try:
        import transformers.data.metrics.squad_metrics  # noqa: F401
    except ImportError:
        stub = types.ModuleType("transformers.data.metrics.squad_metrics")
        stub.__getattr__ = _stub_attr  # type: ignore[method-assign]
        parent = types.ModuleType("transformers.data.metrics")
        parent.squad_metrics = stub  # type: ignore[attr-defined]
        sys.modules.update({parent.__name__: parent, stub.__name__: stub})


_PLACEHOLDERS = os.path.join(os.environ.get("TMPDIR", "/tmp"), "lmeval_coverage_hub_placeholders")


def _stub_hub_metric_scripts(hub: Any) -> None:
    """``hf_hub_download`` of a ``.py`` file (a metric script, SCROLLS') that is not in the cache offline gives an
    empty file of that name, which ``evaluate.load`` turns into a stand-in metric."""
    real = hub.hf_hub_download
    if getattr(real, "_stands_in", False):
        return

    def hf_hub_download(repo_id: str, filename: str, *args: Any, **kwargs: Any) -> str:
        try:
            return str(real(repo_id, filename, *args, **kwargs))
        except (ConnectionError, FileNotFoundError, OSError):
            if not filename.endswith(".py"):
                raise
            path = Path(_PLACEHOLDERS) / repo_id.replace("/", "--") / filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            return str(path)

    hf_hub_download._stands_in = True  # type: ignore[attr-defined]
    hub.hf_hub_download = hf_hub_download


def _stub_attr(attr: str) -> Any:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return UnavailableMetric(f"squad_metrics.{attr}")


def untrained_punkt() -> None:
    """Within a coverage run, NLTK's Punkt sentence splitter, when its ``punkt_tab`` data is not here (it is
    downloaded, and nothing but package indexes is reachable), is an untrained one: empty parameter files, so it
    splits at every full stop. RULER splits its haystack essays with it while generating its documents."""
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return
    except LookupError:
        pass
    root = Path(_PLACEHOLDERS) / "nltk_data"
    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True, exist_ok=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (lang / name).touch()
    nltk.data.path.append(str(root))


def keep_synthetic_rows() -> None:
    """Within a coverage run, a ``Dataset.filter`` that would drop every row of a split keeps them instead.

    A task that selects its documents by a value (``doc["category"] == "law"``) rejects a guessed row; the check is
    about the request lmmbench builds for a document the task accepts, so the row stands in for an accepted one."""
    import datasets

    real = datasets.Dataset.filter
    if getattr(real, "_keeps_rows", False):
        return

    def filter(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        return self if len(out) == 0 and len(self) > 0 else out

    filter._keeps_rows = True  # type: ignore[attr-defined]
    datasets.Dataset.filter = filter  # type: ignore[method-assign]


def word_tokenizer() -> Path:
    """A tokenizer directory built offline: one token per whitespace-separated word (an unknown-word token for
    each), loadable by ``AutoTokenizer``. lmmbench's tiny byte-level BPE (1,024 entries) splits RULER's random
    variable names so finely that its 500-token few-shot example never fits and its generator loops for ever; a
    word count is close to what a real tokenizer's vocabulary gives."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(_PLACEHOLDERS) / "word_tokenizer"
    if not (out / "tokenizer.json").exists():
        tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
        fast.save_pretrained(str(out))
    return out
