"""The one placeholder formatter (``core.placeholders``): fields per context, braces that are not placeholders
left alone, values quoted for the shell or kept whole in one argument, unknown / unavailable / open fields refused
with the fields there are."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from lmmbench.core.errors import UserError
from lmmbench.core.placeholders import Fields, check, fill_argv, fill_shell, fill_text, names_in, shell_syntax

SERVER = Fields("--server-cmd", {"port": "8123", "model": "org/m", "tp": "2"},
                unavailable={"batch": "this run has no batch sizes (--rates)"})


def test_json_argument_and_other_braces_are_text() -> None:
    line = "vllm serve {model} --port {port} --override-generation-config '{\"temperature\": 0}' --x '{}' '${HOME}'"
    argv = fill_argv(line, SERVER)
    assert argv == ["vllm", "serve", "org/m", "--port", "8123", "--override-generation-config",
                    '{"temperature": 0}', "--x", "{}", "${HOME}"]


def test_escaped_placeholder_is_its_text() -> None:
    assert fill_text("awk '{{port}}' {port}", SERVER) == "awk '{port}' 8123"
    assert names_in("{{port}} {model}") == ["model"]


def test_unknown_field_names_it_and_the_fields_there_are() -> None:
    with pytest.raises(UserError) as exc:
        check("run --out {outdir}", Fields("row 'x': command", {"out_dir": "/o", "python": "/py"}))
    msg = str(exc.value)
    assert "{outdir} is not a field here" in msg and "did you mean {out_dir}" in msg
    assert "{out_dir}, {python}" in msg


def test_unavailable_field_gives_its_reason() -> None:
    with pytest.raises(UserError, match=r"\{batch\} is not available here: this run has no batch sizes"):
        fill_argv("srv --port {port} --max-batch {batch}", SERVER)


def test_open_placeholder_of_a_field_is_refused() -> None:
    with pytest.raises(UserError, match=r"'\{port' is not closed"):
        check("srv --port {port", SERVER)
    check("awk '{print $1}'", SERVER)  # not a field: text


def test_later_fields_pass_the_check_and_are_refused_until_known() -> None:
    fields = Fields("row 'score': options", {"out_dir": "/o"}, later=frozenset({"rows.infer.folder"}))
    check("{rows.infer.folder}", fields)
    with pytest.raises(UserError, match="not known yet"):
        fill_text("{rows.infer.folder}", fields)
    assert fill_text("{rows.infer.folder}", fields.with_values(**{"rows.infer.folder": "/a b"})) == "/a b"


def test_shell_fill_quotes_each_value(tmp_path: object) -> None:
    value = "/tmp/out dir; echo INJECTED"
    line = fill_shell("printf '%s\\n' {out_dir}", Fields("cmd", {"out_dir": value}))
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, check=True).stdout
    assert out == value + "\n"  # one word, nothing run


def test_argv_fill_keeps_a_value_whole() -> None:
    value = "/tmp/a b/'c\""
    argv = fill_argv("{python} -c 'import sys; print(sys.argv[1])' {out_dir}",
                     Fields("cmd", {"out_dir": value, "python": sys.executable}))
    assert len(argv) == 4 and argv[3] == value
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == value + "\n"


def test_unsplittable_and_empty_lines_are_refused() -> None:
    with pytest.raises(UserError, match="cannot split"):
        fill_argv("srv --port {port} 'open", SERVER)
    with pytest.raises(UserError, match="empty"):
        fill_argv("   ", SERVER)


@pytest.mark.parametrize(("line", "found"), [
    ("echo hi > out.txt", ">"), ("a | b", "|"), ("a && b", "&&"), ("a; b", ";"), ("echo $HOME", "$H"),
    ("echo \"$(date)\"", "$("), ("echo `date`", "`"), ("ls *.json", "*"), ("sleep 1 &", "&")])
def test_shell_syntax_found(line: str, found: str) -> None:
    assert shell_syntax(line) == found


@pytest.mark.parametrize("line", ["echo '>' 'a|b' \"x;y\" '$HOME' '*'", "python -c 'print(1)'", "echo \\>",
                                  "echo a=b --x=1"])
def test_quoted_shell_syntax_is_text(line: str) -> None:
    assert shell_syntax(line) is None
    shlex.split(line)
