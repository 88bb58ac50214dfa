import json

import pytest

from preflight.core.model import SCHEMA_VERSION, CheckResult, Measurement, RunReport, Status


def test_report_round_trips_through_json(sample_report):
    data = json.loads(json.dumps(sample_report.to_dict()))
    again = RunReport.from_dict(data)
    assert again == sample_report
    assert again.results[0].status is Status.PASS
    assert isinstance(again.results[-1].measurements[0], Measurement)


def test_result_json_line_round_trips():
    result = CheckResult("x.y", "n1", Status.ERROR, "boom", facts={"a": [1, 2]})
    assert CheckResult.from_dict(json.loads(result.to_json_line())) == result


def test_unknown_schema_version_is_refused(sample_report):
    data = sample_report.to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="schema_version"):
        RunReport.from_dict(data)


def test_spread_is_relative_to_median():
    m = Measurement("bw", 10.0, "Gbps", samples=[9.0, 10.0, 11.0])
    assert m.spread == pytest.approx(0.2)
    assert Measurement("bw", 1.0, samples=[1.0]).spread is None
