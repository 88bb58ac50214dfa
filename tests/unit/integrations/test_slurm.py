"""Slurm without a cluster: parsing scontrol's output, deciding what to drain and resume, the srun transport."""

from __future__ import annotations

import subprocess

import pytest

from preflight.run import nodes as cli_nodes
from preflight.integrations import slurm
from preflight.core.model import CLUSTER_NODE, Finding, NodeInfo, Scope, Status
from preflight.transport import transport_from_spec
from preflight.transport.slurm import SlurmTransport
from tests.conftest import make_report, make_result, run_preflight
from tests.conftest import TESTS

DATA = TESTS / "data" / "slurm"


@pytest.fixture
def states() -> dict[str, slurm.NodeState]:
    return slurm.parse_show_node((DATA / "show_node.txt").read_text())


def report_of(results, nodes=("n1", "n2", "n3", "n4"), unreachable=(), **kwargs):
    report = make_report(results, nodes=list(nodes), **kwargs)
    for info in report.nodes:
        info.reachable = info.name not in unreachable
    return report


def env_pass(node):
    return make_result("node.environment", node, Status.PASS, "fine")


def env_fail(node, finding="node.environment.shm-small"):
    return make_result("node.environment", node, Status.FAIL, "/dev/shm is 0.02 GiB",
                       findings=[Finding(finding, Status.FAIL, "/dev/shm is 0.02 GiB", "mount a larger /dev/shm", node)])


# -- scontrol's output ----------------------------------------------------------------------------


def test_show_node_gives_address_state_and_the_reason_without_slurms_stamp(states):
    assert set(states) == {"n1", "n2", "n3", "n4"}
    assert states["n1"].address == "198.18.0.11" and states["n1"].state == "MIXED" and states["n1"].reason == ""
    assert states["n2"].state == "MIXED+DRAIN"
    assert states["n2"].reason == "preflight: node.environment (node.environment.shm-small)"
    assert states["n3"].reason == "maintenance by operator"
    assert states["n1"].fields["OS"].startswith("Linux 6.18")  # a value with spaces stays whole
    assert [n for n, s in states.items() if s.drained] == ["n2", "n3", "n4"]
    assert [n for n, s in states.items() if s.drained_by_preflight] == ["n2", "n4"]


def test_allocation_comes_from_the_environment_and_its_absence_names_the_commands():
    assert slurm.allocation_from_env({}) is None
    alloc = slurm.allocation_from_env({"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[01-04]"})
    assert (alloc.jobid, alloc.nodelist) == ("42", "gpu[01-04]")
    assert slurm.allocation_from_env({"SLURM_JOBID": "7", "SLURM_NODELIST": "a,b"}).jobid == "7"
    message = slurm.outside_allocation_message(["run", "--slurm", "--out", "my report"])
    assert "salloc -N 4 preflight run --slurm --out 'my report'" in message
    assert "sbatch -N 4 --wrap" in message


def fake_run(outputs: dict[tuple, tuple[int, str, str]], calls: list):
    def run(argv, **kwargs):
        calls.append(argv)
        for prefix, (code, out, err) in outputs.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return subprocess.CompletedProcess(argv, code, out, err)
        return subprocess.CompletedProcess(argv, 0, "", "")
    return run


def test_nodelist_is_expanded_by_scontrol_and_its_failure_is_named():
    calls: list = []
    run = fake_run({("scontrol", "show", "hostnames"): (0, "gpu01\ngpu02\n", "")}, calls)
    assert slurm.expand_nodelist("gpu[01-02]", run) == ["gpu01", "gpu02"]
    assert calls == [["scontrol", "show", "hostnames", "gpu[01-02]"]]
    broken = fake_run({("scontrol",): (1, "", "slurm_load_partitions: Unable to contact slurm controller")}, [])
    with pytest.raises(slurm.SlurmError, match="Unable to contact slurm controller"):
        slurm.expand_nodelist("gpu[01-02]", broken)

    def missing(argv, **kwargs):
        raise FileNotFoundError(argv[0])
    with pytest.raises(slurm.SlurmError, match="not installed"):
        slurm.scontrol(["show", "hostnames"], missing)


def test_allocation_nodes_are_slurm_transports_named_by_slurm_at_their_node_address():
    run = fake_run({("scontrol", "show", "hostnames"): (0, "n1\nn2\n", ""),
                    ("scontrol", "show", "node"): (0, (DATA / "show_node.txt").read_text(), "")}, [])
    nodes = cli_nodes.allocation_nodes("/opt/venv/bin/python", {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]"}, run)
    assert [(n.name, n.transport.address, n.transport.python, n.transport.jobid) for n in nodes] == [
        ("n1", "198.18.0.11", "/opt/venv/bin/python", "9"), ("n2", "198.18.0.12", "/opt/venv/bin/python", "9")]


def test_node_states_come_from_scontrols_json_where_the_client_has_it_and_from_its_text_elsewhere():
    doc = (TESTS / "data" / "real" / "slurm_json" / "rivosinc_sinfo_21.08.5.json").read_text()
    calls: list = []
    states = slurm.show_nodes(["cs2.example.company.com", "cs5.example.company.com"],
                              fake_run({("scontrol", "--json", "show", "node"): (0, doc, "")}, calls))
    assert calls == [["scontrol", "--json", "show", "node", "cs2.example.company.com,cs5.example.company.com"]]
    assert (states["cs5.example.company.com"].state, states["cs2.example.company.com"].state) == ("DOWN", "MIXED")
    calls.clear()
    older = fake_run({("scontrol", "--json"): (1, "", "scontrol: unrecognized option '--json'"),
                      ("scontrol", "show", "node", "-o"): (0, (DATA / "show_node.txt").read_text(), "")}, calls)
    states = slurm.show_nodes(["n3"], older)
    assert [c[:3] for c in calls] == [["scontrol", "--json", "show"], ["scontrol", "show", "node"]]
    assert (states["n3"].reason, states["n3"].reason_user) == ("maintenance by operator", "root")


def test_the_run_says_which_nodes_of_its_allocation_slurm_has_drained_and_why():
    run = fake_run({("scontrol", "show", "hostnames"): (0, "n1\nn2\nn3\n", ""),
                    ("scontrol", "show", "node"): (0, (DATA / "show_node.txt").read_text(), "")}, [])
    notes: list[str] = []
    cli_nodes.allocation_nodes("python3", {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-3]"}, run, notes)
    assert notes == [
        'slurm: n2 is MIXED+DRAIN in Slurm: "preflight: node.environment (node.environment.shm-small)" '
        "(root, 2026-11-30T10:23:53)",
        'slurm: n3 is MIXED+DRAIN in Slurm: "maintenance by operator" (root, 2026-11-30T10:23:53)']


def test_a_saved_sinfo_table_given_as_nodes_names_its_nodes_and_says_which_slurm_takes_no_job_on():
    table = TESTS / "data" / "real" / "slurm_table" / "cdt_pgr_sinfo_drain_down.txt"  # a published `sinfo`
    nodes = cli_nodes.hosts_nodes(str(table), "python3", [], False, notes := [])
    assert len(nodes) == 65 and nodes[0].name == "landonia25"
    assert "slurm: damnii02 is DRAIN in Slurm: no reason given, as the --nodes file shows it" in notes
    assert len(notes) == 24 and not any(n.startswith(("slurm: letha06 ", "slurm: damnii06 ")) for n in notes)


# -- what to drain -------------------------------------------------------------------------------


def test_only_the_node_with_its_own_blocking_finding_is_drained_naming_check_and_finding(states):
    states = {k: v for k, v in states.items() if k == "n1"}
    report = report_of([env_pass("n1"), env_fail("n2"), env_pass("n3"),
                        make_result("versions.pinned", "n3", Status.WARN, "unpinned")])
    plan = slurm.drain_plan(report, states)
    assert plan == {"n2": "preflight: node.environment (node.environment.shm-small)"}


def test_cluster_findings_drain_only_the_node_they_name_never_a_link_or_the_cluster():
    cluster = make_result("versions.consistency", CLUSTER_NODE, Status.FAIL, "torch differs on n3", scope=Scope.CLUSTER,
                          findings=[Finding("versions.consistency.drift", Status.FAIL, "torch 2.14 on n3", node="n3")])
    link = make_result("net.bandwidth", CLUSTER_NODE, Status.FAIL, "slow link", scope=Scope.CLUSTER,
                       findings=[Finding("net.bandwidth.slow-link", Status.FAIL, "2 Gbit/s", node="n1 -> n2"),
                                 Finding("net.bandwidth.below", Status.FAIL, "the cluster is slow")])
    report = report_of([env_pass("n1"), env_pass("n2"), env_pass("n3"), cluster, link], nodes=("n1", "n2", "n3"))
    assert slurm.drain_plan(report, {}) == {"n3": "preflight: versions.consistency (versions.consistency.drift)"}


def test_errors_and_warnings_drain_nothing_unless_warnings_block():
    timeout = make_result("gpu.visibility", "n1", Status.ERROR, "timed out after 30s")
    warn = make_result("node.environment", "n2", Status.WARN, "nofile low",
                       findings=[Finding("node.environment.nofile-low", Status.WARN, "nofile 1024")])
    assert slurm.drain_plan(report_of([timeout, warn]), {}) == {}
    strict = report_of([timeout, warn], fail_on="warn")
    assert slurm.drain_plan(strict, {}) == {"n2": "preflight: node.environment (node.environment.nofile-low)"}


def test_a_result_without_findings_drains_with_its_check_id():
    report = report_of([make_result("gpu.visibility", "n1", Status.FAIL, "7 GPUs visible, 8 expected")])
    assert slurm.drain_plan(report, {}) == {"n1": "preflight: gpu.visibility"}


def test_an_operators_drain_is_never_overwritten_but_preflights_own_is_updated(states):
    report = report_of([env_fail("n2", "node.environment.disk-full"), env_fail("n3")])
    plan = slurm.drain_plan(report, states, radius=1.0)  # two nodes of a small run: past the default radius
    assert plan == {"n2": "preflight: node.environment (node.environment.disk-full)"}  # n3: operator's drain


def test_the_reason_stays_short_and_counts_what_it_leaves_out():
    many = [("collectives.cluster", "collectives.cluster.a-very-long-finding-identifier-that-goes-on-and-on")] * 3
    reason = slurm.drain_reason(many)
    assert len(reason) <= slurm.MAX_REASON_CHARS
    assert reason.startswith("preflight: collectives.cluster") and reason.endswith("+2 more")


# -- what to resume --------------------------------------------------------------------------------


def test_only_preflights_drains_that_now_pass_are_resumed(states):
    report = report_of([env_pass("n1"), env_pass("n2"), env_pass("n3"), env_fail("n4")])
    assert slurm.resume_plan(report, states) == ["n2"]  # n3 an operator's, n4 still failing


def test_a_node_not_reached_or_with_an_error_or_outside_the_run_is_not_resumed(states):
    unreached = report_of([env_pass("n1"), env_pass("n4")], unreachable=("n2",))
    assert slurm.resume_plan(unreached, states) == ["n4"]
    erred = report_of([env_pass("n2"), make_result("gpu.visibility", "n2", Status.ERROR, "timed out"), env_pass("n4")])
    assert slurm.resume_plan(erred, states) == ["n4"]
    elsewhere = report_of([env_pass("n1")], nodes=("n1",))
    assert slurm.resume_plan(elsewhere, states) == []


def test_apply_runs_scontrol_for_exactly_the_planned_nodes_and_reports_refusals():
    calls: list = []
    run = fake_run({("scontrol", "show", "node"): (0, (DATA / "show_node.txt").read_text(), ""),
                    ("scontrol", "update", "NodeName=n1"): (1, "", "slurm_update error: Invalid user id")}, calls)
    report = report_of([env_fail("n1"), env_pass("n2"), env_pass("n3"), env_pass("n4")])
    actions = slurm.apply(report, drain=True, resume=True, run=run)
    updates = [c for c in calls if c[1] == "update"]
    assert updates == [
        ["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=preflight: node.environment (node.environment.shm-small)"],
        ["scontrol", "update", "NodeName=n2", "State=RESUME"],
        ["scontrol", "update", "NodeName=n4", "State=RESUME"],
    ]
    assert "Invalid user id" in actions[0].describe() and actions[0].error
    assert [a.describe() for a in actions[1:]] == ["resumed n2", "resumed n4"]
    calls.clear()  # a node an operator drained keeps that drain, and the run says so
    held_back = slurm.apply(report_of([env_pass("n1"), env_pass("n2"), env_fail("n3"), env_pass("n4")]),
                            drain=True, resume=False, run=run)
    assert [c for c in calls if c[1] == "update"] == []
    assert [a.describe() for a in held_back] == [
        'not drained again: n3 is already MIXED+DRAIN in Slurm: "maintenance by operator" (root, 2026-11-30T10:23:53); '
        "left as it is"]
    calls.clear()
    slurm.apply(report, drain=False, resume=False, run=run)
    assert [c for c in calls if c[1] == "update"] == []


# -- the transport -----------------------------------------------------------------------------------


def test_srun_wraps_one_overlapping_step_on_that_node_of_that_job():
    transport = SlurmTransport("gpu07", "10.0.0.7", "/opt/py", jobid="1234")
    argv = transport.wrap(["/opt/py", "-m", "preflight.engine.agent"])
    srun = argv.index("srun")
    assert argv[:srun][0] == "env" and "SLURM_EXIT_ERROR=255" in argv[:srun]
    assert "SLURM_NTASKS_PER_NODE" in argv[:srun]  # the job's own settings do not shape the step
    step = argv[srun:]
    assert step[step.index("-w") + 1] == "gpu07"
    for option in ("--jobid=1234", "-N1", "-n1", "--overlap", "--quiet"):
        assert option in step
    assert step[step.index("--") + 1:] == ["/opt/py", "-m", "preflight.engine.agent"]


def test_srun_failures_are_told_from_the_commands_own_exit_codes():
    transport = SlurmTransport("n1", jobid="5")
    assert transport.is_transport_failure(255)  # step not created (SLURM_EXIT_ERROR)
    assert transport.is_transport_failure(233)  # launch failed: slurmd unreachable (1001 & 0xff)
    for code in (0, 1, 2, 124, 137, 143):
        assert not transport.is_transport_failure(code)


def test_the_transport_travels_as_a_spec():
    transport = SlurmTransport("n1", "198.18.0.11", "/opt/py", jobid="77", srun="/usr/bin/srun")
    again = transport_from_spec(transport.to_spec())
    assert isinstance(again, SlurmTransport)
    assert (again.name, again.address, again.python, again.jobid, again.srun) == ("n1", "198.18.0.11", "/opt/py", "77",
                                                                                  "/usr/bin/srun")
    with pytest.raises(ValueError):
        SlurmTransport("-w", jobid="1")
    with pytest.raises(ValueError):
        SlurmTransport("n1", jobid="1; rm")


# -- the command line -------------------------------------------------------------------------------


def test_slurm_outside_an_allocation_and_with_nodes_is_a_usage_error(tmp_path):
    env = {"SLURM_JOB_ID": "", "SLURM_JOB_NODELIST": "", "SLURM_JOBID": "", "SLURM_NODELIST": ""}
    out = str(tmp_path / "out")
    proc = run_preflight("run", "--slurm", "--checks", "node.environment", "--out", out, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert f"salloc -N 4 preflight run --slurm --checks node.environment --out {out}" in proc.stderr
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("gpu01\n")
    proc = run_preflight("run", "--slurm", "--nodes", str(hosts), "--out", out, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "--nodes and --slurm" in proc.stderr
    proc = run_preflight("run", "--drain", "--out", out, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "--slurm" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_hook_runs_only_the_cheap_node_checks():
    from preflight.run.hook import hook_check_ids
    from preflight.core.registry import discover

    ids = hook_check_ids(discover().checks)
    assert "node.environment" in ids and "gpu.visibility" in ids and "versions.pinned" in ids
    assert not {"net.bandwidth", "versions.consistency", "checkpoint.roundtrip", "collectives.local"} & set(ids)


def test_node_info_reachability_is_what_resume_reads():
    report = report_of([env_pass("n1")], nodes=("n1",))
    report.nodes = [NodeInfo(name="n1", reachable=None)]  # a run that never heard about it counts as reached
    assert slurm.node_passes(report, "n1")
