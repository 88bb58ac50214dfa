"""junit.xml: one testcase per check and node, derived from the run report and its one verdict.

FAIL -> <failure>, ERROR -> <error>, SKIP -> <skipped>; WARN passes (with the warning in
system-out) unless the run blocks on warnings, then it is a <failure> too, so CI agrees with the verdict.
Beside the results:
- a planned result that never arrived is an <error> testcase of its own (type MISSING), under its
  check and node;
- a check plugin that failed to load is an <error> testcase (classname preflight.plugins, type
  LOAD-ERROR);
- the suite `preflight` holds one testcase, `verdict`, that is the verdict itself: it passes for GO,
  is a <failure> for NO-GO and an <error> for INCOMPLETE (and for an interrupted run that nothing
  blocks); a GO on a subset of the nodes only (run --shape, exit 4) is a <failure> of type SUBSET-GO,
  whatever the verdict. A CI test viewer that counts failures and errors therefore never shows green for a run
  whose exit code is not 0.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from preflight.core.compare import BASELINE_CHECK_ID, baseline_of
from preflight.core.model import CLUSTER_NODE, CheckResult, RunReport, Status
from preflight.reporters.baseline import describe
from preflight.reporters.safe_text import block, single_line
from preflight.reporters.view import decision_of, fixes, format_threshold, format_value
from preflight.core.verdict import Decision, Verdict

FILENAME = "junit.xml"  # what this reporter writes in the output directory


def _clean(text: str) -> str:
    """Machine text for XML 1.0, which cannot carry most control characters: neutralised (safe_text)."""
    return block(text)


_ATTRIBUTE_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("\r", "&#13;"),
                      ("\n", "&#10;"), ("\t", "&#09;"))
_TEXT_ESCAPES = _ATTRIBUTE_ESCAPES[:3]


def _escaped(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    for char, entity in escapes:
        if char in text:
            text = text.replace(char, entity)
    return text


class _Attributes(dict):
    """Attribute values as written, each neutralised and escaped once per document: a 1,000-node run
    names the same checks, nodes, times and types thousands of times."""

    def __missing__(self, value: str) -> str:
        self[value] = text = _escaped(single_line(value), _ATTRIBUTE_ESCAPES)
        return text


def _xml(element: ET.Element, out: list[str], level: int = 0, attributes: _Attributes | None = None) -> None:
    """`element` as ElementTree writes it after ET.indent (two spaces a level), the same bytes, with
    every attribute (a node's or a plugin's name: one line) and every text neutralised (safe_text) so
    that the document is valid XML whatever the names and outputs hold. Written here in one pass:
    neutralising, indenting and serialising a 1,000-node run's tree took three."""
    if attributes is None:
        attributes = _Attributes()
    out.append(f"<{element.tag}")
    for key, value in element.attrib.items():
        out.append(f' {key}="{attributes[value]}"')
    text = block(element.text) if element.text else element.text
    if len(element):
        inner = "\n" + "  " * (level + 1)
        out.append(">" + (_escaped(text, _TEXT_ESCAPES) if text and text.strip() else inner))
        for index, child in enumerate(element):
            if index:
                out.append(inner)
            _xml(child, out, level + 1, attributes)
        out.append(f"\n{'  ' * level}</{element.tag}>")
    elif text:
        out.append(f">{_escaped(text, _TEXT_ESCAPES)}</{element.tag}>")
    else:
        out.append(" />")


@dataclass
class _Reading:
    """What every result's testcase is judged and written by: the verdict, read once for the whole run."""
    decision: Decision
    blocking: set[int]  # ids of the results that block the verdict
    silenced: set[int]  # ids of the results whose blocking findings are all silenced
    unreachable: set[str]
    changes: list[str]  # the baseline's regressions, described, for its testcase's output


def render(report: RunReport) -> str:
    decision = decision_of(report)
    blocking = {id(r) for r in decision.blocking}
    # A result whose blocking findings are all silenced passes, as the verdict says, and says so.
    silenced = {id(f.result) for f in decision.acknowledged_findings} - blocking
    comparison = baseline_of(report)
    reading = _Reading(decision, blocking, silenced, {n.name for n in report.nodes if n.reachable is False},
                       [describe(c) for c in comparison.regressions[:20]] if comparison else [])
    suites = ET.Element("testsuites", name="preflight")
    by_check: dict[str, list] = {}
    for result in [*report.results, *decision.derived]:
        by_check.setdefault(result.check_id, []).append(result)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    checks = [_check_suite(report, check_id, results, reading) for check_id, results in by_check.items()]
    for suite, counts in [*checks, *_run_suites(report, decision)]:
        suites.append(suite)
        for key in totals:
            totals[key] += counts[key]
    for key, value in totals.items():
        suites.set(key, str(value))
    time_total = sum(sum(r.duration_s for r in results) for results in by_check.values())
    suites.set("time", f"{time_total:.3f}")
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n']
    _xml(suites, out)
    out.append("\n")
    return "".join(out)


def _check_suite(report: RunReport, check_id: str, results: list,
                 reading: _Reading) -> tuple[ET.Element, dict[str, int]]:
    """One check's testsuite: a testcase per result, the counts, and the baseline's properties if it is that."""
    counts = {"tests": len(results), "failures": 0, "errors": 0, "skipped": 0}
    suite = ET.Element("testsuite", name=check_id, timestamp=report.started_at[:19], hostname="preflight")
    if check_id == BASELINE_CHECK_ID and report.baseline:
        # CI test viewers show suite properties: which run this one was compared with, and how.
        properties = ET.SubElement(suite, "properties")
        for name in ("old_label", "old_started_at", "tolerance"):
            if report.baseline.get(name) not in (None, ""):
                ET.SubElement(properties, "property", name=f"baseline.{name}",
                              value=_clean(str(report.baseline[name])))
    for result in results:
        case, counted = _result_case(check_id, result, reading)
        suite.append(case)
        if counted:
            counts[counted] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{sum(r.duration_s for r in results):.3f}")
    return suite, counts


def _result_case(check_id: str, result: CheckResult, reading: _Reading) -> tuple[ET.Element, str]:
    """One result's testcase, and the count it adds to ("failures", "errors", "skipped", or "" for none)."""
    case = ET.Element("testcase", classname=check_id, name=result.node, time=f"{result.duration_s:.3f}")
    message = _clean(result.summary)
    body = _clean("\n".join(
        [f"{m.name}: {format_value(m)} {format_threshold(m)}".rstrip() for m in result.measurements]
        + [f"fix: {hint}" for hint in fixes(result, reading.unreachable)]))
    counted = ""
    blocks = id(result) in reading.blocking
    if id(result) in reading.silenced and result.status in (Status.ERROR, Status.FAIL, Status.WARN):
        body = "silenced in [silence]: " + ", ".join(
            f.id for f in reading.decision.acknowledged_findings if f.result is result) + ("\n" + body if body else "")
    elif result.status is Status.ERROR:
        counted = "errors"
        ET.SubElement(case, "error", message=message, type="ERROR").text = body
    elif result.status is Status.FAIL or (result.status is Status.WARN and blocks):
        counted = "failures"
        ET.SubElement(case, "failure", message=message, type=result.status.value).text = body
    elif result.status is Status.SKIP and blocks:
        # An expected check that skipped blocks the verdict: it must not look green in CI.
        counted = "failures"
        ET.SubElement(case, "failure", message=f"expected to run but skipped: {message}", type="SKIP").text = body
    elif result.status is Status.SKIP:
        counted = "skipped"
        ET.SubElement(case, "skipped", message=message)
    # Neutralised as it is written (_xml), as every text is: not here as well.
    out = "\n".join([f"{result.status.value}: {result.summary}", body] + list(result.details)
                    + (reading.changes if check_id == BASELINE_CHECK_ID else [])
                    + [f"$ {e.command}\n{e.output_tail}" for e in result.evidence])
    ET.SubElement(case, "system-out").text = out
    return case, counted


def _suite(name: str, report: RunReport, cases: list[ET.Element]) -> tuple[ET.Element, dict[str, int]]:
    suite = ET.Element("testsuite", name=name, timestamp=report.started_at[:19], hostname="preflight")
    counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
    for case in cases:
        counts["failures"] += case.find("failure") is not None
        counts["errors"] += case.find("error") is not None
        suite.append(case)
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", "0.000")
    return suite, counts


def _case(classname: str, name: str, outcome: str = "", message: str = "", kind: str = "") -> ET.Element:
    case = ET.Element("testcase", classname=classname, name=name, time="0.000")
    if outcome:
        ET.SubElement(case, outcome, message=_clean(message), type=kind).text = _clean(message)
    return case


def _run_suites(report: RunReport, decision) -> list[tuple[ET.Element, dict[str, int]]]:
    """The testcases that are not results: missing results, plugins not loaded, the verdict."""
    suites = []
    missing: dict[str, list[ET.Element]] = {}
    for check_id, node in decision.missing:
        where = "the cluster" if node == CLUSTER_NODE else node
        missing.setdefault(check_id, []).append(_case(
            check_id, node, "error", f"planned, but no result arrived from {where}: the run did not measure it",
            "MISSING"))
    suites += [_suite(check_id, report, cases) for check_id, cases in missing.items()]
    if report.load_errors:
        suites.append(_suite("preflight.plugins", report, [
            _case("preflight.plugins", str(e.get("entry_point", "?")), "error",
                  f"failed to load ({e.get('distribution', '?')}): {e.get('error', '')}; its checks did not run",
                  "LOAD-ERROR") for e in report.load_errors]))
    text = f"{decision.verdict.value}: {decision.reason}"
    if decision.subset_go:  # a GO on some nodes only (run --shape) is never a passing verdict
        verdict = _case("preflight", "verdict", "failure", text, "SUBSET-GO")
    elif decision.verdict is Verdict.NO_GO:
        verdict = _case("preflight", "verdict", "failure", text, "NO-GO")
    elif decision.verdict is Verdict.INCOMPLETE:
        verdict = _case("preflight", "verdict", "error", text, "INTERRUPTED" if report.interrupted else "INCOMPLETE")
    else:
        verdict = _case("preflight", "verdict")
        ET.SubElement(verdict, "system-out").text = _clean(text)
    suites.append(_suite("preflight", report, [verdict]))
    return suites
