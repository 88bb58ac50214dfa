"""Reporters are pure functions of the run report: golden files, schema validation, escaping."""

import copy
import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

from preflight.core.model import Evidence, RunReport, Status
from preflight.reporters import html, json_report, junit, markdown, terminal
from tests.conftest import DATA, make_report, make_result
from tests.conftest import ROOT

GOLDEN = DATA / "reports" / "golden"
HOSTILE = '<script>alert("x")</script> `rm -rf` **bold** [link](http://evil) | pipe & amp'


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PREFLIGHT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs; set PREFLIGHT_UPDATE_GOLDEN=1 to accept deliberate changes"


def test_markdown_golden(sample_report):
    check_golden("report.md", markdown.render(sample_report))


def test_html_golden(sample_report):
    check_golden("report.html", html.render(sample_report))


def test_terminal_golden(sample_report):
    check_golden("terminal.txt", terminal.render(sample_report))


def test_markdown_puts_verdict_and_blockers_first(sample_report):
    text = markdown.render(sample_report)
    first_lines = text.splitlines()[:12]
    assert "**NO-GO**" in first_lines[0]
    blockers = text.index("What blocks the verdict")
    assert blockers < text.index("Cluster at a glance") < text.index("Measurements")
    assert "7 GPUs visible, 8 expected" in text[blockers:text.index("Cluster at a glance")]


def test_html_is_self_contained(sample_report):
    page = html.render(sample_report)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.index('id="verdict"') < page.index('id="blocking"') < page.index('id="checks"')
    assert "@media print" in page


def test_json_carries_schema_version_and_verdict(sample_report):
    data = json.loads(json_report.render(sample_report))
    assert data["schema_version"] == 1
    assert data["verdict"]["verdict"] == "NO-GO" and data["verdict"]["exit_code"] == 1
    assert RunReport.from_dict(data) == sample_report


def test_json_matches_documented_schema(sample_report):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "preflight" / "schema" / "run-report.schema.json").read_text())
    jsonschema.validate(json.loads(json_report.render(sample_report)), schema)


def test_junit_validates_against_xsd_and_maps_statuses(sample_report):
    xmlschema = pytest.importorskip("xmlschema")
    text = junit.render(sample_report)
    xmlschema.XMLSchema(str(DATA / "junit" / "junit.xsd")).validate(text)
    root = ET.fromstring(text)
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert len(cases) == len(sample_report.results) + 1  # and the verdict's own testcase
    assert cases[("preflight", "verdict")].find("failure").get("type") == "NO-GO"
    assert cases[("gpu.visibility", "gpu02")].find("failure") is not None
    assert cases[("checkpoint.roundtrip", "gpu02")].find("error") is not None
    assert cases[("checkpoint.roundtrip", "gpu01")].find("skipped") is not None
    assert list(cases[("node.environment", "gpu02")]) [0].tag == "system-out"  # WARN passes by default
    assert root.get("failures") == "3" and root.get("errors") == "1" and root.get("skipped") == "1"


def test_junit_blocks_on_warn_and_expected_skip_like_the_verdict():
    report = make_report([make_result("a.b", status=Status.WARN), make_result("gpu.visibility", status=Status.SKIP)],
                         fail_on="warn", expected=["gpu.visibility"])
    root = ET.fromstring(junit.render(report))
    assert root.get("failures") == "3" and root.get("skipped") == "0"  # the WARN, the SKIP and the verdict


def hostile_report() -> RunReport:
    return make_report([make_result(
        "example.echo", f"node-{HOSTILE}", Status.FAIL, f"output was {HOSTILE}",
        remediation=[f"run {HOSTILE}"], details=[HOSTILE],
        evidence=[Evidence(command=f"echo {HOSTILE}", exit_code=1, output_tail=f"{HOSTILE}\n```\n{HOSTILE}")])])


def test_html_escapes_text_from_the_machine():
    page = html.render(hostile_report())
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page


def test_markdown_escapes_text_from_the_machine():
    text = markdown.render(hostile_report())
    assert not re.search(r"(?<!\\)<script", text)  # no raw HTML
    assert "\\<script>" in text and "&lt;" not in text  # escaped for Markdown, not for HTML
    assert "[link](http://evil)" not in text and "\\[link\\]" in text
    assert "**bold**" not in text.replace("**NO-GO**", "").replace("**Example", "")
    # Table cells must not be split by a pipe from the machine.
    for line in text.splitlines():
        if line.startswith("| example.echo"):
            assert line.count(" | ") + 2 == line.count("|") - line.count("\\|")


def test_junit_neutralises_control_characters():
    report = make_report([make_result(summary="bad \x1b[31mcolour\x00", status=Status.FAIL, node="n\x01\ud800")])
    root = ET.fromstring(junit.render(report).encode("utf-8"))
    assert root.find(".//failure").get("message") == "bad colour\\x00"
    assert root.find(".//failure/..").get("name") == "n\\x01\\ud800"


# -- a run compared with its baseline: every report shows it -----------------------------------------

def regressed_run(sample_report: RunReport) -> RunReport:
    from preflight.core.compare import attach

    baseline = copy.deepcopy(sample_report)
    baseline.started_at = "2026-11-22T10:00:00+00:00"
    baseline.result_for("gpu.visibility", "gpu02").status = Status.PASS
    baseline.results[-1].measurements[0].value = 9.8  # the link was faster
    attach(sample_report, baseline, label="known-good/results.json")
    return sample_report


def test_every_report_shows_the_baseline_comparison(sample_report):
    report = regressed_run(sample_report)
    page = html.render(report)
    section = page[page.index('id="baseline"'):page.index('id="matrix"')]
    assert "2 figures regressed" not in section  # one status and one figure
    assert "1 status got worse and 1 figure regressed by more than 10%" in section
    assert "known-good/results.json" in section and '<tr class="regression">' in section

    text = markdown.render(report)
    assert "### ❌ Against the baseline run of 2026-11-22 10:00 (`known-good/results.json`)" in text
    assert "- gpu.visibility on gpu02: PASS -> FAIL" in text
    assert text.index("What blocks the verdict") < text.index("Against the baseline") < text.index("Measurements")

    data = json.loads(json_report.render(report))
    assert data["baseline"]["old_label"] == "known-good/results.json"
    assert [c["kind"] for c in data["baseline"]["statuses"]] == ["regression"]

    lines = terminal.render(report)
    assert "Baseline:\n  1 status got worse" in lines
    assert "  regression: gpu.visibility on gpu02: PASS -> FAIL" in lines

    root = ET.fromstring(junit.render(report))
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "baseline.comparison")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["baseline.old_label"] == "known-good/results.json"
    case = suite.find("testcase")
    assert case.find("failure") is None  # a warning: regressions block only with --fail-on-regression
    assert "gpu.visibility on gpu02: PASS -> FAIL" in case.find("system-out").text


def test_junit_with_a_baseline_still_validates(sample_report):
    xmlschema = pytest.importorskip("xmlschema")
    xmlschema.XMLSchema(str(DATA / "junit" / "junit.xsd")).validate(junit.render(regressed_run(sample_report)))


def test_html_of_a_cluster_run_is_self_contained_with_every_chart():
    pytest.importorskip("matplotlib")
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    page = html.render(RunReport.from_dict(data))
    assert page.count('<figure class="chart">') == 5 and page.count("<svg ") == 5
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.index('id="verdict"') < page.index('id="blocking"') < page.index('id="findings"') \
        < page.index('id="charts"') < page.index('id="matrix"') < page.index('id="checks"')
    assert page.count("<details>") >= 1 and 'class="noisy"' in page


def test_markdown_of_a_large_cluster_fits_a_pull_request_comment():
    from preflight.core.model import Measurement
    from preflight.reporters.markdown import MAX_MEASUREMENT_ROWS

    results = [make_result("collectives.local", f"node{n:03d}", Status.PASS, measurements=[
        Measurement(f"busbw at {1 << k} MiB", 400.0 + k, "GB/s", 300.0, ">=", True) for k in range(10)])
        for n in range(64)]
    results[-1].status = Status.FAIL
    results[-1].measurements[-1].value, results[-1].measurements[-1].ok = 12.0, False
    text = markdown.render(make_report(results))
    assert len(text) < 65536
    # 63 nodes that measured the same are one row per figure, with their node set; the failing node its own.
    assert sum(line.startswith("| collectives.local |") for line in text.splitlines()) == 20
    assert "| collectives.local | node\\[000-062\\] | busbw at 512 MiB | 409 GB/s |" in text
    assert "| node063 | busbw at 512 MiB | 12 GB/s ❌ |" in text  # the failing figure is kept
    assert "| node\\[000-062\\] (63 nodes) | ✅ PASS |" in text and "| node063 | ❌ FAIL |" in text
    # Figures that differ on every node still fit: capped, the failing ones first.
    for n, result in enumerate(results):
        for m in result.measurements:
            m.value = float(m.value) + n / 100
    text = markdown.render(make_report(results))
    assert len(text) < 65536
    assert sum(line.startswith("| collectives.local |") for line in text.splitlines()) == MAX_MEASUREMENT_ROWS
    assert "| node063 | busbw at 512 MiB | 12.6 GB/s ❌ |" in text
    assert f"{640 - MAX_MEASUREMENT_ROWS} more figures are in report.html and results.json." in text


def test_markdown_has_no_html_entities_and_keeps_code_spans():
    report = make_report([make_result("acme.link", "cluster", Status.FAIL, "198.18.9.4 -> 198.18.9.5 carries 1 Gbit/s "
                                      "& drops", remediation=["Run `ethtool -S eth0 | grep err` on both ends."])])
    text = markdown.render(report)
    assert "198.18.9.4 -> 198.18.9.5" in text and "&gt;" not in text and "&amp;" not in text
    assert "`ethtool -S eth0 \\| grep err`" in text  # a code span, not literal escaped backticks
    assert "\\`" not in text


def test_a_report_of_a_check_no_reporter_knows_draws_its_chart_and_finding():
    pytest.importorskip("matplotlib")
    from preflight.core.check import measure
    from preflight.core.model import FIGURE_SIZE

    results = [make_result("acme.ping", "n1", Status.PASS, title="Acme ping latency", measurements=[
        measure("latency", v, "us", at_most=50.0, figure=FIGURE_SIZE, series="udp", at=size)
        for size, v in ((64, 12.0), (1024, 14.0), (65536, 31.0))])]
    report = make_report(results)
    page = html.render(report)
    assert page.count('<figure class="chart">') == 1 and "Acme ping latency" in page
    assert "Udp reaches 31 us at 64 KiB, at most the 50 us needed" in page


def test_markdown_escapes_only_what_would_turn_into_markup():
    from preflight.reporters.markdown_text import md_escape

    assert md_escape("NCCL_DEBUG=INFO _x_ *b* [l](u) <s> & 1 -> 2") == \
        "NCCL_DEBUG=INFO \\_x\\_ \\*b\\* \\[l\\](u) \\<s> \\& 1 -> 2"
    assert md_escape("run `a | b` and ` alone") == "run `a \\| b` and ' alone"


def test_the_terminal_lists_the_caveats_with_their_fixes():
    from preflight.core.model import Finding

    caveat = Finding("node.environment.shm.caveat", Status.PASS, "measured in a container", "run on the host")
    text = terminal.render(make_report([make_result(findings=[caveat])]))
    assert "Caveats (1):" in text and "NOTE  node.environment" in text and "fix: run on the host" in text


def test_the_terminal_lists_ten_baseline_regressions_and_counts_the_rest():
    from preflight.core.compare import attach

    nodes = [f"n{i:02d}" for i in range(12)]
    baseline = make_report([make_result(node=n) for n in nodes])
    report = make_report([make_result(node=n, status=Status.FAIL) for n in nodes])
    attach(report, baseline)
    text = terminal.render(report)
    assert text.count("  regression: ") == 10 and "... and 2 more" in text
