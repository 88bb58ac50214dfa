"""Every artifact a machine reads says the same thing as the exit code.

For generated run reports (every status, missing results, incomplete and interrupted runs, plugins
that failed to load, baselines with and without regressions), `preflight report` is run on the
results file and each report it writes is read the way a machine reads it: results.json's verdict
and exit code, junit.xml's failures and errors, the Markdown and HTML headlines, the Prometheus
verdict and exit-code metrics, the terminal summary. They must all agree with the exit code.
"""

from __future__ import annotations

import json
import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preflight.cli.main import cli
from preflight.core.compare import attach
from preflight.core.findings import findings_of
from preflight.core.model import CLUSTER_NODE, Measurement, NodeInfo, RunReport, Scope, Status
from preflight.core.verdict import decide
from preflight.reporters import json_report
from tests.conftest import make_result

NODE_CHECKS = ("alpha.one", "beta.two")
CLUSTER_CHECK = "gamma.cluster"
CODES = {"GO": 0, "NO-GO": 1, "INCOMPLETE": 3}
FORMATS = "json,junit,md,html,prometheus"


@st.composite
def run_reports(draw) -> RunReport:
    nodes = draw(st.lists(st.sampled_from(["n1", "n2", "n3"]), min_size=1, max_size=3, unique=True))
    planned = draw(st.lists(st.sampled_from([*NODE_CHECKS, CLUSTER_CHECK]), min_size=1, max_size=3, unique=True))
    results = []
    for check_id in planned:
        where = [CLUSTER_NODE] if check_id == CLUSTER_CHECK else nodes
        for node in where:
            if draw(st.integers(0, 9)) == 0:
                continue  # a planned result that never arrived
            status = draw(st.sampled_from(list(Status)))
            value = draw(st.floats(1, 100))
            results.append(make_result(check_id, node, status, f"{status.value.lower()} here",
                                       scope=Scope.CLUSTER if check_id == CLUSTER_CHECK else Scope.NODE,
                                       measurements=[Measurement("rate", value, "GB/s", 10.0, ">=", value >= 10)]))
    interrupted = draw(st.booleans()) and draw(st.booleans())
    load_errors = [{"entry_point": "broken.check = broken:Check", "distribution": "broken 1.0",
                    "error": "ImportError: nope"}] if draw(st.integers(0, 4)) == 0 else []
    report = RunReport(
        started_at="2026-11-29T10:00:00+00:00", finished_at="2026-11-29T10:01:00+00:00", preflight_version="0.1.0",
        nodes=[NodeInfo(name=n) for n in nodes], planned=planned,
        cluster_checks=[c for c in planned if c == CLUSTER_CHECK], results=results,
        fail_on=draw(st.sampled_from(["fail", "warn"])),
        expected=draw(st.lists(st.sampled_from(planned), unique=True, max_size=2)),
        incomplete=interrupted or draw(st.integers(0, 5)) == 0, interrupted=interrupted, load_errors=load_errors)
    ids = sorted({f.id for r in results for f in findings_of(r)})
    if ids and draw(st.booleans()):  # [silence] of some findings, now and then all of them
        chosen = ids if draw(st.booleans()) else draw(st.lists(st.sampled_from(ids), unique=True, max_size=3))
        report.silenced = {i: {"reason": "accepted", "until": ""} for i in chosen}
    if report.incomplete:
        report.incomplete_reason = "interrupted" if interrupted else "the run was stopped"
    if draw(st.booleans()):
        baseline = RunReport(started_at="2026-11-28T10:00:00+00:00", planned=planned, nodes=report.nodes,
                             results=[make_result(r.check_id, r.node, draw(st.sampled_from([Status.PASS, Status.WARN])),
                                                  "before", scope=r.scope,
                                                  measurements=[Measurement("rate", draw(st.floats(1, 100)), "GB/s",
                                                                            10.0, ">=")])
                                      for r in results if draw(st.integers(0, 5))]
                             + [make_result(NODE_CHECKS[0], nodes[0], Status.PASS, "gone since")])
        attach(report, baseline, 0.1, label="baseline.json", fail_on_regression=draw(st.booleans()))
    return report


def read_artifacts(out: Path) -> dict:
    data = json.loads((out / "results.json").read_text())
    root = ET.fromstring((out / "junit.xml").read_text())
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    prom = (out / "preflight.prom").read_text()
    reached = re.findall(r'^preflight_verdict\{verdict="([A-Z-]+)"\} 1\.0$', prom, re.M)
    code = re.search(r"^preflight_exit_code ([0-9.]+)$", prom, re.M)
    md_first = (out / "report.md").read_text().splitlines()[0]
    md_text = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    return {
        "json": data["verdict"]["verdict"], "json_code": data["verdict"]["exit_code"],
        "failures": int(root.get("failures")), "errors": int(root.get("errors")),
        "verdict_case": cases[("preflight", "verdict")],
        "missing": [c for c in root.iter("testcase") if c.find("error") is not None
                    and c.find("error").get("type") == "MISSING"],
        "load_errors": [c for c in root.iter("testcase") if c.get("classname") == "preflight.plugins"],
        "prometheus": reached, "prometheus_code": int(float(code.group(1))) if code else None,
        "md": md_first, "md_text": md_text, "html": html, "html_title": re.search(r"<title>preflight: ([A-Z-]+)</title>", html).group(1),
    }


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_reports())
def test_every_artifact_agrees_with_the_exit_code(report):
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "run" / "results.json"
        results.parent.mkdir()
        results.write_text(json_report.render(report))
        out = Path(tmp) / "out"
        done = CliRunner().invoke(cli, ["report", str(results), "--format", FORMATS, "--out", str(out)])
        assert done.exception is None or isinstance(done.exception, SystemExit), done.output
        code = done.exit_code
        seen = read_artifacts(out)
    decision = decide(report)
    verdict = decision.verdict.value
    assert code == decision.exit_code == seen["json_code"] == seen["prometheus_code"]
    assert code == (130 if report.interrupted else CODES[verdict])
    assert seen["json"] == verdict and seen["prometheus"] == [verdict] and seen["html_title"] == verdict
    assert f"**{verdict}**" in seen["md"]
    assert f"preflight: {verdict}" in done.output
    outcome = [child.tag for child in seen["verdict_case"] if child.tag in ("failure", "error")]
    if verdict == "GO":
        assert seen["failures"] == seen["errors"] == 0 and outcome == []
        assert not report.interrupted and not report.load_errors and not decision.missing
        if decision.acknowledged_findings:  # a GO that silenced something says so, everywhere
            n = len(decision.acknowledged_findings)
            said = f"GO with {n} silenced finding{'s' if n != 1 else ''}"
            for text in (done.output, seen["md_text"], seen["html"], ET.tostring(seen["verdict_case"], "unicode")):
                assert said in text and "every check passed" not in text.lower()
    elif verdict == "NO-GO":
        assert outcome == ["failure"] and seen["failures"] >= 1
    else:
        assert outcome == ["error"] and seen["failures"] == 0 and seen["errors"] >= 1
    assert len(seen["missing"]) == len(decision.missing)
    assert len(seen["load_errors"]) == len(report.load_errors)
