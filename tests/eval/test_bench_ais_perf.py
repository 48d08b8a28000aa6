"""`lmmbench bench ais --mode perf | perf_viz`: AISBench's perf pipeline against the shipped test server, whose
injected TTFT and inter-token gap are the ground truth.

The names asserted here (folders, files, CSV header, metric and common-metric names, units) are written out from
AISBench's source as read (AISBench/benchmark, 2026-08), never from lmmbench's output:
- ``ais_bench/benchmark/calculators/base_perf_metric_calculator.py``: ``DEFAULT_STATS``, ``_export_to_csv``'s
  header, ``convert_result``'s metric names, ``_calc_common_metrics``' names, the ``" ms"`` / ``" token/s"`` /
  ``" req/s"`` units;
- ``ais_bench/benchmark/summarizers/default_perf.py``: ``performances/<model>/<data set>{.csv,.json,
  _details.jsonl}``, ``db_data/<db_name>``, ttft / itl / tpot from ``time_points``;
- ``ais_bench/benchmark/openicl/icl_inferencer/output_handler/base_handler.py`` and ``models/output.py``: the
  details line's fields.
"""

from __future__ import annotations

import csv
import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver
from lmmbench.testing.fixtures import server_stats

TTFT_MS, ITL_MS, N_OUT, N_IN = 30.0, 10.0, 5, 4

#: base_perf_metric_calculator.py: DEFAULT_STATS, then "N"; the CSV starts with "Performance Parameters", "Stage"
CSV_HEADER = ["Performance Parameters", "Stage", "Average", "Min", "Max", "Median", "P75", "P90", "P99", "N"]
#: convert_result's mapping values in order, then PrefillTokenThroughput
METRICS = ["E2EL", "TTFT", "TPOT", "ITL", "InputTokens", "OutputTokens", "OutputTokenThroughput",
           "PrefillTokenThroughput"]  # fmt: skip
#: _calc_common_metrics' common_metric_names
COMMON = ["Benchmark Duration", "Total Requests", "Failed Requests", "Success Requests", "Concurrency",
          "Max Concurrency", "Request Throughput", "Total Input Tokens", "Total Generated Tokens",
          "Input Token Throughput", "Output Token Throughput", "Total Token Throughput"]  # fmt: skip
#: base_handler.run_cache_consumer (data_abbr, id), RequestOutput.__dict__ without content / reasoning_content /
#: perf_mode (+ data_id set by GenInferencer.do_request, prediction by get_metrics), then db_name
DETAILS_KEYS = ["data_abbr", "id", "success", "error_info", "time_points", "input_tokens", "output_tokens",
                "extra_perf_data", "extra_details_data", "input", "uuid", "turn_id", "data_id", "prediction",
                "db_name"]  # fmt: skip

MODEL = '''from ais_bench.benchmark.models import {cls}

models = [
    dict(attr="service", type={cls}, abbr="{abbr}", path="{path}", model="", stream={stream}, request_rate={rate},
         retry=2, api_key="", host_ip="127.0.0.1", host_port={port}, url="", max_out_len={max_out},
         batch_size={batch}, trust_remote_code=False, generation_kwargs=dict(temperature=0.5))
]
'''

SYNTHETIC = '''from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
from ais_bench.benchmark.datasets import SyntheticDataset, MATHEvaluator, math_postprocess_v2
from mmengine.config import read_base

with read_base():
    from .synthetic_config import synthetic_config

synthetic_reader_cfg = dict(input_columns=['question', 'max_out_len'], output_column='answer')
synthetic_infer_cfg = dict(prompt_template=dict(type=PromptTemplate, template="{question}"),
                           retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer))
synthetic_eval_cfg = dict(evaluator=dict(type=MATHEvaluator, version='v2'),
                          pred_postprocessor=dict(type=math_postprocess_v2))
synthetic_datasets = [dict(abbr='synthetic', type=SyntheticDataset, config=synthetic_config,
                           reader_cfg=synthetic_reader_cfg, infer_cfg=synthetic_infer_cfg,
                           eval_cfg=synthetic_eval_cfg)]
'''

GSM8K_PERF = '''from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
from ais_bench.benchmark.datasets import GSM8KDataset, gsm8k_postprocess, gsm8k_dataset_postprocess, Gsm8kEvaluator
gsm8k_reader_cfg = dict(input_columns=['question'], output_column='answer')
gsm8k_infer_cfg = dict(prompt_template=dict(type=PromptTemplate, template="{{question}}"),
                       retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer))
gsm8k_eval_cfg = dict(evaluator=dict(type=Gsm8kEvaluator), pred_role='BOT',
                      pred_postprocessor=dict(type=gsm8k_postprocess),
                      dataset_postprocessor=dict(type=gsm8k_dataset_postprocess))
gsm8k_datasets = [dict(abbr='gsm8k', type=GSM8KDataset, path='{path}', reader_cfg=gsm8k_reader_cfg,
                       infer_cfg=gsm8k_infer_cfg, eval_cfg=gsm8k_eval_cfg)]
'''


def _synthetic_config(count: int, n_in: int, n_out: int, kind: str = "string") -> str:
    """``ais_bench/datasets/synthetic/synthetic_config.py``'s shape, with fixed lengths (MinValue == MaxValue)."""
    return (f"synthetic_config = {{'Type': {kind!r}, 'RequestCount': {count}, 'TrustRemoteCode': False, "
            f"'StringConfig': {{'Input': {{'Method': 'uniform', 'Params': {{'MinValue': {n_in}, 'MaxValue': {n_in}}}}},"
            f" 'Output': {{'Method': 'gaussian', 'Params': {{'Mean': {n_out}, 'Var': 0, 'MinValue': {n_out}, "
            f"'MaxValue': {n_out}}}}}}}, 'TokenIdConfig': {{'RequestSize': 10, 'PrefixLen': 0}}}}\n")  # fmt: skip


def _configs(root: Path, port: int, count: int = 8) -> Path:
    cfg = root / "configs"
    (cfg / "datasets" / "synthetic").mkdir(parents=True)
    (cfg / "models" / "vllm_api").mkdir(parents=True)
    (cfg / "datasets" / "synthetic" / "synthetic_gen.py").write_text(SYNTHETIC)
    (cfg / "datasets" / "synthetic" / "synthetic_config.py").write_text(_synthetic_config(count, N_IN, N_OUT))
    data = root / "gsm8k"
    data.mkdir()
    (data / "test.jsonl").write_text("".join(json.dumps({"question": f"q {i} w w", "answer": "#### 1"}) + "\n"
                                             for i in range(6)))  # fmt: skip
    (cfg / "datasets" / "gsm8k_gen_0_shot_cot_str_perf.py").write_text(GSM8K_PERF.format(path=data))
    for name, cls, stream, rate, batch, max_out in (("stream_chat", "VLLMCustomAPIChat", True, 0, 2, 64),
                                                    ("general_paced", "VLLMCustomAPI", False, 20, 6, 4),
                                                    ("general_closed", "VLLMCustomAPI", False, 0, 6, 4)):
        (cfg / "models" / "vllm_api" / f"{name}.py").write_text(MODEL.format(
            cls=cls, abbr=name, stream=stream, rate=rate, port=port, batch=batch, max_out=max_out,
            path=root if name == "stream_chat" else ""))
    return cfg


def _ais(root: Path, cfg: Path, *args: str) -> int:
    return main(["bench", "ais", "--config-dir", str(cfg), "--work-dir", str(root / "outputs"), *args])


def _ms(cell: str) -> float:
    assert cell.endswith(" ms"), cell
    return float(cell[:-3])


def _csv(path: Path) -> dict[str, dict[str, str]]:
    rows = list(csv.reader(path.open()))
    assert rows[0] == CSV_HEADER
    return {r[0]: dict(zip(rows[0], r, strict=True)) for r in rows[1:]}


def _time_points(perf: Path, line: dict[str, Any]) -> list[float]:
    """The request's time points from AISBench's numpy store (``db_utils.py``: ``np.save`` bytes)."""
    import io

    import numpy as np

    conn = sqlite3.connect(perf / "db_data" / line["db_name"])
    blob = conn.execute("SELECT arr_blob FROM numpy_store WHERE id = ?", (line["time_points"]["__db_ref__"],))
    points = [float(x) for x in np.load(io.BytesIO(blob.fetchone()[0]), allow_pickle=False)]
    conn.close()
    return points


def _gaps_ms(perf: Path) -> list[list[float]]:
    """Per request (details order), the gaps between its time points in ms (the first is its TTFT)."""
    lines = [json.loads(x) for x in (perf / "synthetic_details.jsonl").read_text().splitlines()]
    return [[(b - a) * 1e3 for a, b in itertools.pairwise(p)] for p in (_time_points(perf, x) for x in lines)]


def _perf_run(tmp: Path, cfg: Path, url: str) -> Path:
    """One ``--mode perf`` run of 8 requests; the folder of its performance files."""
    before = server_stats(url)["requests"]
    assert _ais(tmp, cfg, "--models", "stream_chat", "--datasets", "synthetic_gen", "--mode", "perf") == 0
    assert server_stats(url)["requests"] - before == 8 + 1  # the load and the default warm-up; no probe
    return next((tmp / "outputs").iterdir()) / "performances" / "stream_chat"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _ttft_floor_ms(tmp: Path) -> float:
    """The median TTFT of the same perf run against a test server that injects no delay: this machine's loopback +
    HTTP + SSE round trip and the client's own work (0.5-1.5 ms on the shared CI machines), measured in the same
    test rather than assumed. The injected schedule sits on top of it."""
    server = TestServerConfig(port=free_loopback_port(), ttft_ms=0, itl_ms=0, role_chunk=False)
    with running_testserver(server) as url:
        perf = _perf_run(tmp, _configs(tmp, server.port), url)
    return _median([g[0] for g in _gaps_ms(perf)])


@pytest.mark.serial
def test_perf_on_synthetic_data_matches_the_injected_ttft_and_itl_and_perf_viz_resummarises(tmp_path: Path) -> None:
    server = TestServerConfig(port=free_loopback_port(), ttft_ms=TTFT_MS, itl_ms=ITL_MS, role_chunk=False)
    floor = _ttft_floor_ms(tmp_path / "floor")
    assert floor <= 5.0, f"the zero-delay round trip alone takes {floor:.3f} ms"  # the client adds little itself
    with running_testserver(server) as url:
        cfg = _configs(tmp_path, server.port)
        perf = _perf_run(tmp_path, cfg, url)
        lines = [json.loads(x) for x in (perf / "synthetic_details.jsonl").read_text().splitlines()]
        assert len(lines) == 8 and all(list(line) == DETAILS_KEYS and line["success"] for line in lines)
        assert sorted(line["id"] for line in lines) == list(range(8))
        assert not (perf / "tmp").exists()  # the journal kept while the load ran is gone, as AISBench's tmp/
        assert lines[0]["input"] == [{"role": "user", "content": " ".join(["A"] * N_IN)}]
        assert {(line["input_tokens"], line["output_tokens"]) for line in lines} == {(N_IN, N_OUT)}
        points = [_time_points(perf, line) for line in lines]
        # the send, N_OUT content chunks, the finish chunk and the usage chunk ([DONE] has no time point)
        assert {len(p) for p in points} == {1 + N_OUT + 2}
        # One run, no retry: a descheduled server or client moves single gaps by milliseconds on a shared machine, so
        # the schedule is checked on medians (robust to a few such requests) and AISBench's statistics are checked
        # against the time points they summarise. Each gap carries the jitter of the server's timer and of the
        # client at both of its ends: 2 ms; the TTFT is compared on top of the zero-delay floor measured above.
        gaps = _gaps_ms(perf)
        ttfts = [g[0] for g in gaps]
        assert min(ttfts) >= TTFT_MS - 0.1, ttfts  # never below the injected value (the server's timer is exact)
        median = [_median(list(col)) for col in zip(*gaps, strict=True)]
        assert median == pytest.approx([TTFT_MS + floor] + [ITL_MS] * (N_OUT - 1) + [0.0, 0.0], abs=2.0), floor
        spans = [(p[0], p[-1]) for p in points]
        assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= 2  # batch_size = 2 in flight
        rows = _csv(perf / "synthetic.csv")
        assert list(rows) == METRICS and {r["Stage"] for r in rows.values()} == {"total"}
        # AISBench's statistics of the time points (seconds rounded to 4 decimals: 0.1 ms, so 0.05 ms either way)
        assert _ms(rows["TTFT"]["Median"]) == pytest.approx(_median(ttfts), abs=0.051)
        assert _ms(rows["TTFT"]["Average"]) == pytest.approx(sum(ttfts) / len(ttfts), abs=0.051)
        assert _ms(rows["TTFT"]["Min"]) == pytest.approx(min(ttfts), abs=0.051)
        e2els = [sum(g) for g in gaps]  # latency: the last time point - the first
        assert _ms(rows["E2EL"]["Median"]) == pytest.approx(_median(e2els), abs=0.051)
        # ... and the injected schedule, 1 ms on top of the floor
        assert _ms(rows["TTFT"]["Median"]) - floor == pytest.approx(TTFT_MS, abs=1.0), floor
        assert _ms(rows["ITL"]["Median"]) == pytest.approx(ITL_MS, abs=1.0)
        assert _ms(rows["TPOT"]["Median"]) == pytest.approx(ITL_MS, abs=1.0)  # (E2EL - TTFT) / (out - 1)
        pooled = [x for g in gaps for x in g[1:]]  # AISBench pools every gap of every request
        assert _ms(rows["ITL"]["Average"]) == pytest.approx(sum(pooled) / len(pooled), abs=0.051)
        # E2EL spans the send and the last chunk: the client's delay on both ends, so twice the 1 ms
        assert _ms(rows["E2EL"]["Median"]) - floor == pytest.approx(TTFT_MS + (N_OUT - 1) * ITL_MS, abs=2.0)
        assert rows["InputTokens"]["Average"] == str(float(N_IN)) and rows["TTFT"]["N"] == "8"
        assert rows["OutputTokenThroughput"]["Average"].endswith(" token/s")
        common = json.loads((perf / "synthetic.json").read_text())
        assert list(common) == COMMON and all(list(v) == ["total"] for v in common.values())
        assert {k: common[k]["total"] for k in ("Total Requests", "Success Requests", "Failed Requests",
                                                  "Max Concurrency", "Total Input Tokens", "Total Generated Tokens")} \
            == {"Total Requests": 8, "Success Requests": 8, "Failed Requests": 0, "Max Concurrency": 2,
                "Total Input Tokens": 8 * N_IN, "Total Generated Tokens": 8 * N_OUT}  # fmt: skip
        assert common["Request Throughput"]["total"].endswith(" req/s")
        before = (perf / "synthetic.csv").read_text(), (perf / "synthetic.json").read_text()
        (perf / "synthetic.csv").unlink()
        (perf / "synthetic.json").unlink()
        sent = server_stats(url)["requests"]
        assert main(["bench", "ais", "--config-dir", str(cfg), "--work-dir", str(perf.parents[2]), "--models",
                     "stream_chat", "--datasets", "synthetic_gen", "--mode", "perf_viz", "--reuse"]) == 0  # fmt: skip
        assert server_stats(url)["requests"] == sent  # re-summarised from the files: nothing sent
        assert ((perf / "synthetic.csv").read_text(), (perf / "synthetic.json").read_text()) == before


@pytest.mark.serial
def test_perf_unstreamed_request_rate_num_prompts_and_a_stats_list(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    server = TestServerConfig(port=free_loopback_port(), ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    with running_testserver(server) as url:
        cfg = _configs(tmp_path, server.port)
        (cfg / "summarizers" / "perf").mkdir(parents=True)
        (cfg / "summarizers" / "perf" / "default_perf.py").write_text(
            "from ais_bench.benchmark.summarizers import DefaultPerfSummarizer\n"
            "from ais_bench.benchmark.calculators import DefaultPerfMetricCalculator\n"
            "summarizer = dict(attr='performance', type=DefaultPerfSummarizer, calculator=dict(\n"
            "    type=DefaultPerfMetricCalculator, stats_list=['Average', 'P50', 'Bogus']))\n")  # fmt: skip
        starts = {}
        for model in ("general_paced", "general_closed"):
            assert _ais(tmp_path / model, cfg, "--models", model, "--datasets", "gsm8k_gen_0_shot_cot_str_perf",
                        "--num-prompts", "5", "--num-warmups", "0", "--mode", "perf", "--summarizer",
                        "default_perf") == 0  # fmt: skip
            perf = next((tmp_path / model / "outputs").iterdir()) / "performances" / model
            rows = list(csv.reader((perf / "gsm8k.csv").open()))
            assert rows[0] == ["Performance Parameters", "Stage", "Average", "P50", "N"]  # unknown names dropped
            # unstreamed: TTFT, TPOT (and the prefill rate) are 0 and dropped; two points leave no ITL
            assert [r[0] for r in rows[1:]] == ["E2EL", "InputTokens", "OutputTokens", "OutputTokenThroughput"]
            assert _ms(rows[1][3]) >= TTFT_MS + 3 * ITL_MS - 1.0  # max_out_len 4: the server answers after that
            lines = [json.loads(x) for x in (perf / "gsm8k_details.jsonl").read_text().splitlines()]
            assert sorted(line["input"] for line in lines) == [f"q {i} w w" for i in range(5)]
            starts[model] = sorted(_time_points(perf, line)[0] for line in lines)
        assert server_stats(url)["requests"] == 10
        assert starts["general_closed"][-1] - starts["general_closed"][0] < 0.02  # 6 slots: all sent at once
        assert starts["general_paced"][-1] - starts["general_paced"][0] > 0.02  # Poisson at 20 req/s
        assert "Performance Results of task [general_closed/gsm8k]" in capsys.readouterr().out


#: four requests (send, three data events), hand-made: TTFT 10/20/30/40 ms, every later gap 10 ms, 4 prompt and 3
#: output tokens each; and one failed request
HAND_POINTS = [[100.000, 100.010, 100.020, 100.030], [100.005, 100.025, 100.035, 100.045],
               [100.010, 100.040, 100.050, 100.060], [100.015, 100.055, 100.065, 100.075]]  # fmt: skip


def _write_aisbench_folder(perf: Path) -> None:
    """``performances/<model>/`` as AISBench's base_handler / db_utils write it (np.save blobs in ``numpy_store``)."""
    import io

    import numpy as np

    (perf / "db_data").mkdir(parents=True)
    conn = sqlite3.connect(perf / "db_data" / "0a1b2c3d.db")
    conn.execute("CREATE TABLE IF NOT EXISTS numpy_store (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                 "arr_blob BLOB NOT NULL)")
    lines = []
    for i, pts in enumerate([*HAND_POINTS, [100.02]]):
        buf = io.BytesIO()
        np.save(buf, np.array(pts, dtype=np.float64), allow_pickle=False)
        rid = conn.execute("INSERT INTO numpy_store (arr_blob) VALUES (?)", (buf.getvalue(),)).lastrowid
        ok = i < 4
        lines.append({"data_abbr": "synthetic", "id": i, "success": ok, "error_info": "" if ok else "Bad Gateway",
                      "time_points": {"__db_ref__": rid}, "input_tokens": 4 if ok else 0,
                      "output_tokens": 3 if ok else 0, "extra_perf_data": {}, "extra_details_data": {},
                      "input": [{"role": "user", "content": "A A A A"}], "uuid": f"u{i}", "turn_id": 0,
                      "prediction": "a b c" if ok else "", "db_name": "0a1b2c3d.db"})  # fmt: skip
    conn.commit()
    conn.close()
    (perf / "synthetic_details.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_perf_viz_over_an_aisbench_folder_computes_aisbenchs_metrics(tmp_path: Path) -> None:
    """Ground truth by hand from AISBench's definitions (np.percentile, linear; 4-decimal rounding in seconds)."""
    cfg = _configs(tmp_path, 9)
    perf = tmp_path / "outputs" / "20260101_000000" / "performances" / "stream_chat"
    _write_aisbench_folder(perf)
    assert _ais(tmp_path, cfg, "--models", "stream_chat", "--datasets", "synthetic_gen", "--mode", "perf",
                "--reuse", "20260101_000000") == 0  # AISBench: perf with --reuse is perf_viz  # fmt: skip
    rows = _csv(perf / "synthetic.csv")
    cells = {m: [rows[m][k] for k in CSV_HEADER[2:]] for m in rows}
    assert cells["TTFT"] == ["25.0 ms", "10.0 ms", "40.0 ms", "25.0 ms", "32.5 ms", "37.0 ms", "39.7 ms", "4"]
    assert cells["E2EL"] == ["45.0 ms", "30.0 ms", "60.0 ms", "45.0 ms", "52.5 ms", "57.0 ms", "59.7 ms", "4"]
    assert cells["ITL"] == ["10.0 ms"] * 7 + ["4"] and cells["TPOT"] == ["10.0 ms"] * 7 + ["4"]
    assert cells["OutputTokenThroughput"][:3] == ["71.25 token/s", "50.0 token/s", "100.0 token/s"]  # 3 / E2EL
    assert cells["PrefillTokenThroughput"][1:3] == ["100.0 token/s", "400.0 token/s"]  # 4 / TTFT
    assert cells["InputTokens"][0] == "4.0" and cells["OutputTokens"][0] == "3.0"
    common = {k: v["total"] for k, v in json.loads((perf / "synthetic.json").read_text()).items()}
    assert common == {"Benchmark Duration": "75.0 ms", "Total Requests": 5, "Failed Requests": 1,
                      "Success Requests": 4, "Concurrency": 2.4, "Max Concurrency": 2,
                      "Request Throughput": "53.3333 req/s", "Total Input Tokens": 16, "Total Generated Tokens": 12,
                      "Input Token Throughput": "213.3333 token/s", "Output Token Throughput": "160.0 token/s",
                      "Total Token Throughput": "373.3333 token/s"}  # fmt: skip


def test_perf_refusals_name_what_is_not_supported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _configs(tmp_path, 9)
    base = ["--models", "stream_chat", "--datasets", "synthetic_gen"]
    assert _ais(tmp_path, cfg, *base) == 2
    assert "SyntheticDataset (synthetic) is a perf workload: run it with --mode perf" in capsys.readouterr().err
    assert _ais(tmp_path, cfg, "--models", "general_closed", "--datasets", "synthetic_gen", "--mode", "perf") == 2
    assert "model general_closed: [path] in model config is required" in capsys.readouterr().err
    assert _ais(tmp_path, cfg, *base, "--mode", "perf_viz") == 2
    assert "--mode perf_viz works on the outputs of an earlier run" in capsys.readouterr().err
    (cfg / "datasets" / "synthetic" / "synthetic_config.py").write_text(_synthetic_config(4, 1, 1, kind="tokenid"))
    assert _ais(tmp_path, cfg, *base, "--mode", "perf") == 2
    assert "synthetic_config Type 'tokenid'" in capsys.readouterr().err
    (cfg / "datasets" / "synthetic" / "synthetic_config.py").write_text(_synthetic_config(4, 0, 1))
    assert _ais(tmp_path, cfg, *base, "--mode", "perf") == 2
    assert "synthetic_config Input MinValue=0: must be a whole number in [1, 1048576]" in capsys.readouterr().err
    (cfg / "summarizers").mkdir()
    (cfg / "summarizers" / "stable_stage.py").write_text(
        "from ais_bench.benchmark.summarizers import DefaultPerfSummarizer\n"
        "from ais_bench.benchmark.calculators import StablePerfMetricCalculator\n"
        "summarizer = dict(attr='performance', type=DefaultPerfSummarizer, "
        "calculator=dict(type=StablePerfMetricCalculator))\n")  # fmt: skip
    assert _ais(tmp_path, cfg, "--models", "stream_chat", "--datasets", "gsm8k_gen_0_shot_cot_str_perf", "--mode",
                "perf", "--summarizer", "stable_stage") == 2  # fmt: skip
    assert "StablePerfMetricCalculator is not supported" in capsys.readouterr().err


def test_perf_resends_a_dropped_request_up_to_the_models_retry(tmp_path: Path) -> None:
    """``retry`` in perf mode, as ``base_api.py``'s ``generate``: a request whose connection drops (the test server's
    ``disconnect`` fault: it closes the stream after the first chunk, ``TTFT_MS`` after the request) is sent again
    while attempts are left; the time points are the last attempt's (``clear_time_points``), so a clean stream's
    TTFT and E2EL, not the ``TTFT_MS`` or more the dropped attempt adds before them; when every attempt fails the
    cause is kept. The fault fires on the server's 2nd, 4th, ... request (rate 0.5, deterministic)."""
    import urllib.request

    server = TestServerConfig(port=free_loopback_port(), ttft_ms=TTFT_MS, itl_ms=ITL_MS, role_chunk=False,
                              faults={"disconnect": 0.5})  # fmt: skip
    with running_testserver(server) as url:
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
            served = json.loads(resp.read())["data"][0]["id"]
        body = json.dumps({"model": served, "prompt": "A", "max_tokens": 1}).encode()
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # the server's 1st request: no fault
            assert resp.status == 200
        cfg = _configs(tmp_path, server.port, count=1)
        models = cfg / "models" / "vllm_api"
        for name, retry, batch in (("retry_two", 2, 1), ("retry_one", 1, 2)):
            (models / f"{name}.py").write_text(MODEL.format(
                cls="VLLMCustomAPIChat", abbr=name, stream=True, rate=0, port=server.port, batch=batch, max_out=64,
                path=tmp_path).replace("retry=2", f"retry={retry}"))  # fmt: skip
        run = ["--datasets", "synthetic_gen", "--mode", "perf", "--num-warmups", "0"]
        # retry=2, one prompt: the 2nd request drops, the 3rd (its second attempt) succeeds
        assert _ais(tmp_path / "two", cfg, "--models", "retry_two", *run) == 0
        assert server_stats(url)["requests"] == 3 and server_stats(url)["faults"]["disconnect"] == 1
        perf = next((tmp_path / "two" / "outputs").iterdir()) / "performances" / "retry_two"
        (line,) = [json.loads(x) for x in (perf / "synthetic_details.jsonl").read_text().splitlines()]
        assert line["success"] and line["error_info"] == ""
        (gaps,) = _gaps_ms(perf)
        assert len(gaps) == N_OUT + 2  # a clean stream's points: N_OUT content, finish, usage; none of the drop's
        assert gaps[0] == pytest.approx(TTFT_MS, abs=15.0)  # the dropped attempt would add >= TTFT_MS before it
        assert sum(gaps) == pytest.approx(TTFT_MS + (N_OUT - 1) * ITL_MS, abs=15.0)
        # retry=1, two prompts at once: the 4th request drops and is not sent again, the 5th succeeds
        (cfg / "datasets" / "synthetic" / "synthetic_config.py").write_text(_synthetic_config(2, N_IN, N_OUT))
        assert _ais(tmp_path / "one", cfg, "--models", "retry_one", *run) == 0
        assert server_stats(url)["requests"] == 5 and server_stats(url)["faults"]["disconnect"] == 2
        perf = next((tmp_path / "one" / "outputs").iterdir()) / "performances" / "retry_one"
        lines = [json.loads(x) for x in (perf / "synthetic_details.jsonl").read_text().splitlines()]
        assert sorted(x["success"] for x in lines) == [False, True]
        (failed,) = [json.loads(x) for x in (perf / "synthetic_failed.jsonl").read_text().splitlines()]
        assert failed["error_info"].startswith("After 1 retries, request failed with exception: disconnect: "
                                               "connection closed by peer")  # fmt: skip
        # retry=0: AISBench sends nothing, so there is nothing to measure
        (models / "retry_one.py").write_text((models / "retry_one.py").read_text().replace("retry=1", "retry=0"))
        assert _ais(tmp_path / "zero", cfg, "--models", "retry_one", *run) == 2
        assert server_stats(url)["requests"] == 5
