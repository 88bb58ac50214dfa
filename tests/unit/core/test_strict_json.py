"""Strict JSON everywhere: NaN and infinity never reach a results file as bare tokens."""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.compare import compare
from preflight.core.finite import facts_lost_values, make_finite
from preflight.core.model import Measurement, Status
from preflight.core.results_file import header_line, read_results
from preflight.reporters import json_report
from tests.conftest import make_report, make_result


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
