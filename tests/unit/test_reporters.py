"""Reporters are pure functions of the run report: golden files, schema validation, escaping."""

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from preflight.model import Evidence, RunReport, Status
from preflight.reporters import html, json_report, junit, markdown, terminal
from tests.conftest import DATA, make_report, make_result

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
    schema = json.loads((Path(__file__).parents[2] / "preflight" / "schema" / "run-report.schema.json").read_text())
    jsonschema.validate(json.loads(json_report.render(sample_report)), schema)


def test_junit_validates_against_xsd_and_maps_statuses(sample_report):
    xmlschema = pytest.importorskip("xmlschema")
    text = junit.render(sample_report)
    xmlschema.XMLSchema(str(DATA / "junit" / "junit.xsd")).validate(text)
    root = ET.fromstring(text)
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert len(cases) == len(sample_report.results)
    assert cases[("gpu.visibility", "gpu02")].find("failure") is not None
    assert cases[("checkpoint.roundtrip", "gpu02")].find("error") is not None
    assert cases[("checkpoint.roundtrip", "gpu01")].find("skipped") is not None
    assert list(cases[("node.environment", "gpu02")]) [0].tag == "system-out"  # WARN passes by default
    assert root.get("failures") == "2" and root.get("errors") == "1" and root.get("skipped") == "1"


def test_junit_blocks_on_warn_and_expected_skip_like_the_verdict():
    report = make_report([make_result("a.b", status=Status.WARN), make_result("gpu.visibility", status=Status.SKIP)],
                         fail_on="warn", expected=["gpu.visibility"])
    root = ET.fromstring(junit.render(report))
    assert root.get("failures") == "2" and root.get("skipped") == "0"


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
    assert "<script>" not in text
    assert "&lt;script&gt;" in text
    assert "[link](http://evil)" not in text and "\\[link\\]" in text
    assert "**bold**" not in text.replace("**NO-GO**", "").replace("**Example", "")
    # Table cells must not be split by a pipe from the machine.
    for line in text.splitlines():
        if line.startswith("| example.echo"):
            assert line.count(" | ") + 2 == line.count("|") - line.count("\\|")


def test_junit_strips_control_characters():
    report = make_report([make_result(summary="bad \x1b[31mcolour\x00", status=Status.FAIL)])
    root = ET.fromstring(junit.render(report))
    assert root.find(".//failure").get("message") == "bad [31mcolour"
