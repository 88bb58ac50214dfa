"""Every report is a list of findings: blocking ones first with their own fix, then warnings (also
those inside a failing check), then what was not measured."""

import json

from preflight.core.check import Expect
from preflight.core.model import Finding, NodeInfo, RunReport, Status
from preflight.reporters import html, json_report, markdown, terminal
from preflight.reporters.view import build_view
from preflight.engine.execute import result_from_outcome
from preflight_checks.node.environment import NodeEnvironment
from tests.conftest import load_facts, make_report, make_result


def quickstart_without_frameworks() -> RunReport:
    """node.environment on a machine with neither framework, a loopback hostname and low limits, as a
    newcomer's first run finds it: real evaluate() on recorded facts."""
    facts = load_facts("node_environment/docker_defaults.json")
    facts.pop("_source")
    facts.update(shm_total_bytes=8 << 30, hostname="vm", hostname_addresses=["127.0.1.1"],
                 frameworks={"torch": False, "tensorflow": False}, nvidia_gpus=[])
    outcome = NodeEnvironment().evaluate(facts, NodeEnvironment.Params(), Expect())
    result = result_from_outcome(NodeEnvironment, outcome, node="vm", facts=facts)
    return RunReport(started_at="2026-11-29T10:00:00+00:00", finished_at="2026-11-29T10:00:09+00:00",
                     nodes=[NodeInfo("vm")], planned=["node.environment"], results=[result])


def test_the_blocker_comes_with_its_own_fix_and_the_warnings_of_the_same_check_are_listed():
    report = quickstart_without_frameworks()
    assert report.results[0].status is Status.FAIL
    view = build_view(report)
    assert [f.id for f in view.blocking] == ["node.environment.no-framework"]
    assert "expect.frameworks = []" in view.blocking[0].fix
    assert [f.id for f in view.warnings] == ["node.environment.memlock-limited", "node.environment.nofile-low",
                                             "node.environment.hostname-loopback"]
    assert all(f.fix for f in view.warnings)

    blocker = view.blocking[0]
    memlock_fix = view.warnings[0].fix
    text = terminal.render(report)
    blocking, warnings = text.split("Warnings (3):")
    # Under the blocker: its own fix, not the memlock or nofile fix.
    assert blocker.message in blocking and f"fix: {blocker.fix}" in blocking and memlock_fix not in blocking
    assert "hostname 'vm' resolves only to 127.0.1.1" in warnings and memlock_fix in warnings

    md = markdown.render(report)
    section = md[md.index("### What blocks the verdict"):md.index("### Warnings")]
    assert "expect.frameworks = \\[\\]" in section or "expect.frameworks = []" in section
    assert "memlock" not in section.split("Fix:")[1]
    assert "resolves only to 127.0.1.1" in md[md.index("### Warnings"):]

    page = html.render(report)
    section = page[page.index('id="blocking"'):page.index('id="warnings"')]
    assert "expect.frameworks = []" in section and "limits.conf" not in section
    assert "resolves only to 127.0.1.1" in page[page.index('id="warnings"'):page.index('id="glance"')]

    data = json.loads(json_report.render(report))["verdict"]["findings"]
    assert [f["id"] for f in data["blocking"]] == ["node.environment.no-framework"]
    assert [f["id"] for f in data["warnings"]] == [f.id for f in view.warnings]
    assert data["blocking"][0]["fix"] == blocker.fix


def test_the_headline_names_the_blocking_finding_in_plain_words():
    view = build_view(quickstart_without_frameworks())
    assert view.verdict == "NO-GO"
    assert view.reason.startswith("1 blocking finding: neither PyTorch nor TensorFlow is installed")
    first_line = terminal.render(quickstart_without_frameworks()).splitlines()[0]
    assert "neither PyTorch nor TensorFlow is installed" in first_line


def test_the_same_finding_on_many_nodes_is_one_row_with_the_node_set():
    finding = Finding("node.environment.nofile-low", Status.WARN, "open-files limit is 1024, below 65536", "Raise it.")
    results = [make_result("node.environment", f"gpu{n:03d}", Status.WARN, finding.message, findings=[finding])
               for n in range(1, 65) if n != 17]
    results.append(make_result("node.environment", "gpu017", Status.PASS))
    view = build_view(make_report(results))
    assert len(view.warnings) == 1
    assert view.warnings[0].nodeset == "gpu[001-016,018-064]"
    assert view.warnings[0].where == "on gpu[001-016,018-064] (63 nodes)"
    assert "gpu[001-016,018-064] (63 nodes): open-files limit" in terminal.render(make_report(results))


def test_what_the_run_level_left_out_is_one_line():
    skipped = [make_result(cid, "n1", Status.SKIP, "not run at --level quick: slow",
                           findings=[Finding(f"{cid}.skipped-at-level", Status.SKIP, "not run at --level quick: slow",
                                             "run with --level standard to include it")])
               for cid in ("collectives.local", "canary.training")]
    report = make_report([make_result(), *skipped], level="quick")
    view = build_view(report)
    assert view.skipped == [] and view.level_skips.check_ids == ["collectives.local", "canary.training"]
    text = terminal.render(report)
    assert "SKIP  at --level quick: collectives.local, canary.training" in text
    assert text.count("not run at --level quick") == 0


def test_a_loader_compared_with_nothing_is_a_warning_on_every_node_not_a_pass():
    from tests.unit.core.test_findings import cluster_run

    report = cluster_run()
    loader = report.results_for("dataloader.throughput")
    assert loader and all(r.status is Status.WARN for r in loader)
    view = build_view(report)
    rows = [f for f in view.warnings if f.id == "dataloader.throughput.no-demand"]
    assert {n for f in rows for n in f.nodes} == {"gpu01", "gpu02", "gpu03"}
    assert all("--set dataloader.throughput.required_samples_per_s=" in f.fix for f in rows)
    assert view.counts["PASS"] == sum(1 for r in report.results if r.status is Status.PASS)
    assert not any(r.check_id == "dataloader.throughput" and r.status is Status.PASS for r in report.results)


def test_a_silenced_finding_is_acknowledged_in_every_report():
    report = quickstart_without_frameworks()
    report.silenced = {"node.environment.hostname-loopback": {"reason": "single-node box", "until": "2027-01-31"}}
    view = build_view(report)
    assert [f.id for f in view.acknowledged] == ["node.environment.hostname-loopback"]
    assert "node.environment.hostname-loopback" not in [f.id for f in view.warnings]
    for text in (terminal.render(report), markdown.render(report), html.render(report)):
        assert "single-node box" in text and "2027-01-31" in text
    data = json.loads(json_report.render(report))
    assert [f["id"] for f in data["verdict"]["findings"]["acknowledged"]] == ["node.environment.hostname-loopback"]
    assert RunReport.from_dict(data).silenced == report.silenced
