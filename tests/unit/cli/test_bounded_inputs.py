"""Any file a command is handed costs bounded work: exit 2 naming the file, never a traceback, never
minutes, never the machine's memory (preflight.core.bounded)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 100_000 + "1" + "}" * 100_000
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)) + "groups: [*j]\n"


def invoke(args: list[str], cwd: str | None = None) -> tuple[int, str, BaseException | None]:
    runner = CliRunner()
    result = runner.invoke(cli, args, catch_exceptions=True)
    error = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, error


def commands(path: str, tmp_path) -> list[list[str]]:
    return [["report", path, "--out", str(tmp_path / "out")], ["diff", path, path],
            ["history", "import", "--url", str(tmp_path / "h.sqlite"), path], ["alerts", "--from", path],
            ["alerts", "--check", path], ["k8s", "judge", path]]


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT, "[" * 70 + "]" * 70])
def test_deeply_nested_json_is_refused_naming_the_file_by_every_command(tmp_path, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    for args in commands(str(path), tmp_path):
        code, output, error = invoke(args)
        assert error is None, (args, repr(error))
        assert code == 2 and "deep.json" in output, (args, code, output[-300:])


def test_a_device_or_a_directory_is_refused_without_reading_it(tmp_path):
    for path in ("/dev/zero", str(tmp_path)):
        for args in commands(path, tmp_path)[4:]:  # alerts --check, k8s judge
            code, output, error = invoke(args)
            assert error is None and code == 2 and path in output, (args, code, output[-300:])
    code, output, error = invoke(["report", "/dev/zero", "--out", str(tmp_path / "o")])
    assert error is None and code == 2 and "/dev/zero" in output


def test_a_billion_laughs_rule_file_is_refused_at_once(tmp_path):
    rules = tmp_path / "laughs.yml"
    rules.write_text(LAUGHS)
    code, output, error = invoke(["alerts", "--check", str(rules)])
    assert error is None and code == 2 and "laughs.yml" in output and "alias" in output


def test_a_huge_config_file_is_refused_from_its_size(tmp_path):
    big = tmp_path / "preflight.toml"
    with open(big, "wb") as handle:  # sparse: 1 GiB that takes no disk, and would take 2 GB to read
        handle.truncate(1024 ** 3)
    code, output, error = invoke(["run", "--config", str(big), "--checks", "node.environment",
                                  "--out", str(tmp_path / "out")])
    assert error is None and code == 2 and "preflight.toml" in output and "limit" in output


def node(name: object, **fields: object) -> dict:
    doc = {"kind": "Node", "metadata": {"name": name}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                                                   "allocatable": {"nvidia.com/gpu": "8"}}}
    doc.update(fields)
    return doc


@pytest.mark.parametrize("doc", [
    node(7), node("n1", metadata="x"), node("n1", spec={"taints": "NoSchedule"}), node("n1", spec={"taints": [1]}),
    node("n1", status={"conditions": {"type": "Ready"}}), node("n1", status=[]), node(["n1"]),
    node("n1", spec={"unschedulable": "yes"}), {"kind": "List", "items": [node("n1"), node(None)]},
])
def test_k8s_judge_refuses_a_wrongly_typed_node_naming_the_file(tmp_path, doc):
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(doc))
    code, output, error = invoke(["k8s", "judge", str(path)])
    assert error is None and code == 2 and "nodes.json" in output, (code, output, repr(error))


def test_k8s_judge_shows_no_escape_sequence_of_a_node_name(tmp_path):
    name = "gpu-a\x1b]0;owned\x07\x1b[2J\r\nOK  fake"
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(node(name, status={"capacity": {"nvidia.com/gpu": "8"}})))
    code, output, error = invoke(["k8s", "judge", str(path)])
    assert error is None and code == 1
    assert "\x1b" not in output and "\r" not in output and "\x07" not in output
    assert [line[:3] for line in output.splitlines()][:1] == ["NO "]


def test_k8s_judge_reads_a_node_list_from_a_pipe(tmp_path):
    """`kubectl get nodes -o json | preflight k8s judge /dev/stdin`: a pipe is read, up to the limit."""
    import threading

    fifo = tmp_path / "nodes.pipe"
    os.mkfifo(fifo)
    text = json.dumps(node("gpu-a", status={"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                                            "conditions": [{"type": "Ready", "status": "True"}]}))

    def write() -> None:
        with open(fifo, "w") as handle:  # waits for the reader
            handle.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, output, error = invoke(["k8s", "judge", str(fifo)])
    writer.join(timeout=60)
    assert error is None and code == 0 and "OK  gpu-a" in output, output


def test_an_error_naming_a_file_shows_no_escape_sequence_of_its_name(tmp_path):
    bad = tmp_path / "run\x1b]0;owned\x07\x1b[2J.json"
    bad.write_text("{")
    for args in commands(str(bad), tmp_path):
        code, output, error = invoke(args)
        assert error is None and code == 2 and "run" in output, (args, output)
        assert "\x1b" not in output and "\x07" not in output, (args, output)


@pytest.mark.parametrize("value", ["[" * 100_000 + "]" * 100_000, "{a=" * 100_000 + "1" + "}" * 100_000])
def test_a_config_nested_past_the_limit_is_exit_2_naming_it(tmp_path, value):
    config = tmp_path / "preflight.toml"
    config.write_text(f"x = {value}\n")
    code, output, error = invoke(["run", "--config", str(config), "--checks", "node.environment",
                                  "--out", str(tmp_path / "out")])
    assert error is None and code == 2 and "preflight.toml" in output and "nested" in output, output[-300:]
    code, output, error = invoke(["run", "--set", f"node.environment.x={value[:40_000]}", "--checks",
                                  "node.environment", "--out", str(tmp_path / "out2")])
    assert error is None and code == 2 and "--set" in output and len(output) < 500, output[-300:]


def test_without_libyaml_a_large_yaml_file_is_refused_not_read_for_minutes(monkeypatch):
    import yaml

    from preflight.core.bounded import MAX_PURE_PYTHON_YAML, InputError, load_yaml_all

    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert load_yaml_all("a: 1\n", "small.yml") == [{"a": 1}]
    with pytest.raises(InputError) as raised:
        load_yaml_all("a: 1\n" * (MAX_PURE_PYTHON_YAML // 5 + 1), "big.yml")
    assert "big.yml" in str(raised.value) and "JSON" in str(raised.value)


def test_a_last_results_jsonl_line_nested_too_deep_is_refused_not_dropped_as_cut_short(tmp_path):
    from preflight.core.model import Status
    from preflight.core.results_file import ResultsFileError, header_line, read_results
    from tests.conftest import make_report, make_result

    report = make_report([make_result("node.environment", "n1", Status.PASS)], nodes=["n1"])
    path = tmp_path / "results.jsonl"
    path.write_text(header_line(report) + "\n" + DEEP + "\n")
    with pytest.raises(ResultsFileError) as raised:
        read_results(path, "0.1.0")
    assert "results.jsonl:2" in str(raised.value) and "nested" in str(raised.value)
