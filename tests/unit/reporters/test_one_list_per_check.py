"""Reports never contradict themselves: in every format, a check on a node is listed as blocking, as a
warning only, or as not measured, never as two of these; a figure reported but not judged never
blocks. Every format reads its lists from one model (preflight.reporters.view)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from preflight.core.check import NEEDS_GPU, ROLE_INVENTORY
from preflight.core.model import FIGURE_SIZE, Finding, Measurement, Status
from preflight.reporters import html, json_report, junit, markdown, terminal
from preflight.reporters.view import build_view
from tests.conftest import make_report, make_result

CHECKS = ["collectives.local", "gpu.visibility", "scaling.multi_gpu", "node.environment", "net.bandwidth"]


def profiled_cpu_run():
    """What `--profile h100-8x` on a node without GPUs reports: a FAIL whose check also noted a figure it
    did not judge, a SKIP the profile makes blocking, a SKIP that does not block, a warning."""
    collectives = make_result(
        "collectives.local", "vm", Status.FAIL, "gloo busbw below the floor",
        measurements=[Measurement("gloo: busbw at 16 MiB", 0.4, "GB/s", 460.0, ">=", False),
                      Measurement("gloo: latency at 8 B", 90.0, "us")],
        findings=[Finding("collectives.local.slow-busbw", Status.FAIL, "gloo busbw 0.4 below 460", "Faster fabric."),
                  Finding("collectives.local.cpu-only", Status.SKIP, "latency is reported, not judged", "")])
    gpu = make_result("gpu.visibility", "vm", Status.SKIP, "no NVIDIA GPU on this node",
                      findings=[Finding("gpu.visibility.no-gpu", Status.SKIP, "no NVIDIA GPU here", "")])
    scaling = make_result("scaling.multi_gpu", "vm", Status.SKIP, "CPU processes: reported, not judged",
                          findings=[Finding("scaling.multi_gpu.cpu-only-not-applicable", Status.SKIP,
                                            "CPU processes share cores: reported, not judged", "")])
    environment = make_result("node.environment", "vm", Status.WARN, "open files low", facts={"nvidia_gpus": []},
                              findings=[Finding("node.environment.nofile", Status.WARN, "open files low", "Raise it.")])
    bandwidth = make_result("net.bandwidth", "cluster", Status.SKIP, "one node: no link")
    report = make_report([collectives, gpu, scaling, environment, bandwidth], nodes=["vm"], profile="h100-8x",
                         cluster_checks=["net.bandwidth"])
    report.roles = {"node.environment": ROLE_INVENTORY}
    report.needs = {"gpu.visibility": [NEEDS_GPU], "collectives.local": [NEEDS_GPU], "scaling.multi_gpu": [NEEDS_GPU]}
    from preflight.core.model import Scope
    bandwidth.scope = Scope.CLUSTER
    return report


def ids_in(text: str) -> set[str]:
    return {cid for cid in CHECKS if re.search(rf"(?<![\w.]){re.escape(cid)}(?![\w.-])", text)}


def sections(text: str, heads: dict[str, str]) -> dict[str, str]:
    """The text under each heading (a regex), up to the next heading of any kind given or `stop`."""
    found = {}
    for name, head in heads.items():
        match = re.search(head, text, re.M)
        if match:
            rest = text[match.end():]
            ends = [m.start() for h in heads.values() for m in [re.search(h, rest, re.M)] if m]
            stop = re.search(r"^(###|Key figures|Baseline|Acknowledged)", rest, re.M)
            ends += [stop.start()] if stop else []
            found[name] = rest[:min(ends)] if ends else rest
    return found


def lists_terminal(report):
    return sections(terminal.render(report), {"blocking": r"^Blocking \(\d+\):$", "warnings": r"^Warnings \(\d+\):$",
                                              "not measured": r"^Not measured \(\d+\):$"})


def lists_markdown(report):
    return sections(markdown.render(report), {"blocking": r"^### What blocks the verdict$",
                                              "warnings": r"^### Warnings$", "not measured": r"^### Not measured$"})


def lists_html(report):
    page = html.render(report)
    return {name: page.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]
            for name, sid in (("blocking", "blocking"), ("warnings", "warnings"), ("not measured", "skipped"))
            if f'<section id="{sid}">' in page}


def lists_json(report):
    findings = json.loads(json_report.render(report))["verdict"]["findings"]
    return {name: " ".join(row["check_id"] for row in findings[key])
            for name, key in (("blocking", "blocking"), ("warnings", "warnings"), ("not measured", "not_measured"))}


def lists_junit(report):
    root = ET.fromstring(junit.render(report))
    out = {"blocking": [], "warnings": [], "not measured": []}
    seen = set()
    for case in root.iter("testcase"):
        key = (case.get("classname"), case.get("name"))
        assert key not in seen, f"{key} is two testcases"
        seen.add(key)
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        assert len(kinds) <= 1, f"{key} is {kinds}"
        if kinds and kinds[0] in ("failure", "error"):
            out["blocking"].append(case.get("classname"))
        elif kinds:
            out["not measured"].append(case.get("classname"))
    return {name: " ".join(ids) for name, ids in out.items()}


@pytest.mark.parametrize("lists", [lists_terminal, lists_markdown, lists_html, lists_json, lists_junit],
                         ids=["terminal", "md", "html", "json", "junit"])
def test_no_check_is_listed_as_blocking_and_as_not_measured(lists):
    report = profiled_cpu_run()
    got = {name: ids_in(text) for name, text in lists(report).items()}
    blocking, not_measured = got.get("blocking", set()), got.get("not measured", set())
    assert {"collectives.local", "gpu.visibility"} <= blocking
    assert not blocking & not_measured, got
    assert not got.get("warnings", set()) & not_measured, got
    assert "collectives.local" not in not_measured


def test_a_figure_reported_but_not_judged_never_blocks():
    """A check that FAILs for one reason (wrong sums) reports a busbw figure it judged against nothing:
    the figure's key finding is not marked as blocking, nor as a failure."""
    result = make_result(
        "collectives.local", "vm", Status.FAIL, "wrong sums",
        measurements=[Measurement(f"gloo: busbw at {size}", value, "GB/s", figure=FIGURE_SIZE, series="gloo",
                                  at=at, better="higher")
                      for size, value, at in (("1 MiB", 0.2, 1 << 20), ("16 MiB", 0.4, 16 << 20))],
        findings=[Finding("collectives.local.wrong-sums", Status.FAIL, "the sums are wrong", "Check the fabric.")])
    view = build_view(make_report([result]))
    assert view.verdict == "NO-GO"
    [key] = [k for k in view.key_findings if k.check_id == "collectives.local"]
    assert not key.blocking and key.status != "FAIL"
