"""Findings as data: one helper derives a check's outcome, and each finding carries its own fix."""

from __future__ import annotations

import pytest

from preflight.core.check import Check, measure, outcome_from_findings
from preflight.engine.execute import result_from_outcome
from preflight.core.model import CheckResult, Finding, Status


def test_worst_finding_decides_status_summary_and_fixes():
    findings = [
        Finding("x.ok-part", Status.PASS, "shm is large enough"),
        Finding("x.hostname-loopback", Status.WARN, "hostname resolves to loopback", fix="fix /etc/hosts"),
        Finding("x.no-shm", Status.FAIL, "/dev/shm is missing", fix="mount /dev/shm"),
        Finding("x.small-disk", Status.FAIL, "little free disk", fix="free disk space"),
    ]
    outcome = outcome_from_findings(findings, passed="all good")
    assert outcome.status is Status.FAIL
    assert outcome.summary == "/dev/shm is missing; little free disk"
    # Every fired finding's own fix, in order, and none of a finding that did not fire.
    assert outcome.remediation == ["fix /etc/hosts", "mount /dev/shm", "free disk space"]
    assert [f.id for f in outcome.findings] == ["x.ok-part", "x.hostname-loopback", "x.no-shm", "x.small-disk"]


def test_no_findings_worse_than_pass_is_pass_with_the_passed_sentence():
    outcome = outcome_from_findings([Finding("x.fine", Status.PASS, "fine")], passed="3 GPUs healthy")
    assert (outcome.status, outcome.summary, outcome.remediation) == (Status.PASS, "3 GPUs healthy", [])


def test_result_carries_findings_and_only_their_fixes():
    class Demo(Check):
        id = "demo.check"
        remediation = ("generic advice that fits no particular cause",)

    outcome = outcome_from_findings([Finding("demo.check.cause", Status.WARN, "a cause", fix="its own fix")],
                                    passed="ok")
    result = result_from_outcome(Demo, outcome, node="n1")
    assert result.remediation == ["its own fix"]
    again = CheckResult.from_dict(result.to_dict())
    assert again.findings == result.findings
    assert again.findings[0].level is Status.WARN


def test_measure_equals_and_figure_declaration():
    m = measure("GPUs", 8, "", equals=8, figure=None)
    assert (m.threshold, m.comparison, m.ok) == (8, "==", True)
    assert measure("GPUs", 7, "", equals=8).ok is False
    bw = measure("busbw", 390.0, "GB/s", at_least=360.0, figure="size", series="nccl", at=256 << 20)
    assert (bw.figure, bw.series, bw.at, bw.direction) == ("size", "nccl", 256 << 20, "higher")
    assert measure("latency", 3.0, "us", at_most=5.0).direction == "lower"
    with pytest.raises(ValueError):
        measure("x", 1, at_least=1, equals=1)
