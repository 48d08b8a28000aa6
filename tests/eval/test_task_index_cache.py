"""lm-eval's task index of its installed catalogue, kept on disk (lmmbench.evaluation.lmeval.task_index_cache):
the entries a second run loads are the ones lm-eval's own ``TaskIndex.build`` made, a folder given with
``--include-path`` is indexed afresh every time and wins over the catalogue as in lm-eval, and a changed folder
is not served from a stale cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval", reason="needs the eval extra (lm-eval): pip install 'lmmbench[eval]'")

TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {{test: data.jsonl}}
test_split: test
output_type: generate_until
doc_to_text: "{{{{q}}}}"
doc_to_target: "{{{{a}}}}"
metric_list:
  - metric: exact_match
"""


def _folder(root: Path, *names: str) -> Path:
    root.mkdir(parents=True)
    for name in names:
        (root / f"{name}.yaml").write_text(TASK.format(name=name))
    return root


def test_the_catalogue_is_indexed_once_and_a_second_run_gets_lm_evals_own_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lm_eval.tasks as lm_tasks
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks import _index as lm_index

    from lmmbench.evaluation.lmeval.task_index_cache import cached_task_manager

    monkeypatch.setenv("LMMBENCH_HOME", str(tmp_path / "home"))
    own = Path(lm_tasks.__file__).parent.resolve()
    descriptor = lm_index.TaskIndex.__dict__["build"]
    real = lm_index.TaskIndex.build
    built: list[list[Path]] = []

    def counting(paths: Any, *, resolve_includes: bool = True) -> dict[str, Any]:
        built.append([Path(p).resolve() for p in paths])
        return dict(real(paths, resolve_includes=resolve_includes))

    monkeypatch.setattr(lm_index.TaskIndex, "build", staticmethod(counting))
    mine = _folder(tmp_path / "mine", "my_task", "gsm8k")  # gsm8k: the include folder's wins, as in lm-eval
    first = cached_task_manager((str(mine),))
    assert built == [[mine.resolve()], [own]]  # the include folder (by lm-eval's manager), then the catalogue
    assert len(list((tmp_path / "home" / "cache").glob("lmeval_task_index-*.pkl"))) == 1
    built.clear()
    second = cached_task_manager((str(mine),))
    assert built == [[mine.resolve()]]  # the catalogue from the cache; the user's folder afresh
    assert second.all_tasks == first.all_tasks and len(second.all_tasks) > 10_000
    assert second.task_index == first.task_index  # every entry as lm-eval's build made it: kind, file, config
    assert second.task_index["gsm8k"].yaml_path == mine / "gsm8k.yaml"
    assert second.task_index["my_task"].kind == lm_index.Kind.TASK
    assert first.task_index["gsm8k_cot"].yaml_path.is_relative_to(own)
    monkeypatch.undo()
    assert lm_index.TaskIndex.__dict__["build"] is descriptor
    # the name lists lm-eval derives from its index, against lm-eval's own manager on the same folders
    theirs = TaskManager(include_path=[str(mine)])
    assert second.task_index == theirs.task_index
    for names in ("all_tasks", "all_subtasks", "all_groups", "all_tags"):
        assert getattr(second, names) == getattr(theirs, names), names


def test_merging_folder_by_folder_is_lm_evals_merge(tmp_path: Path) -> None:
    from lm_eval.tasks._index import TaskIndex

    from lmmbench.evaluation.lmeval.task_index_cache import merge_entries

    a = _folder(tmp_path / "a", "alpha", "shared")
    b = _folder(tmp_path / "b", "beta", "shared")
    ours = merge_entries([TaskIndex.build([a]), TaskIndex.build([b])])
    theirs = TaskIndex.build([a, b])
    assert ours == theirs and ours["shared"].yaml_path == b / "shared.yaml"


def test_a_changed_folder_has_another_fingerprint(tmp_path: Path) -> None:
    from lmmbench.evaluation.lmeval.task_index_cache import folder_fingerprint

    root = _folder(tmp_path / "t", "one")
    before = folder_fingerprint(root)
    assert folder_fingerprint(root) == before
    (root / "two.yaml").write_text(TASK.format(name="two"))
    added = folder_fingerprint(root)
    assert added != before
    stat = (root / "one.yaml").stat()
    os.utime(root / "one.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # an edit keeps the size
    assert folder_fingerprint(root) != added
    edited = folder_fingerprint(root)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"0")  # lm-eval skips caches; so does the fingerprint
    assert folder_fingerprint(root) == edited
