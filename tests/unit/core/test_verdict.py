import pytest

from preflight.core.model import Scope, Status
from preflight.core.check import ROLE_INVENTORY
from preflight.core.model import Finding
from preflight.core.verdict import EXIT_CODES, Verdict, decide, measured_counts, skip_blocks
from tests.conftest import make_report, make_result


def test_all_pass_is_go_exit_0():
    report = make_report([make_result(status=Status.PASS), make_result("gpu.visibility", status=Status.PASS)])
    decision = decide(report)
    assert decision.verdict is Verdict.GO and decision.exit_code == 0


def test_warn_alone_is_go_but_listed():
    report = make_report([make_result(status=Status.WARN, summary="nofile low")])
    decision = decide(report)
    assert decision.verdict is Verdict.GO
    assert [r.summary for r in decision.warnings] == ["nofile low"]


def test_fail_on_warn_blocks():
    report = make_report([make_result(status=Status.WARN)], fail_on="warn")
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO and decision.exit_code == 1
    assert decision.blocking[0].status is Status.WARN


@pytest.mark.parametrize("status", [Status.FAIL, Status.ERROR])
def test_fail_or_error_is_no_go(status):
    report = make_report([make_result(status=Status.PASS), make_result("gpu.visibility", status=status)])
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO and decision.exit_code == 1
    assert [r.check_id for r in decision.blocking] == ["gpu.visibility"]


def test_skip_is_not_silently_green_when_expected():
    # A run of nothing but SKIPs is INCOMPLETE (test_all_skip_run_is_incomplete); beside a measured
    # result, a SKIP that nothing expects does not block.
    skipped = make_result("gpu.visibility", status=Status.SKIP, summary="no NVIDIA driver")
    assert decide(make_report([make_result(), skipped])).verdict is Verdict.GO
    decision = decide(make_report([skipped], expected=["gpu.visibility"]))
    assert decision.verdict is Verdict.NO_GO
    assert decision.skipped_expected == [skipped]


def test_missing_results_make_it_incomplete_exit_3():
    report = make_report([make_result("node.environment", "node1")], nodes=["node1", "node2"])
    decision = decide(report)
    assert decision.verdict is Verdict.INCOMPLETE and decision.exit_code == 3
    assert decision.missing == [("node.environment", "node2")]


def test_missing_cluster_result_is_incomplete():
    report = make_report([make_result("node.environment", "node1")], planned=["node.environment", "net.bandwidth"],
                         cluster_checks=["net.bandwidth"])
    assert decide(report).missing == [("net.bandwidth", "cluster")]


def test_an_interrupted_run_with_no_reason_of_its_own_says_it_was_interrupted_and_a_stop_is_named():
    report = make_report([make_result(status=Status.PASS)], interrupted=True, stopped_early="--fail-fast")
    decision = decide(report)
    assert decision.verdict is Verdict.INCOMPLETE and "SIGINT or SIGTERM" in decision.reason
    assert "stopped early (--fail-fast)" in decision.reason


def test_interrupted_run_without_failures_is_incomplete_but_failures_still_block():
    ok = make_report([make_result(status=Status.PASS)], incomplete=True, incomplete_reason="interrupted")
    assert decide(ok).verdict is Verdict.INCOMPLETE
    bad = make_report([make_result(status=Status.FAIL)], incomplete=True, incomplete_reason="interrupted")
    assert decide(bad).verdict is Verdict.NO_GO


def test_empty_run_is_incomplete():
    assert decide(make_report([])).verdict is Verdict.INCOMPLETE


def test_blocking_is_ordered_worst_first():
    report = make_report([
        make_result("a.warn", status=Status.WARN), make_result("b.fail", status=Status.FAIL),
        make_result("c.error", status=Status.ERROR), make_result("d.cluster", "cluster", Status.FAIL, scope=Scope.CLUSTER),
    ], fail_on="warn")
    assert [r.status for r in decide(report).blocking] == [Status.ERROR, Status.FAIL, Status.FAIL, Status.WARN]


def test_exit_codes_are_distinct():
    assert EXIT_CODES == {Verdict.GO: 0, Verdict.NO_GO: 1, Verdict.INCOMPLETE: 3}


# -- nothing measured is never GO ------------------------------------------------------------------

def test_all_skip_run_is_incomplete_and_says_nothing_was_measured():
    report = make_report([make_result("gpu.visibility", status=Status.SKIP, summary="no NVIDIA driver"),
                          make_result("net.bandwidth", "cluster", Status.SKIP, "one node", scope=Scope.CLUSTER)])
    decision = decide(report)
    assert decision.verdict is Verdict.INCOMPLETE and decision.exit_code == 3
    assert (decision.measured, decision.total) == (0, 2)
    assert "0 of 2 checks measured" in decision.reason


def test_measured_counts_checks_with_a_measured_result():
    report = make_report([make_result("a.one", "n1", Status.PASS), make_result("a.one", "n2", Status.SKIP),
                          make_result("b.two", "n1", Status.ERROR), make_result("c.three", "n1", Status.SKIP),
                          make_result("d.four", "n1", Status.WARN)])
    assert measured_counts(report) == (2, 4)
    assert decide(report).measured_text == "2 of 4 checks measured"


# -- what a training node needs is expected by default ------------------------------------------

# The verdict knows the inventory check by the role the run recorded for it, not by its id.
INVENTORY = "site.inventory"
ROLES = {INVENTORY: ROLE_INVENTORY}


def _env(node, gpus=0, status=Status.PASS, findings=()):
    facts = {"nvidia_gpus": [{"address": f"0000:{i:02x}:00.0", "class": "0x030200"} for i in range(gpus)]}
    return make_result(INVENTORY, node, status, facts=facts, findings=list(findings))


def _gpu_skip(node="n1"):
    return make_result("gpu.visibility", node, Status.SKIP, "no NVIDIA driver (NVML unavailable)")


def test_gpu_check_skip_blocks_on_a_node_with_nvidia_gpus_on_its_pci_bus():
    report = make_report([_env("n1", gpus=8), _gpu_skip()], needs={"gpu.visibility": ["gpu"]}, roles=ROLES)
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert [r.check_id for r in decision.skipped_expected] == ["gpu.visibility"]
    assert "PCI" in skip_blocks(report.results[1], report)


def test_the_gpus_on_the_bus_are_read_only_from_a_check_that_declares_the_inventory_role():
    report = make_report([_env("n1", gpus=8), _gpu_skip()], needs={"gpu.visibility": ["gpu"]})
    assert report.roles == {}  # a report that records no roles (written before they were recorded)
    assert decide(report).verdict is Verdict.GO


def test_gpu_check_skip_does_not_block_without_nvidia_hardware():
    report = make_report([_env("n1", gpus=0), _gpu_skip()], needs={"gpu.visibility": ["gpu"]}, roles=ROLES)
    assert decide(report).verdict is Verdict.GO


@pytest.mark.parametrize("setting", [{"profile": "h100-8x"}, {"expect": {"gpus_per_node": 8}}])
def test_profile_or_gpus_per_node_make_gpu_and_framework_skips_block(setting):
    results = [_env("n1"), _gpu_skip(),
               make_result("collectives.local", "n1", Status.SKIP, "torch is not installed")]
    needs = {"gpu.visibility": ["gpu"], "collectives.local": ["framework"]}
    decision = decide(make_report(results, needs=needs, roles=ROLES, **setting))
    assert decision.verdict is Verdict.NO_GO
    assert {r.check_id for r in decision.skipped_expected} == {"gpu.visibility", "collectives.local"}
    # Without either, the same SKIPs do not block.
    assert decide(make_report(results, needs=needs, roles=ROLES)).verdict is Verdict.GO


def test_a_skip_that_says_not_applicable_does_not_block_through_inference():
    single = make_result("scaling.multi_gpu", "n1", Status.SKIP, "1 GPU only",
                         findings=[Finding("scaling.multi_gpu.single-device.not-applicable", Status.SKIP, "1 GPU only")])
    report = make_report([_env("n1", gpus=1), single], needs={"scaling.multi_gpu": ["framework"]},
                         expect={"gpus_per_node": 1}, roles=ROLES)
    assert decide(report).verdict is Verdict.GO


def test_a_declared_headline_finding_is_the_headline():
    finding = Finding(f"{INVENTORY}.no-framework", Status.FAIL,
                      "neither PyTorch nor TensorFlow is installed: nothing here can train")
    other = make_result("gpu.visibility", "n1", Status.FAIL, findings=[Finding("gpu.visibility.x", Status.FAIL, "x")])
    results = [other, _env("n1", status=Status.FAIL, findings=[finding])]
    decision = decide(make_report(results, headlines=[f"{INVENTORY}.no-framework"]))
    assert decision.verdict is Verdict.NO_GO
    assert decision.reason.startswith("2 blocking findings: neither PyTorch nor TensorFlow is installed: nothing here "
                                      "can train (on n1)")
    # Not declared a headline by the run: the blocking findings in their usual order, worst and by check.
    assert decide(make_report(results)).reason.startswith("2 blocking findings: x (on n1)")


def test_the_built_in_declarations_reach_the_report_and_the_verdict():
    from preflight.core.registry import discover
    from preflight.engine.head import complete_report, fill_declarations

    checks = discover().checks
    report = make_report([_env("n1", gpus=8), _gpu_skip()])
    complete_report(report, list(checks.values()), {})
    inventory = [cid for cid, role in report.roles.items() if role == ROLE_INVENTORY]
    assert len(inventory) == 1 and report.needs["gpu.visibility"] == ["gpu"]
    assert f"{inventory[0]}.no-framework" in report.headlines
    # A results file written before roles were recorded gets them from the installed checks.
    old = make_report([make_result(inventory[0], "n1", facts={"nvidia_gpus": [{"address": "0000:01:00.0"}]}),
                       _gpu_skip()], needs={"gpu.visibility": ["gpu"]})
    fill_declarations(old, checks)
    assert old.roles == {inventory[0]: ROLE_INVENTORY} and old.needs == {"gpu.visibility": ["gpu"]}
    assert decide(old).verdict is Verdict.NO_GO


def test_the_headline_names_the_blocking_findings_in_plain_words():
    finding = Finding("node.environment.no-framework", Status.FAIL,
                      "neither PyTorch nor TensorFlow is installed: nothing here can train")
    memlock = Finding("node.environment.memlock-limited", Status.WARN, "locked-memory limit is 8192 KiB", "Set memlock.")
    shm = Finding("node.environment.shm-small", Status.FAIL, "/dev/shm is 64 MiB", "Raise shm.")
    decision = decide(make_report([_env("n1", status=Status.FAIL, findings=[memlock, shm, finding])],
                                  headlines=["node.environment.no-framework"]))
    assert decision.verdict is Verdict.NO_GO
    assert decision.reason.startswith("2 blocking findings: neither PyTorch nor TensorFlow is installed: nothing here "
                                      "can train (on n1); /dev/shm is 64 MiB (on n1)")
    assert [f.id for f in decision.blocking_findings] == ["node.environment.no-framework", "node.environment.shm-small"]


def test_warn_findings_inside_a_failing_check_are_warnings():
    findings = [Finding("node.environment.no-framework", Status.FAIL, "no framework", "Install torch."),
                Finding("node.environment.memlock-limited", Status.WARN, "memlock", "Set memlock."),
                Finding("node.environment.hostname-loopback", Status.WARN, "loopback", "Fix /etc/hosts."),
                Finding("node.environment.shm-ok", Status.PASS, "shm fine")]
    decision = decide(make_report([_env("n1", status=Status.FAIL, findings=findings)]))
    assert [f.id for f in decision.blocking_findings] == ["node.environment.no-framework"]
    assert [f.id for f in decision.warning_findings] == ["node.environment.memlock-limited",
                                                         "node.environment.hostname-loopback"]
    assert [f.finding.fix for f in decision.warning_findings] == ["Set memlock.", "Fix /etc/hosts."]


def test_results_without_findings_get_one_that_stands_for_them():
    report = make_report([make_result("acme.a", status=Status.FAIL, summary="broken", remediation=["Mend it."]),
                          make_result("acme.b", status=Status.ERROR, summary="timed out after 60s; the check was killed",
                                      remediation=["Reseat the GPU."]),
                          make_result("acme.c", status=Status.SKIP, summary="not here")])
    decision = decide(report)
    assert [(f.id, f.level) for f in decision.blocking_findings] == [("acme.a.fail", Status.FAIL),
                                                                     ("acme.b.timed-out", Status.ERROR)]
    assert decision.blocking_findings[0].finding.fix == "Mend it."
    assert "Reseat" not in decision.blocking_findings[1].finding.fix  # a timeout's fix, not the check's hints
    assert [f.id for f in decision.skipped_findings] == ["acme.c.skip"]


def test_a_finding_is_never_worse_than_its_result():
    noted = make_result("scaling.multi_gpu", status=Status.SKIP, summary="reported, not judged",
                        findings=[Finding("scaling.multi_gpu.cpu-sharing", Status.WARN, "CPU processes share cores")])
    decision = decide(make_report([make_result(), noted]))
    assert decision.verdict is Verdict.GO and decision.warning_findings == []
    assert [(f.id, f.level) for f in decision.skipped_findings] == [("scaling.multi_gpu.cpu-sharing", Status.SKIP)]


# -- plugins -----------------------------------------------------------------------------------------

def test_a_plugin_that_failed_to_load_makes_it_incomplete_named_first():
    errors = [{"entry_point": "acme.broken = acme_broken:Check", "distribution": "acme 0.3", "error": "ImportError: x"}]
    decision = decide(make_report([make_result()], load_errors=errors))
    assert decision.verdict is Verdict.INCOMPLETE and decision.exit_code == 3
    assert decision.reason.startswith("check plugin failed to load: acme.broken (acme 0.3)")
    failing = decide(make_report([make_result(status=Status.FAIL)], load_errors=errors))
    assert failing.verdict is Verdict.NO_GO and failing.reason.startswith("check plugin failed to load")


def test_missing_results_are_named():
    report = make_report([make_result("node.environment", "node1")], nodes=["node1", "node2"])
    assert "node.environment on node2" in decide(report).reason


def test_a_check_pulled_in_for_another_does_not_count_as_measured():
    report = make_report([make_result("node.environment", status=Status.PASS), _gpu_skip("node1")],
                         needs={"gpu.visibility": ["gpu"]}, pulled_in={"node.environment": "gpu.visibility"})
    decision = decide(report)
    assert decision.verdict is Verdict.INCOMPLETE and (decision.measured, decision.total) == (0, 1)


# -- [silence] ---------------------------------------------------------------------------------------

def test_a_silenced_finding_is_acknowledged_never_blocking_until_its_date():
    shm = Finding("node.environment.shm-small", Status.FAIL, "/dev/shm is 64 MiB", "Raise shm.")
    nofile = Finding("node.environment.nofile-low", Status.WARN, "nofile 1024", "Raise nofile.")
    report = make_report([_env("n1", status=Status.FAIL, findings=[shm, nofile])])
    assert decide(report).verdict is Verdict.NO_GO
    report.silenced = {"node.environment.shm-small": {"reason": "containers of this pool share /dev/shm",
                                                      "until": "2027-01-31"}}
    decision = decide(report)
    assert decision.verdict is Verdict.GO and decision.blocking == []
    assert [f.id for f in decision.acknowledged_findings] == ["node.environment.shm-small"]
    assert [f.id for f in decision.warning_findings] == ["node.environment.nofile-low"]
    # Past its date it silences nothing, and says so.
    report.started_at = "2027-02-01T08:00:00+00:00"
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert [f.id for f in decision.blocking_findings] == ["node.environment.shm-small"]
    assert "preflight.silence.expired" in [f.id for f in decision.warning_findings]
    assert decision.acknowledged_findings == []


def test_a_go_that_silences_says_so_and_never_that_every_check_passed():
    shm = Finding("node.environment.shm-small", Status.FAIL, "/dev/shm is 64 MiB", "Raise shm.")
    report = make_report([_env("n1", status=Status.FAIL, findings=[shm])])
    report.silenced = {"node.environment.shm-small": {"reason": "shared", "until": ""}}
    decision = decide(report)
    assert decision.verdict is Verdict.GO and decision.exit_code == 0
    assert "GO with 1 silenced finding" in decision.reason and "every check passed" not in decision.reason.lower()


def test_a_transport_finding_blocks_even_when_a_results_file_silences_it():
    report = make_report([make_result("node.environment", "n1", Status.ERROR, "timed out after 60s")])
    report.silenced = {"node.environment.timed-out": {"reason": "edited by hand", "until": ""}}
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert [f.id for f in decision.blocking_findings] == ["node.environment.timed-out"]


@pytest.mark.parametrize("until", ["never", "0", "False", "2027-13-01", "31/01/2027"])
def test_a_silence_whose_end_is_not_a_date_silences_nothing(until):
    shm = Finding("node.environment.shm-small", Status.FAIL, "/dev/shm is 64 MiB", "Raise shm.")
    report = make_report([_env("n1", status=Status.FAIL, findings=[shm])])
    report.silenced = {"node.environment.shm-small": {"reason": "r", "until": until}}
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert "preflight.silence.expired" in [f.id for f in decision.warning_findings]


def test_a_host_called_cluster_is_never_reported_across_the_cluster():
    from preflight.core.compare import compare
    from preflight.reporters import markdown, terminal
    from preflight.reporters.baseline import describe

    shm = Finding("node.environment.shm-small", Status.FAIL, "/dev/shm is 64 MiB", "Raise shm.")
    report = make_report([make_result("node.environment", "cluster", Status.FAIL, "shm", findings=[shm])],
                         nodes=["cluster"])
    assert "(on cluster)" in decide(report).reason and "across the cluster" not in decide(report).reason
    for text in (markdown.render(report), terminal.render(report)):
        assert "across the cluster" not in text
    before = make_report([make_result("node.environment", "cluster", Status.PASS, "fine")], nodes=["cluster"])
    [change] = compare(before, report).statuses
    assert "on cluster" in describe(change) and "across the cluster" not in describe(change)
