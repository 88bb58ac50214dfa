"""Strict JSON everywhere: NaN and infinity never reach a results file as bare tokens."""

from __future__ import annotations

import ast
import json
import math

import pytest

from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.compare import compare
from preflight.core import jsonlines
from preflight.core.finite import dumps, facts_lost_values, make_finite
from preflight.core.model import Measurement, Status, json_text
from preflight.core.results_file import header_line, read_results
from preflight.reporters import json_report
from preflight.workers import wire
from tests.conftest import ROOT, make_report, make_result


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as jq and JavaScript do."""
    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def canary_that_caught_nan_losses():
    return make_result("canary.training", "n1", Status.FAIL, "3 step losses were NaN or infinite",
                       measurements=[Measurement("loss (last step)", math.nan, ""),
                                     Measurement("step time", 0.2, "s", math.inf, "<=", True,
                                                 samples=[0.2, math.nan, 0.21])],
                       facts={"losses": [2.3, math.nan, math.inf, -math.inf], "steps": 4})


def test_results_json_of_a_run_whose_canary_caught_nan_losses_is_json():
    report = make_report([canary_that_caught_nan_losses()])
    data = strict(json_report.render(report))
    (result,) = data["results"]
    assert result["measurements"][0]["value"] is None and result["measurements"][1]["threshold"] is None
    assert result["facts"]["losses"] == [2.3, None, None, None]
    assert data["verdict"]["verdict"] == "NO-GO"  # the judgement made from the real values stays


def test_each_replaced_figure_is_noted_in_its_result():
    result = make_finite(canary_that_caught_nan_losses())
    assert result.measurements[0].value is None and result.measurements[1].samples == [0.2, 0.21]
    notes = " ".join(result.details)
    assert "'loss (last step)': value was NaN" in notes and "threshold was +inf" in notes
    assert facts_lost_values(result) and result.status is Status.FAIL
    strict(result.to_json_line())


def test_results_files_with_nan_tokens_from_an_older_version_are_rewritten_strictly(tmp_path):
    report = make_report([canary_that_caught_nan_losses()])
    old = tmp_path / "old" / "results.json"
    old.parent.mkdir()
    data = report.to_dict()
    data["verdict"] = {"verdict": "NO-GO", "exit_code": 1, "reason": "x", "blocking": []}
    old.write_text(json.dumps(data))  # bare NaN tokens, as an older preflight wrote them
    assert "NaN" in old.read_text()
    done = CliRunner().invoke(cli, ["report", str(old), "--format", "json", "--out", str(tmp_path / "new")])
    assert done.exit_code == 1, done.output
    strict((tmp_path / "new" / "results.json").read_text())
    jsonl = tmp_path / "results.jsonl"
    jsonl.write_text(header_line(report) + "\n" + json.dumps(canary_that_caught_nan_losses().to_dict()) + "\n")
    loaded, _ = read_results(jsonl, "0.1.0")
    assert loaded.results[0].measurements[0].value is None


def test_rejudging_keeps_a_result_whose_facts_lost_values(tmp_path):
    """Null where a NaN loss was must not be judged again as if it were a clean run."""
    report = make_report([make_finite(canary_that_caught_nan_losses())])
    results = tmp_path / "run" / "results.json"
    results.parent.mkdir()
    results.write_text(json_report.render(report))
    done = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--format", "json",
                                    "--out", str(tmp_path / "again")])
    assert done.exit_code == 1, done.output
    again = strict((tmp_path / "again" / "results.json").read_text())
    assert again["results"][0]["status"] == "FAIL"
    assert any("NaN or infinity" in k for k in again["rejudged"]["kept"])


def test_a_comparison_with_non_finite_figures_is_json():
    old = make_report([make_result("a.b", "n1", Status.PASS, measurements=[Measurement("rate", math.nan, "", 1, ">=")])])
    new = make_report([make_result("a.b", "n1", Status.PASS, measurements=[Measurement("rate", math.inf, "", 1, ">=")])])
    strict(compare(old, new).to_json())


# --- every JSON writer is strict --------------------------------------------------------------

def _json_writers(source: str) -> list[tuple[int, str]]:
    """(line, what) for each json.dump/json.dumps call without allow_nan=False, and each way around
    the `json.` spelling (an alias, `from json import dumps`) that would hide one from this scan."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "json":
            found += [(node.lineno, f"from json import {a.name}") for a in node.names if a.name in ("dump", "dumps")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import json as {a.asname}") for a in node.names if a.name == "json" and a.asname]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("dump", "dumps") and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "json":
            strict_call = any(k.arg == "allow_nan" and isinstance(k.value, ast.Constant) and k.value.value is False
                              for k in node.keywords)
            if not strict_call:
                found.append((node.lineno, f"json.{node.func.attr} without allow_nan=False"))
    return found


def test_the_scan_sees_each_way_a_bare_nan_could_be_written():
    source = ("import json\nimport json as j\nfrom json import dumps\n"
              "json.dumps(1)\njson.dump(1, f, allow_nan=True)\njson.dumps(1, allow_nan=False)\n")
    assert [line for line, _ in _json_writers(source)] == [2, 3, 4, 5]


def test_every_json_writer_in_preflight_is_strict():
    """A json.dump(s) call writes NaN and Infinity as bare tokens unless it passes allow_nan=False:
    preflight's writers go through preflight.core.finite.dumps (NaN -> null), the workers through
    preflight.workers.wire.dumps (NaN -> a marker read back by preflight.core.jsonlines.loads)."""
    loose = []
    for path in sorted((ROOT / "preflight").rglob("*.py")) + sorted((ROOT / "checks").rglob("*.py")):
        loose += [f"{path.relative_to(ROOT)}:{line}: {what}"
                  for line, what in _json_writers(path.read_text(encoding="utf-8"))]
    assert loose == []


def test_finite_dumps_writes_null_for_nan_and_refuses_what_it_cannot_reach():
    assert strict(dumps({"a": [1.5, math.nan], "b": math.inf})) == {"a": [1.5, None], "b": None}
    with pytest.raises(ValueError):
        json_text(Measurement("loss", math.nan, ""))


def test_a_worker_line_with_a_nan_loss_is_json_and_reads_back_as_nan():
    line = wire.dumps({"ok": True, "losses": [2.3, math.nan, math.inf, -math.inf], "steps": (1, 2)})
    strict(line)
    assert wire.NONFINITE_KEY == jsonlines.NONFINITE_KEY
    (payload,) = jsonlines.json_objects(["noise", line])
    losses = payload["losses"]
    assert losses[0] == 2.3 and math.isnan(losses[1]) and losses[2:] == [math.inf, -math.inf]
    assert jsonlines.loads('{"$nonfinite": "NaN", "other": 1}') == {"$nonfinite": "NaN", "other": 1}


def test_an_error_file_with_a_nan_is_passed_on_by_the_guard_as_json(tmp_path, capsys):
    """torchelastic's error.json read by the guard on the node may hold what Python's json wrote."""
    from preflight.launch.torchrun_log import read_error_file
    from preflight.workers.guard import report_error_files

    rank_dir = tmp_path / "run" / "attempt_0" / "1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "error.json").write_text('{"message": {"message": "loss was NaN", "extraInfo": {"loss": NaN}}}')
    report_error_files(str(tmp_path))
    (line,) = capsys.readouterr().out.splitlines()
    _, _, rest = line.partition(" ")
    strict(rest.partition(" ")[2])
    assert read_error_file(rest) == {"local_rank": 1, "message": "loss was NaN"}
