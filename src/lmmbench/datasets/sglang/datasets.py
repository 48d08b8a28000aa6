"""The text data sets of SGLang 0.5.23's ``bench_serving`` (``sglang/benchmark/datasets/``), drawing the requests
SGLang draws for the same command line, seed and tokenizer.

Written from SGLang's loaders, one function each: ``sharegpt`` / ``custom`` (with ``--prompt-suffix``,
``--sharegpt-context-len`` and ``--apply-chat-template``, which no other loader of SGLang's reads), ``random`` /
``random-ids`` as token ids (``--tokenize-prompt``), ``generated-shared-prefix`` (every ``--gsp-*`` flag),
``openai``, ``longbench_v2``, ``speed-bench``, ``agentic-trace`` and ``mooncake``. Images (``image``, ``mmmu``)
are in ``sglang_image_datasets``.
"""

from __future__ import annotations

import argparse
import json
import math
import urllib.request
from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError
from lmmbench.datasets.sglang.rows import (
    SglRow,
    SglTokenizer,
    VllmRng,
    compute_random_lens,
    gen_prompt,
    gen_prompt_ids,
)
from lmmbench.datasets.vllm.samplers import row_text

__all__ = ["ASSISTANT_SUFFIX", "MOONCAKE_DIR", "MOONCAKE_URLS", "agentic_trace", "file_arg", "generated_shared_prefix",
           "longbench_v2", "mooncake", "openai_rows", "random_ids", "sharegpt_rows", "speed_bench"]  # fmt: skip

ASSISTANT_SUFFIX = "Assistant:"
LONGBENCH_V2_REPO = "THUDM/LongBench-v2"
#: where SGLang keeps a downloaded Mooncake trace (``/tmp/<workload>_trace.jsonl``)
MOONCAKE_DIR = Path("/tmp")
_MOONCAKE_BASE = "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/"
#: SGLang's ``MOONCAKE_DATASET_URL``
MOONCAKE_URLS = {
    "mooncake": _MOONCAKE_BASE + "arxiv-trace/mooncake_trace.jsonl",
    "conversation": _MOONCAKE_BASE + "traces/conversation_trace.jsonl",
    "synthetic": _MOONCAKE_BASE + "traces/synthetic_trace.jsonl",
    "toolagent": _MOONCAKE_BASE + "traces/toolagent_trace.jsonl",
}


def file_arg(path: str, flag: str = "--dataset-path") -> Path:
    """``path`` as a file that exists (one line naming the flag otherwise)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{flag} {path}: file not found")
    return p


def _text(path: Path) -> str:
    """The file's text, read with the file_bytes bound (non-UTF-8 named with its line and byte)."""
    from lmmbench.config.input_files import read_text

    return read_text(path, "--dataset-path")


def _json(path: Path) -> Any:
    try:
        return json.loads(_text(path))
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply") from None


def _json_lines(path: Path, skip_bad: bool) -> list[Any]:
    return [row for _, row in _numbered_json_lines(path, skip_bad)]


def _numbered_json_lines(path: Path, skip_bad: bool) -> list[tuple[int, Any]]:
    """(line number, value) of every JSON line; a line that is not JSON skipped (``skip_bad``) or refused."""
    rows = []
    for lineno, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((lineno, json.loads(line)))
        except RecursionError:
            raise UserError(f"{path}:{lineno}: JSON nested too deeply") from None
        except ValueError:
            if not skip_bad:
                raise UserError(f"{path}:{lineno}: not a JSON line") from None
    return rows


def _object(row: Any, where: str) -> dict[str, Any]:
    """A data-set row that must be a JSON object (SGLang calls ``.get`` on it), else one line naming it."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: the row is {type(row).__name__}, expected a JSON object")
    return row


def _count(value: Any, where: str, field: str) -> int:
    """A token count of a row: a whole number >= 1 (a bool, a string or a float is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: '{field}' {value!r}: a whole number >= 1 is needed")
    check_limit("output_tokens", value, f"{where}: '{field}'")
    return value


def _pairs(rows: Any, custom: bool, path: Path) -> list[tuple[str, str]]:
    """The first two turns of every conversation with at least two (custom: ``content`` or ``value`` keys); a
    file that is not a list of conversations, or a turn that is not text, is one line naming the file and row."""
    if not isinstance(rows, list):
        raise UserError(f"{path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} objects, not a "
                        f"{type(rows).__name__}")  # fmt: skip
    out = []
    for i, data in enumerate(rows):
        if not isinstance(data, dict):
            continue
        conv = data.get("conversations", data.get("conversation", []))
        if not isinstance(conv, list):
            raise UserError(f"{path}: row {i + 1}: 'conversations' is {type(conv).__name__}, expected a list of "
                            "turns")  # fmt: skip
        if len(conv) < 2:
            continue
        turns = []
        for turn in conv[:2]:
            if not isinstance(turn, dict):
                raise UserError(f"{path}: row {i + 1}: a turn is {type(turn).__name__}, expected an object")
            key = ("content" if "content" in turn else "value") if custom else "value"
            turns.append(row_text(turn.get(key, "" if custom else None), f"{path}: row {i + 1}",
                                  f"conversations[].{key}"))  # fmt: skip
        out.append((turns[0], turns[1]))
    return out


def sharegpt_rows(ns: argparse.Namespace, tok: SglTokenizer, rngs: VllmRng, path: Path) -> list[SglRow]:
    """``sample_sharegpt_requests`` / ``sample_custom_requests``: shuffled first turns, ``--prompt-suffix`` put
    before the trailing "Assistant:", then (``--apply-chat-template``) rendered with the chat template, too-short
    pairs (< 2 tokens) and ``--sharegpt-context-len`` overruns dropped, up to ``--num-prompts``."""
    fixed = ns.sharegpt_output_len
    if fixed is not None and fixed < 4:
        raise UserError(f"--sharegpt-output-len {fixed}: SGLang refuses an output length below 4")
    custom = ns.dataset_name == "custom"
    pairs = _pairs(_json_lines(path, True) if custom else _json(path), custom, path)
    rngs.py.shuffle(pairs)
    out: list[SglRow] = []
    for prompt, completion in pairs:
        if len(out) == ns.num_prompts:
            break
        if ns.prompt_suffix:
            prompt = prompt.removesuffix(ASSISTANT_SUFFIX) + ns.prompt_suffix + ASSISTANT_SUFFIX
        if ns.apply_chat_template:
            prompt = _chat_prompt(tok, prompt)
        prompt_len = len(tok.encode(prompt))
        output_len = len(tok.encode(completion)) if fixed is None else fixed
        if prompt_len < 2 or output_len < 2:
            continue
        if ns.sharegpt_context_len and prompt_len + output_len > ns.sharegpt_context_len:
            continue
        out.append(SglRow(prompt, prompt_len, output_len))
    return out


def _chat_prompt(tok: SglTokenizer, prompt: str) -> str:
    """``--apply-chat-template``: the prompt as the one user message of the model's chat template, with the
    generation prompt, every BOS token taken out (the server's tokenizer adds its own)."""
    text = tok.apply_chat_template([{"role": "user", "content": prompt}])
    if text is None:
        raise UserError(f"--apply-chat-template: the tokenizer {tok.path} has no chat template that renders "
                        "(tokenizer_config.json's chat_template, chat_template.jinja or chat_template.json)")
    bos = tok.bos_token
    return text.replace(bos, "") if bos else text


def random_ids(ns: argparse.Namespace, tok: SglTokenizer, rngs: VllmRng, sharegpt: Path | None) -> list[SglRow]:
    """``sample_random_requests`` with ``--tokenize-prompt``: token-id prompts, ShareGPT's tokens repeated or cut
    to each length (``random``) or consecutive ids from a random offset (``random-ids``)."""
    n = ns.num_prompts
    in_lens = compute_random_lens(rngs, ns.random_input_len, ns.random_range_ratio, n)
    out_lens = compute_random_lens(rngs, ns.random_output_len, ns.random_range_ratio, n)
    out: list[SglRow] = []
    if ns.dataset_name == "random":
        assert sharegpt is not None
        pairs = _pairs(_json(sharegpt), False, sharegpt)
        rngs.py.shuffle(pairs)
        for prompt, _ in pairs:
            i = len(out)
            if i == n:
                break
            ids = tok.encode(prompt)
            if not ids:
                continue
            ids = ids[: in_lens[i]] if len(ids) > in_lens[i] else (ids * -(-in_lens[i] // len(ids)))[: in_lens[i]]
            out.append(SglRow(ids, in_lens[i], out_lens[i]))
        return out
    offsets = rngs.np.randint(0, tok.vocab_size, size=n)
    for i in range(n):
        ids = [int((offsets[i] + i + j) % tok.vocab_size) for j in range(in_lens[i])]
        out.append(SglRow(ids, in_lens[i], out_lens[i]))
    return out


def _zipf_assignment(seed: int, groups: int, slots: int, alpha: float) -> list[int]:
    import numpy as np

    weights = 1.0 / (np.arange(1, groups + 1, dtype=np.float64) ** alpha)
    return [int(g) for g in np.random.default_rng(seed).choice(groups, size=slots, replace=True,
                                                               p=weights / weights.sum())]  # fmt: skip


def generated_shared_prefix(ns: argparse.Namespace, tok: SglTokenizer, rngs: VllmRng) -> list[SglRow]:
    """``sample_generated_shared_prefix_requests``: a random system prompt per group, random questions (one per
    turn), lengths drawn with ``--gsp-range-ratio``, groups uniform or Zipf (``--gsp-group-distribution``),
    shuffled unless ``--gsp-ordered``; token ids with ``--tokenize-prompt``; ``--gsp-fast-prepare`` counts no
    prompt (the server's usage counts it)."""
    g_n, p_n, turns, ids = ns.gsp_num_groups, ns.gsp_prompts_per_group, ns.gsp_num_turns, ns.tokenize_prompt
    ratio = ns.gsp_range_ratio
    sys_lens = compute_random_lens(rngs, ns.gsp_system_prompt_len, ratio, g_n)
    q_lens = compute_random_lens(rngs, ns.gsp_question_len, ratio, g_n * p_n * turns)
    o_lens = compute_random_lens(rngs, ns.gsp_output_len, ratio, g_n * p_n)
    gen = gen_prompt_ids if ids else gen_prompt
    systems = [gen(rngs, tok, sys_lens[g]) for g in range(g_n)]
    questions = [[[gen(rngs, tok, q_lens[(g * p_n + p) * turns + t]) for t in range(turns)] for p in range(p_n)]
                 for g in range(g_n)]  # fmt: skip
    slots = g_n * p_n
    if ns.gsp_group_distribution == "zipf":
        assignment = _zipf_assignment(ns.seed, g_n, slots, float(ns.gsp_zipf_alpha))
    else:
        assignment = [s // p_n for s in range(slots)]
    rows: list[SglRow] = []
    for slot, group in enumerate(assignment):
        src_g, src_p = divmod(slot, p_n)
        qs: list[Any] = questions[src_g][src_p]
        first: Any = systems[group] + qs[0] if ids else f"{systems[group]}\n\n{qs[0]}"
        prompt = first if turns == 1 else [first, *qs[1:]]
        prompt_len = len(first) if ids else (None if ns.gsp_fast_prepare else len(tok.encode(first)))
        rows.append(SglRow(prompt, None if turns > 1 else prompt_len, o_lens[slot], rounds=turns > 1,
                           labels={"prefix_group": group}))  # fmt: skip
    if not ns.gsp_ordered:
        rngs.py.shuffle(rows)
    return rows


def openai_rows(ns: argparse.Namespace, tok: SglTokenizer, path: Path) -> list[SglRow]:
    """``sample_openai_requests``: the first ``--num-prompts`` JSON lines of chat requests, each one's own fields
    (tools, sampling) sent with it; the output length ``--sharegpt-output-len``, else its ``max_tokens``, else 256."""
    excluded = {"messages", "max_tokens", "max_completion_tokens", "model"}
    rows: list[tuple[int, Any]] = []
    for lineno, line in enumerate(_text(path).splitlines(), start=1):
        if ns.num_prompts > 0 and len(rows) >= ns.num_prompts:
            break
        if line.strip():
            try:
                rows.append((lineno, json.loads(line)))
            except ValueError:
                continue
            except RecursionError:
                raise UserError(f"{path}:{lineno}: JSON nested too deeply") from None
    out = []
    for lineno, row in rows:
        where = f"{path}:{lineno}"
        data = _object(row, where)
        messages = data.get("messages", [])
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise UserError(f"{where}: 'messages' is {type(messages).__name__}, expected a list of "
                            "{'role': ..., 'content': ...} objects")  # fmt: skip
        if not messages:  # a row without messages is skipped, as SGLang skips it
            continue
        extra = {k: v for k, v in data.items() if k not in excluded}
        ids = tok.chat_ids(messages)
        prompt_len = None if ids is None else len(ids)
        if prompt_len is not None and "tools" in extra:
            prompt_len += len(tok.encode(json.dumps(extra["tools"])))
        output_len = ns.sharegpt_output_len or _count(data.get("max_tokens", 256), where, "max_tokens")
        out.append(SglRow(messages, prompt_len, output_len, extra_body=extra))
    return out


def _longbench_examples(ns: argparse.Namespace) -> list[dict[str, Any]]:
    if ns.dataset_path:
        path = file_arg(ns.dataset_path)
        if str(path).endswith(".parquet"):
            try:
                import pandas as pd
            except ImportError:
                raise UserError(f"{path}: reading parquet needs pandas: pip install pandas pyarrow") from None
            return list(pd.read_parquet(path).to_dict(orient="records"))
        return list(_json_lines(path, False))
    try:
        import datasets
    except ImportError:
        raise UserError("--dataset-name longbench_v2 reads THUDM/LongBench-v2 with the datasets library: "
                        "pip install 'lmmbench[hub-datasets]'") from None  # fmt: skip
    try:
        return list(datasets.load_dataset(LONGBENCH_V2_REPO, split="train"))
    except Exception as exc:  # datasets raises many kinds; each is one line here
        raise UserError(f"--dataset-name longbench_v2: cannot load {LONGBENCH_V2_REPO} with datasets "
                        f"({type(exc).__name__}); online it is downloaded, offline (HF_HUB_OFFLINE=1) it must be in "
                        "the datasets cache; or give --dataset-path FILE (.parquet or JSON lines)") from None


def longbench_v2(ns: argparse.Namespace, tok: SglTokenizer, rngs: VllmRng) -> list[SglRow]:
    """``sample_longbench_v2_requests``: shuffled multiple-choice prompts (context, question, A-D, "Answer:"),
    ``--sharegpt-context-len`` overruns dropped; 10 output tokens unless ``--sharegpt-output-len``."""
    output_len = ns.sharegpt_output_len if ns.sharegpt_output_len is not None else 10
    examples = _longbench_examples(ns)
    rngs.py.shuffle(examples)
    out: list[SglRow] = []
    for x in examples:
        if len(out) >= ns.num_prompts:
            break
        try:
            prompt = (f"{x['context']}\n\nQuestion: {x['question']}\nA. {x['choice_A']}\nB. {x['choice_B']}\n"
                      f"C. {x['choice_C']}\nD. {x['choice_D']}\nAnswer:")  # fmt: skip
        except (KeyError, TypeError):
            raise UserError("--dataset-name longbench_v2: rows need context, question and choice_A..choice_D") from None
        prompt_len = len(tok.encode(prompt))
        if ns.sharegpt_context_len is not None and prompt_len + output_len > ns.sharegpt_context_len:
            continue
        out.append(SglRow(prompt, prompt_len, output_len))
    return out


def speed_bench(ns: argparse.Namespace, tok: SglTokenizer, rngs: VllmRng) -> list[SglRow]:
    """``SpeedBenchDataset``: the first turn of each row of ``--speed-bench-category`` (all without), through the
    chat template, ``--speed-bench-output-len`` tokens out; sampled without replacement, or repeated and shuffled
    when more prompts are asked for than there are rows."""
    if not ns.dataset_path:
        raise UserError("--dataset-name speed-bench needs --dataset-path: the SPEED-Bench JSON lines file "
                        "(SGLang's prepare_speed_bench.sh writes it)")  # fmt: skip
    path = file_arg(ns.dataset_path)
    wanted = ns.speed_bench_category
    prompts = []
    for lineno, row in _numbered_json_lines(path, False):  # every row checked, of any category
        where = f"{path}:{lineno}"
        turns = _object(row, where).get("turns")
        if not isinstance(turns, list) or not turns:
            raise UserError(f"{where}: 'turns' is {type(turns).__name__ if turns != [] else 'an empty list'}, "
                            "expected a list of strings (the first is the prompt)")  # fmt: skip
        first = row_text(turns[0], where, "turns[0]")
        if not wanted or row.get("category") == wanted:
            prompts.append(first)
    if not prompts:
        which = f" for category={ns.speed_bench_category}" if ns.speed_bench_category else ""
        raise UserError(f"{path}: no rows{which}")
    unique: list[SglRow] = []
    for text in prompts:
        ids = tok.chat_ids([{"role": "user", "content": text}])
        unique.append(SglRow(tok.decode(ids), len(ids), ns.speed_bench_output_len) if ids is not None
                      else SglRow(text, len(tok.encode(text)), ns.speed_bench_output_len))  # fmt: skip
    if ns.num_prompts <= len(unique):
        drawn: list[SglRow] = rngs.py.sample(unique, ns.num_prompts)
        return drawn
    rows: list[SglRow] = (unique * (ns.num_prompts // len(unique) + 1))[: ns.num_prompts]
    rngs.py.shuffle(rows)
    return rows


def _check_trace(path: Path, conversations: Any) -> None:
    """An agentic trace's shape, as SGLang reads it: a list of conversations, each a list of turn objects whose
    ``messages`` is a list of message objects and whose ``prompt_tokens``, when given, a whole number."""
    if not isinstance(conversations, list):
        raise UserError(f"{path}: 'conversations' is {type(conversations).__name__}, expected a list of "
                        "conversations (each a list of turns)")  # fmt: skip
    for i, conv in enumerate(conversations):
        where = f"{path}: conversations[{i}]"
        if not isinstance(conv, list):
            raise UserError(f"{where} is {type(conv).__name__}, expected a list of turns")
        for j, turn in enumerate(conv):
            if not isinstance(turn, dict):
                raise UserError(f"{where}[{j}] is {type(turn).__name__}, expected a {{'messages': [...]}} object")
            messages = turn.get("messages")
            if messages is not None and (not isinstance(messages, list)
                                         or not all(isinstance(m, dict) for m in messages)):  # fmt: skip
                raise UserError(f"{where}[{j}].messages is {type(messages).__name__}, expected a list of message "
                                "objects")  # fmt: skip
            tokens = turn.get("prompt_tokens", 0)
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise UserError(f"{where}[{j}].prompt_tokens {tokens!r}: a whole number >= 0 is needed")


def agentic_trace(ns: argparse.Namespace) -> list[SglRow]:
    """``AgenticTraceDataset``: one multi-turn row per conversation (each turn's new messages), the list turned by
    ``--dataset-offset``, cut to ``--agentic-max-turns``; ``--sharegpt-output-len`` (else 220) tokens per turn."""
    path = file_arg(ns.dataset_path or "")
    data = _json(path)
    conversations = data.get("conversations", []) if isinstance(data, dict) else []
    if not conversations:
        raise UserError(f"{path}: no 'conversations' in the trace")
    _check_trace(path, conversations)
    offset = ns.dataset_offset % len(conversations)
    if offset:
        conversations = conversations[offset:] + conversations[:offset]
    output_len = ns.sharegpt_output_len or 220
    out: list[SglRow] = []
    for conv in conversations:
        if ns.num_prompts > 0 and len(out) >= ns.num_prompts:
            break
        turns = [t["messages"] for t in conv if isinstance(t, dict) and t.get("messages")]
        if ns.agentic_max_turns:
            turns = turns[: ns.agentic_max_turns]
        if turns:
            out.append(SglRow(turns, int(conv[0].get("prompt_tokens", 0)), output_len, rounds=True))
    if not out:
        raise UserError(f"{path}: no usable conversations")
    return out


def _mooncake_file(ns: argparse.Namespace) -> Path:
    """``--dataset-path``, else SGLang's ``/tmp/<workload>_trace.jsonl``, downloaded from Mooncake's repository
    when missing (as SGLang does)."""
    path = Path(ns.dataset_path) if ns.dataset_path else MOONCAKE_DIR / f"{ns.mooncake_workload}_trace.jsonl"
    if not path.exists():
        url = MOONCAKE_URLS[ns.mooncake_workload]
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                data = resp.read()
            path.write_bytes(data)
        except (OSError, ValueError) as exc:
            raise UserError(f"--dataset-name mooncake: {path} is missing and {url} could not be had ({exc}); give "
                            "--dataset-path FILE") from None  # fmt: skip
    return path


def _check_mooncake_record(path: Path, index: int, rec: Any) -> None:
    """One Mooncake trace record: a numeric ``timestamp`` (ms), integer ``hash_ids`` and ``output_length`` within
    the limits table; else one line naming the file and the record."""
    where = f"{path}: record {index + 1}"
    if not isinstance(rec, dict):
        raise UserError(f"{where}: expected a JSON object")
    stamp = rec.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
        raise UserError(f"{where}: 'timestamp' {stamp!r}: a finite number of milliseconds is needed")
    ids = rec.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise UserError(f"{where}: 'hash_ids' must be a list of integers")
    check_limit("hash_ids", len(ids), f"{where}: 'hash_ids'")
    out = rec.get("output_length", 256)
    if isinstance(out, bool) or not isinstance(out, (int, float)) or not math.isfinite(out) or out < 0:
        raise UserError(f"{where}: 'output_length' {out!r}: a whole number >= 0 is needed")
    check_limit("output_tokens", out, f"{where}: 'output_length'")


def mooncake(ns: argparse.Namespace, tok: SglTokenizer) -> list[SglRow]:
    """``MooncakeDataset`` and ``get_mooncake_request_over_time``: the first ``--num-prompts`` trace lines, sorted
    by timestamp; each session sends ``--mooncake-num-rounds`` rounds at once, at its timestamp times
    ``--mooncake-slowdown-factor``, round k the chat so far (placeholder replies) through the chat template."""
    path = _mooncake_file(ns)
    records = _json_lines(path, False)[: ns.num_prompts]
    for i, rec in enumerate(records):
        _check_mooncake_record(path, i, rec)
    records.sort(key=lambda r: r["timestamp"])
    t0 = records[0]["timestamp"] if records else 0
    out: list[SglRow] = []
    for session, rec in enumerate(records):
        at_s = (rec["timestamp"] - t0) / 1000.0 * ns.mooncake_slowdown_factor
        if not math.isfinite(at_s) or at_s < 0:
            raise UserError(f"--dataset-name mooncake: timestamp {rec['timestamp']} is not a time after the first")
        base = "".join(f"{h}" + " ".join(["hi"] * 128) for h in rec.get("hash_ids", []))
        base += "Tell me a story based on this context."
        output_len = int(rec.get("output_length", 256))
        history: list[dict[str, str]] = []
        for i in range(ns.mooncake_num_rounds):
            history.append({"role": "user", "content": f"Round {i + 1}: {base}"})
            text = tok.apply_chat_template(history)
            if text is None:
                text = "\n".join(f"{m['role']}: {m['content']}" for m in history)
            out.append(SglRow(text, len(tok.encode(text)), output_len, timestamp_s=at_s,
                              labels={"session": session, "round": i}))  # fmt: skip
            history.append({"role": "assistant", "content": " ".join(["story"] * output_len)})
    return out

