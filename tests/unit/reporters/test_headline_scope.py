"""A headline says what was measured: CPU training when no GPU was found, how many checks a narrowed
run measured, and whose warning blocks when a check nobody asked for warns under --fail-on warn."""

from __future__ import annotations

import json
import re

from preflight.core.check import ROLE_INVENTORY
from preflight.core.model import Finding, Status
from preflight.core.verdict import Verdict, decide
from preflight.reporters import html, json_report, markdown, terminal
from preflight.reporters.view import CPU_GO, build_view
from tests.conftest import make_report, make_result


def cpu_box(**kwargs):
    inventory = make_result("node.environment", "vm", Status.PASS, facts={"nvidia_gpus": []})
    gpu = make_result("gpu.visibility", "vm", Status.SKIP, "no NVIDIA GPU on this node")
    report = make_report([inventory, gpu], **kwargs)
    report.roles = {"node.environment": ROLE_INVENTORY}
    return report


def test_a_go_on_a_machine_without_gpus_says_it_is_for_cpu_training_at_the_top_of_every_report():
    report = cpu_box()
    view = build_view(report)
    assert view.verdict == "GO" and view.headline.startswith(CPU_GO)
    page = html.render(report)
    top = page.index('<p class="headline">')
    assert page.index(CPU_GO) == top + len('<p class="headline">')  # the first thing under the verdict
    assert markdown.render(report).splitlines()[0].endswith(view.headline)
    assert CPU_GO in terminal.render(report).splitlines()[0]
    assert json.loads(json_report.render(report))["verdict"]["headline"] == view.headline


def test_gpus_on_the_bus_or_a_profile_are_not_a_cpu_go():
    with_gpu = make_result("node.environment", "vm", Status.PASS, facts={"nvidia_gpus": ["10de:2330"]})
    report = make_report([with_gpu, make_result("gpu.visibility", "vm", Status.PASS)])
    report.roles = {"node.environment": ROLE_INVENTORY}
    assert CPU_GO not in build_view(report).headline
    profiled = cpu_box(profile="h100-8x")
    assert CPU_GO not in build_view(profiled).headline


def test_a_run_narrowed_to_one_check_says_so():
    report = make_report([make_result("node.environment", "vm", Status.PASS)])
    view = build_view(report)
    assert view.verdict == "GO" and view.headline.endswith("as far as was measured: 1 check.")


def test_a_pulled_in_checks_warning_that_blocks_under_fail_on_warn_is_named_as_such():
    pinned = make_result("versions.pinned", "vm", Status.WARN, "not pinned",
                         findings=[Finding("versions.pinned.no-pins", Status.WARN, "not pinned", "pin them")])
    consistency = make_result("versions.consistency", "cluster", Status.PASS)
    report = make_report([pinned, consistency], fail_on="warn", pulled_in={"versions.pinned": "versions.consistency"})
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    said = "versions.pinned ran only because versions.consistency reads it"
    assert said in decision.reason
    assert said in build_view(report).blocking[0].blocks
    assert re.search(said, "\n".join(terminal.render(report).splitlines()[:2]))  # the plain sentence, then this
