"""junit.xml carries the verdict: what is missing, what did not load, and the verdict itself fail in CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from preflight.core.model import Status
from preflight.reporters import junit
from tests.conftest import DATA, make_report, make_result


def cases(text: str) -> dict:
    return {(c.get("classname"), c.get("name")): c for c in ET.fromstring(text).iter("testcase")}


def test_an_incomplete_run_is_not_green_in_junit():
    """All results that arrived passed, but two planned ones never came: INCOMPLETE, exit 3."""
    xmlschema = pytest.importorskip("xmlschema")
    report = make_report([make_result("node.environment", "n1", Status.PASS)], nodes=["n1", "n2"],
                         planned=["node.environment", "gpu.visibility"])
    text = junit.render(report)
    xmlschema.XMLSchema(str(DATA / "junit" / "junit.xsd")).validate(text)
    found = cases(text)
    missing = {key for key, case in found.items()
               if case.find("error") is not None and case.find("error").get("type") == "MISSING"}
    assert missing == {("node.environment", "n2"), ("gpu.visibility", "n1"), ("gpu.visibility", "n2")}
    assert found[("preflight", "verdict")].find("error").get("type") == "INCOMPLETE"
    root = ET.fromstring(text)
    assert root.get("failures") == "0" and root.get("errors") == "4"


def test_a_killed_run_with_nothing_but_passes_is_an_error_testcase():
    report = make_report([make_result("node.environment", "n1", Status.PASS)], incomplete=True, interrupted=True,
                         incomplete_reason="interrupted")
    found = cases(junit.render(report))
    assert found[("preflight", "verdict")].find("error").get("type") == "INTERRUPTED"


def test_a_plugin_that_failed_to_load_is_an_error_testcase():
    report = make_report([make_result("node.environment", "n1", Status.PASS)],
                         load_errors=[{"entry_point": "acme.check = acme:Check", "distribution": "acme 1.0",
                                       "error": "ImportError: no module named acme"}])
    found = cases(junit.render(report))
    assert found[("preflight.plugins", "acme.check = acme:Check")].find("error").get("type") == "LOAD-ERROR"
    assert found[("preflight", "verdict")].find("error") is not None


def test_a_go_run_has_a_passing_verdict_testcase_and_nothing_failing():
    report = make_report([make_result("node.environment", "n1", Status.PASS)])
    root = ET.fromstring(junit.render(report))
    assert root.get("failures") == "0" and root.get("errors") == "0"
    verdict = cases(junit.render(report))[("preflight", "verdict")]
    assert verdict.find("failure") is None and verdict.find("error") is None


def _as_elementtree_writes(root: ET.Element) -> str:
    """What junit.xml was before it was written in one pass: every attribute and text neutralised, then
    ElementTree's own indent and serialisation."""
    from preflight.reporters.safe_text import block, single_line

    for element in root.iter():
        for key, value in element.attrib.items():
            element.set(key, single_line(value))
        if element.text:
            element.text = block(element.text)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


HOSTILE = ["", " ", "plain", 'a "quoted" <tag> & more', "two\nlines\r\nand\ttabs", "\x1b[31mred\x1b[0m \x00\x07\x0b",
           "]]> <!-- -->", "ünïcödé — ✓", "\n  \n"]


@pytest.mark.parametrize("text", HOSTILE)
def test_junit_xml_is_written_as_elementtree_writes_it_whatever_the_names_and_outputs_hold(text):
    def tree() -> ET.Element:
        root = ET.Element("testsuites", {"name": text, "tests": "2"})
        suite = ET.SubElement(root, "testsuite", {"name": f"node {text}"})
        case = ET.SubElement(suite, "testcase", {"classname": text, "name": "n1"})
        ET.SubElement(case, "failure", {"message": text, "type": "FAIL"}).text = text
        ET.SubElement(case, "system-out").text = text
        ET.SubElement(suite, "testcase", {"name": "empty"})
        return root

    out: list[str] = []
    junit._xml(tree(), out)
    written = "".join(out)
    assert written == _as_elementtree_writes(tree())
    ET.fromstring(written)  # valid XML
