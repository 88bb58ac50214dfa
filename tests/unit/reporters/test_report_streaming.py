"""results.json is written item by item (one result per line) and reads back as the whole report;
every format can be written to an open file, streamed or not; model objects encode to the JSON that
their to_dict() would."""

from __future__ import annotations

import io
import json
import math

from preflight.core.model import Evidence, Finding, Measurement, RunReport, Status, json_text
from preflight.reporters import json_report, markdown, writer
from tests.conftest import make_report, make_result


def test_results_json_streams_one_result_per_line_and_reads_back_as_the_report(sample_report):
    streamed = io.StringIO()
    json_report.write(sample_report, streamed)
    text = streamed.getvalue()
    assert text == json_report.render(sample_report)
    data = json.loads(text)
    assert RunReport.from_dict(data) == sample_report
    assert data["verdict"]["verdict"] == "NO-GO"
    lines = text.splitlines()
    rows = [json.loads(row.strip().rstrip(",")) for row in lines if row.lstrip().startswith('{"check_id"')]
    for result in sample_report.results:
        matching = [row for row in rows if row["check_id"] == result.check_id and row["node"] == result.node]
        assert matching == [result.to_dict()]  # a result is one line of its own
    assert lines[0] == "{" and lines[-1] == "}"
    assert '  "schema_version": 1,' in lines


def test_results_json_keeps_the_keys_sorted_at_every_depth(sample_report):
    data = json.loads(json_report.render(sample_report))

    def sorted_everywhere(value) -> bool:
        if isinstance(value, dict):
            return list(value) == sorted(value) and all(sorted_everywhere(v) for v in value.values())
        if isinstance(value, list):
            return all(sorted_everywhere(v) for v in value)
        return True

    assert sorted_everywhere(data)


def test_json_text_writes_what_to_dict_would():
    result = make_result("net.bandwidth", "gpu01", Status.WARN, "slow",
                         measurements=[Measurement("bandwidth", 4.2, "Gbps", 10, ">=", False, [4.1, 4.3],
                                                   figure="link", at="a -> b")],
                         findings=[Finding("net.bandwidth.slow-link", Status.WARN, "slow", fix="reseat")],
                         evidence=[Evidence("iperf3 -c b", 0, "tail\x01", 1.5)],
                         facts={"nested": {"b": [1, 2.5, None, True], "a": ("x", "y")}, "ratio": math.pi})
    report = make_report([result], nodes=["gpu01"])
    assert json_text(result, sort_keys=True) == json.dumps(result.to_dict(), sort_keys=True, default=str)
    assert json_text(report, sort_keys=True) == json.dumps(report.to_dict(), sort_keys=True, default=str)
    assert result.to_json_line() == json.dumps(result.to_dict(), sort_keys=True, default=str)


def test_every_format_has_a_writer_the_streamed_one_and_the_rendered_ones_alike(sample_report):
    for fmt, module in (("json", json_report), ("md", markdown)):
        out = io.StringIO()
        writer(fmt)(sample_report, out)
        assert out.getvalue() == module.render(sample_report)


def test_reporters_run_one_after_another_share_one_view_of_the_report_and_only_then(sample_report):
    from preflight.reporters.view import build_view, shared

    assert build_view(sample_report) is not build_view(sample_report)  # a pure function outside
    with shared():
        first = build_view(sample_report)
        assert build_view(sample_report) is first
        assert build_view(sample_report, 0.5) is not first  # another threshold, another view
        other = make_report(list(sample_report.results), nodes=["gpu01", "gpu02"])
        assert build_view(other) is not first
    assert build_view(sample_report) is not first
