"""One denominator and one count of warnings, the same in the terminal, report.md and the HTML
banner; a finding found on several nodes with figures a few percent apart is one entry with their
range; a NO-GO leads with one plain sentence of what is wrong and what to do."""

from __future__ import annotations

import re

from preflight.core.model import Finding, Status
from preflight.reporters import html, markdown, terminal
from preflight.reporters.view import build_view
from tests.conftest import make_report, make_result

NODES = ["n1", "n2", "n3"]


def slow_disks(figures=(0.463, 0.412, 0.5)):
    """checkpoint.roundtrip warns on three nodes, one finding id, figures a few percent apart."""
    results = [make_result("checkpoint.roundtrip", node, Status.WARN, f"writes at {gbps} GB/s",
                           findings=[Finding("checkpoint.roundtrip.slow-write", Status.WARN,
                                             f"torch.save writes at {gbps} GB/s, below 1.0 GB/s",
                                             "Save from every rank in parallel. Or write to local NVMe first.")])
               for node, gbps in zip(NODES, figures)]
    results += [make_result("node.environment", node, Status.PASS if node != "n3" else Status.SKIP) for node in NODES]
    results += [make_result("gpu.visibility", node, Status.SKIP, "no NVIDIA GPU on this node") for node in NODES]
    return make_report(results, nodes=NODES)


def test_the_reports_count_checks_once_and_warnings_once_and_agree():
    report = slow_disks()
    view = build_view(report)
    assert view.counts_text == "3 checks: 1 passed, 1 with warnings, 0 failed, 0 errors, 1 skipped"
    assert view.headline.endswith("as far as was measured: 1 of 3 checks skipped.")  # checks, not 9 results
    text, md, page = terminal.render(report), markdown.render(report), html.render(report)
    assert "No blocking findings (1 warning from 1 check)" in text and "Warnings (1):" in text
    assert len(view.warnings) == 1
    for rendered in (text, md, page):
        assert view.counts_text in rendered
        assert "1 warning from 1 check" in rendered
        assert not re.search(r"\b3 warnings\b", rendered)


def test_one_finding_on_three_nodes_a_few_percent_apart_is_one_row_with_their_range():
    (row,) = build_view(slow_disks()).warnings
    assert row.message == "torch.save writes at 0.412-0.5 GB/s, below 1.0 GB/s"
    assert row.nodes == NODES and row.where == "on n[1-3] (3 nodes)"
    # Findings of the same id whose words differ are not folded together.
    report = slow_disks()
    report.results[2].findings[0].message = "torch.save reads at 0.5 GB/s, below 1.0 GB/s"
    assert len(build_view(report).warnings) == 2


def test_a_no_go_leads_with_what_is_wrong_and_what_to_do_and_keeps_the_internals_below():
    link = make_result("net.bandwidth", "cluster", Status.FAIL, "one slow link",
                       findings=[Finding("net.bandwidth.slow-link", Status.FAIL,
                                         "n3's network link is slow, 0.96 Gbit/s where 10 are needed",
                                         "Check its NIC and cable. Then run preflight again.", node="n3")])
    report = make_report([link, *slow_disks().results], nodes=NODES)
    lead = "Not ready to train: n3's network link is slow, 0.96 Gbit/s where 10 are needed (on n3); check its NIC and cable."
    lines = terminal.render(report).splitlines()
    assert lines[0] == f"preflight: NO-GO - {lead}"
    assert lines[1].lstrip().startswith("1 blocking finding:")
    page = html.render(report)
    assert f'<p class="headline">{lead.replace(chr(39), "&#39;")}</p>' in page
    assert '<p class="reason">1 blocking finding' in page
    assert markdown.render(report).splitlines()[0].endswith(lead.replace("'", "'"))


def test_cross_node_warnings_come_before_the_per_node_ones():
    from preflight.core.model import Scope

    matrix = make_result("net.bandwidth", "cluster", Status.WARN, "one link slower", scope=Scope.CLUSTER,
                         findings=[Finding("net.bandwidth.uneven", Status.WARN, "n1 -> n2 is 20% slower than the others",
                                           "Check the cable.", node="n1 -> n2")])
    report = make_report([*slow_disks().results, matrix], nodes=NODES)
    assert [row.check_id for row in build_view(report).warnings] == ["net.bandwidth", "checkpoint.roundtrip"]
    text = terminal.render(report)
    assert text.index("n1 -> n2 is 20% slower") < text.index("torch.save writes at")
