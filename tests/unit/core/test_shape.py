"""GO in the job's shape (run --shape): the largest healthy subset, and how every output carries it."""

import json

import pytest

from preflight.core.model import CheckResult, Finding, NodeInfo, RunReport, Scope, Status
from preflight.core.shape import Candidate, Shape, ShapeError, largest, parse, subset_for
from preflight.core.subset import hosts_text, kubernetes_text, sentence
from preflight.core.verdict import EXIT_SUBSET_GO, Verdict, decide
from preflight.core.blame import own_findings

NODE_CHECK = "node.environment"
CLUSTER_CHECK = "net.bandwidth"


def _report(names, failing=(), erroring=(), cluster=None, **kwargs):
    results = []
    for name in names:
        if name in failing:
            results.append(CheckResult(NODE_CHECK, name, Status.FAIL, "shm small", findings=[
                Finding(f"{NODE_CHECK}.shm-small", Status.FAIL, "shm small", "grow it")]))
        elif name in erroring:
            results.append(CheckResult(NODE_CHECK, name, Status.ERROR, "timed out"))
        else:
            results.append(CheckResult(NODE_CHECK, name, Status.PASS, "fine"))
    if cluster is not None:
        results.append(cluster)
    return RunReport(started_at="2026-12-01T00:00:00+00:00", nodes=[NodeInfo(n) for n in names],
                     planned=[NODE_CHECK] + ([cluster.check_id] if cluster else []),
                     cluster_checks=[cluster.check_id] if cluster else [], results=results, **kwargs)


def _subset(report, shape, groups=None):
    report.subset = subset_for(report, shape, own_findings(report), groups)
    return report.subset


NAMES = [f"gpu{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("values, expected", [
    (["nodes-multiple-of=4"], Shape(4)),
    (["nodes-multiple-of=4,within=group", "gpus-per-node=8"], Shape(4, "group", 8)),
    (["within=group"], Shape(1, "group")),
])
def test_parse(values, expected):
    assert parse(values) == expected


@pytest.mark.parametrize("value, key", [
    ("nodes-multiple-of=0", "nodes-multiple-of"), ("nodes-multiple-of=x", "nodes-multiple-of"),
    ("gpus-per-node=-1", "gpus-per-node"), ("within=rack", "within"), ("node-multiple-of=4", "node-multiple-of"),
    ("nodes-multiple-of", "nodes-multiple-of"),
])
def test_parse_refuses_naming_the_key(value, key):
    with pytest.raises(ShapeError, match=f"--shape {key}"):
        parse([value])


def test_no_shape_is_none():
    assert parse([]) is None and parse([" , "]) is None


def test_two_broken_nodes_leave_the_largest_multiple():
    report = _report(NAMES, failing={"gpu03"}, erroring={"gpu07"})
    subset = _subset(report, Shape(4))
    assert subset["offered"] and len(subset["nodes"]) == 8
    assert subset["exclude"] == ["gpu03", "gpu07"]
    assert subset["reasons"] == {"gpu03": f"{NODE_CHECK}.shm-small", "gpu07": f"{NODE_CHECK}.timed-out"}
    assert subset["slurm_exclude"] == "gpu[03,07]"
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO and decision.subset_go and decision.exit_code == EXIT_SUBSET_GO


def test_multiple_leaves_out_healthy_nodes_last_in_order():
    report = _report(NAMES, failing={"gpu01"})
    subset = _subset(report, Shape(4))
    assert subset["nodes"] == NAMES[1:9] and subset["exclude"] == ["gpu01", "gpu10"]
    assert subset["reasons"]["gpu10"].startswith("left out to keep a multiple")


def test_a_go_on_every_node_in_the_shape_is_a_plain_go():
    report = _report(NAMES[:8])
    subset = _subset(report, Shape(4))
    assert subset["exclude"] == [] and decide(report).exit_code == 0


def test_a_go_that_does_not_fit_the_shape_is_not_exit_0():
    report = _report(NAMES[:9])
    _subset(report, Shape(4))
    decision = decide(report)
    assert decision.verdict is Verdict.GO and decision.exit_code == EXIT_SUBSET_GO


def test_unlocated_cluster_failure_offers_no_subset():
    cluster = CheckResult(CLUSTER_CHECK, "cluster", Status.FAIL, "slow", scope=Scope.CLUSTER, findings=[
        Finding(f"{CLUSTER_CHECK}.slow", Status.FAIL, "the cluster is slow", "fix it")])
    report = _report(NAMES, failing={"gpu02"}, cluster=cluster)
    subset = _subset(report, Shape(3))
    assert not subset["offered"] and f"{CLUSTER_CHECK}.slow" in subset["why_not"]
    assert decide(report).exit_code == 1
    assert "no GO on a subset" in decide(report).reason


def test_cluster_finding_naming_a_node_leaves_that_node_out():
    cluster = CheckResult(CLUSTER_CHECK, "cluster", Status.FAIL, "slow", scope=Scope.CLUSTER, findings=[
        Finding(f"{CLUSTER_CHECK}.isolated-node", Status.FAIL, "gpu05 is slow", "fix it", node="gpu05")])
    report = _report(NAMES[:4], cluster=cluster)
    assert not _subset(report, Shape())["offered"]  # gpu05 is no node of this run: pinned on none of them
    report = _report(NAMES[:5], cluster=cluster)
    subset = _subset(report, Shape())
    assert subset["offered"] and subset["exclude"] == ["gpu05"]


def test_missing_cluster_result_offers_no_subset():
    report = _report(NAMES[:4], failing={"gpu01"})
    report.planned.append(CLUSTER_CHECK)
    report.cluster_checks.append(CLUSTER_CHECK)
    assert not _subset(report, Shape())["offered"]


def test_unreachable_node_is_left_out():
    report = _report(NAMES[:4], erroring={"gpu04"})
    report.nodes[3].reachable = False
    assert _subset(report, Shape(3))["reasons"] == {"gpu04": "unreachable"}


def test_interrupted_run_offers_nothing_and_keeps_130():
    report = _report(NAMES[:4], failing={"gpu01"}, interrupted=True)
    subset = _subset(report, Shape())
    assert not subset["offered"] and decide(report).exit_code == 130


def test_within_group_keeps_the_largest_group():
    groups = {n: ("leafA" if i < 3 else "leafB") for i, n in enumerate(NAMES)}
    report = _report(NAMES, failing={"gpu06"})
    subset = _subset(report, Shape(2, "group"), groups)
    assert subset["group"] == "leafB" and subset["nodes"] == ["gpu04", "gpu05", "gpu07", "gpu08", "gpu09", "gpu10"]
    assert subset["reasons"]["gpu01"] == "outside the group leafB"


def test_gpus_per_node_counts_gpus_and_unknown_does_not_fit():
    found = largest(Shape(1, "", 8), [Candidate("a", gpus=8), Candidate("b", gpus=4), Candidate("c")], {})
    assert found["nodes"] == ["a"] and set(found["exclude"]) == {"b", "c"}
    assert found["reasons"]["c"] == "GPU count unknown"


def test_a_node_left_out_for_a_finding_keeps_that_reason_when_gpus_are_asked_for_too():
    found = largest(Shape(1, "", 8), [Candidate("a", gpus=8), Candidate("b", gpus=4)], {"b": "FAIL gpu.health"})
    assert found["nodes"] == ["a"] and found["reasons"] == {"b": "FAIL gpu.health"}


def test_within_group_a_healthy_node_in_no_group_is_left_out_saying_so():
    found = largest(Shape(1, "group"), [Candidate("a", "leafA"), Candidate("b"), Candidate("c", "leafA")], {})
    assert found["nodes"] == ["a", "c"] and found["group"] == "leafA"
    assert found["reasons"] == {"b": "in no topology group"} and found["groups"] == {"a": "leafA", "c": "leafA"}


def test_nothing_fits():
    found = largest(Shape(4), [Candidate("a"), Candidate("b")], {"a": "x"})
    assert not found["offered"] and "no healthy nodes fit" in found["why_not"]


def test_at_1024_nodes_the_sentence_and_the_lists():
    names = [f"gpu{i:04d}" for i in range(1, 1025)]
    bad = {n: "node.environment.shm-small" for n in names[100:106]} | {"gpu0007": "x", "gpu0900": "y"}
    found = largest(Shape(8), [Candidate(n) for n in names], bad)
    assert len(found["nodes"]) == 1016 and len(found["exclude"]) == 8
    assert sentence(found).startswith("GO on 1,016 of 1,024 nodes (shape nodes-multiple-of=8): exclude these 8: ")
    assert found["slurm_exclude"] == "gpu[0007,0101-0106,0900]"
    assert hosts_text(found).splitlines() == found["nodes"]
    assert kubernetes_text(found).count('- "gpu') == 1016


def test_outputs_carry_the_subset_and_old_files_load(tmp_path):
    from preflight.reporters import json_report, junit, markdown, prometheus, terminal
    from preflight.reporters import html

    report = _report(NAMES[:5], failing={"gpu02"})
    _subset(report, Shape(3))
    data = json.loads(json_report.render(report))
    assert data["subset"]["exclude"] == ["gpu02", "gpu05"] and data["verdict"]["exit_code"] == EXIT_SUBSET_GO
    assert data["verdict"]["subset_go"] is True
    again = RunReport.from_dict(data)
    assert again.subset == report.subset and decide(again).exit_code == EXIT_SUBSET_GO
    for render in (terminal.render, markdown.render, html.render):
        assert "gpu[02,05]" in render(report)
    assert 'type="SUBSET-GO"' in junit.render(report)
    prom = prometheus.render(report)
    assert "preflight_exit_code 4.0" in prom and "preflight_subset_nodes 3.0" in prom
    old = {k: v for k, v in data.items() if k not in ("subset", "verdict")}
    loaded = RunReport.from_dict(old)
    assert loaded.subset is None and decide(loaded).exit_code == 1
    assert "subset" not in json.loads(json_report.render(loaded))


def test_schema_accepts_the_subset():
    import jsonschema
    from importlib.resources import files

    from preflight.reporters import json_report

    schema = json.loads(files("preflight").joinpath("schema/run-report.schema.json").read_text())
    report = _report(NAMES[:5], failing={"gpu02"})
    _subset(report, Shape(3))
    jsonschema.validate(json.loads(json_report.render(report)), schema)


@pytest.mark.parametrize("value", ["within=rack", "nodes-multiple-of=0", "bogus=1", "gpus-per-node"])
def test_run_refuses_a_bad_shape_naming_the_flag_before_anything_runs(tmp_path, monkeypatch, value):
    from click.testing import CliRunner

    from preflight.cli.main import cli

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", "--checks", "example.echo", "--shape", value, "--out", "out"])
    assert result.exit_code == 2 and "--shape" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_run_help_names_exit_code_4():
    from click.testing import CliRunner

    from preflight.cli.main import cli

    result = CliRunner().invoke(cli, ["run", "--help"])
    assert "4 with --shape" in " ".join(result.output.split())


def test_the_jobs_plan_fills_what_the_shape_leaves_out():
    from preflight.core.config import parse as parse_config
    from preflight.run.shape import plan_defaults
    from preflight_checks.job.plan import JobPlan

    checks = {"job.plan": JobPlan}
    config = parse_config("[job]\nnodes = 4\ngpus_per_node = 8\nmicro_batch = 2\n", checks)
    defaults = plan_defaults(config, checks)
    assert defaults == {"nodes-multiple-of": 4, "gpus-per-node": 8}
    assert parse(["within=group"], defaults=defaults) == Shape(4, "group", 8)
    assert parse(["gpus-per-node=4"], defaults=defaults) == Shape(4, "", 4)  # the command line wins
    assert parse([], defaults=defaults) is None  # no --shape, no shape: the plan alone asks for none
    assert plan_defaults(parse_config("[job]\nmicro_batch = 2\n", checks), checks) == {}


def test_run_answers_in_the_shape_of_the_jobs_plan(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from preflight.cli.main import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "preflight.toml").write_text("[job]\nnodes = 1\ngpus_per_node = 16\n")
    result = CliRunner().invoke(cli, ["run", "--checks", "job.plan", "--shape", "within=group", "--out", "out",
                                      "--no-history", "--format", "json"])
    assert "Traceback" not in result.output
    subset = json.loads((tmp_path / "out" / "results.json").read_text())["subset"]
    assert subset["shape"] == "within=group,gpus-per-node=16"  # nodes-multiple-of=1 is no constraint
    assert not subset["offered"] and "gpus-per-node=16" in subset["why_not"]  # no node here has 16 GPUs
    (tmp_path / "preflight.toml").write_text("[job]\ngpus_per_node = 4096\n")
    refused = CliRunner().invoke(cli, ["run", "--checks", "job.plan", "--shape", "within=group", "--out", "again"])
    assert refused.exit_code == 2 and "[job]" in refused.output and "gpus-per-node=4096" in refused.output
    assert not (tmp_path / "again" / "results.jsonl").exists()  # refused before anything ran


def test_report_judges_the_subset_again_from_the_recorded_shape(tmp_path, monkeypatch):
    """A results file whose subset offers a GO (and a node the run never had) while a blocking cluster
    finding is pinned on no node: `report` without --rejudge is NO-GO (1), never the file's exit 4."""
    from click.testing import CliRunner

    from preflight.cli.main import cli

    cluster = CheckResult(CLUSTER_CHECK, "cluster", Status.FAIL, "slow", scope=Scope.CLUSTER, findings=[
        Finding(f"{CLUSTER_CHECK}.slow-link", Status.FAIL, "slow", "fix")])
    r = _report(NAMES[:4], cluster=cluster)
    r.subset = {"shape": "nodes-multiple-of=2", "total": 4, "offered": True, "nodes": ["gpu01", "ghost"],
                "exclude": ["gpu03", "gpu04"], "slurm_exclude": "gpu[03-04]", "reasons": {}, "group": "",
                "why_not": ""}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps(r.to_dict()))
    out = CliRunner().invoke(cli, ["report", "results.json", "--format", "json", "--out", "again"])
    after = json.loads((tmp_path / "again" / "results.json").read_text())
    assert out.exit_code == 1, out.output
    assert not after["subset"]["offered"] and "pinned on no node" in after["subset"]["why_not"]
    assert "ghost" not in json.dumps(after["subset"])


def test_a_later_run_into_the_same_out_removes_an_earlier_subset(tmp_path):
    from preflight.run import shape as shape_mod

    for name in (shape_mod.EXCLUDE_FILE, shape_mod.HOSTS_FILE, shape_mod.K8S_FILE):
        (tmp_path / name).write_text("gpu03\n")
    r = _report(NAMES[:4])
    shape_mod.apply(r, None, [], tmp_path)  # a run without --shape
    assert not any((tmp_path / n).exists() for n in (shape_mod.EXCLUDE_FILE, shape_mod.HOSTS_FILE, shape_mod.K8S_FILE))
    (tmp_path / shape_mod.EXCLUDE_FILE).write_text("gpu03\n")
    shape_mod.apply(r, Shape(2), [], tmp_path)  # every node healthy: a plain GO, no subset files
    assert not (tmp_path / shape_mod.EXCLUDE_FILE).exists()


def test_a_cluster_finding_a_confirmed_node_explains_is_left_out_with_that_node():
    # n3's link shaped: net.bandwidth's pass confirms n3; its ring's slow-link finding (pinned on no node)
    # and scaling.multi_node's shortfall (its own pass could not single anyone out) have that cause too
    from preflight.core.model import Component
    names = ["n1", "n2", "n3"]
    bandwidth = CheckResult(CLUSTER_CHECK, "cluster", Status.FAIL, "slow", scope=Scope.CLUSTER, findings=[
        Finding(f"{CLUSTER_CHECK}.isolated-node", Status.FAIL, "n3 is at fault", "fix it", "n3", Component("node", ["n3"])),
        Finding(f"{CLUSTER_CHECK}.slow-link", Status.FAIL, "2 of 3 links below 5 Gbit/s", "fix it")])
    scaling = CheckResult("scaling.multi_node", "cluster", Status.FAIL, "scaled badly", scope=Scope.CLUSTER, findings=[
        Finding("scaling.multi_node.efficiency", Status.FAIL, "efficiency 0.3", "fix it")])
    report = _report(names, cluster=bandwidth)
    report.results.append(scaling)
    report.planned.append("scaling.multi_node")
    report.cluster_checks.append("scaling.multi_node")
    subset = _subset(report, Shape(2))
    assert subset["offered"] and subset["nodes"] == ["n1", "n2"] and subset["exclude"] == ["n3"]
    assert "GO on 2 of 3 nodes" in decide(report).reason and "exclude" in decide(report).reason
    # a link between two healthy nodes, or a boundary, is explained by nobody: no subset
    link = Finding(f"{CLUSTER_CHECK}.isolated-link", Status.FAIL, "n1 - n2", "fix it", None, Component("link", ["n1", "n2"]))
    report.results[-1].findings.append(link)
    assert not _subset(report, Shape(2))["offered"]
