"""Internal names never collide with user data: a host may be called "cluster", and a reporter plugin
may not write over the files preflight keeps for itself."""

from __future__ import annotations

import textwrap

import pytest

from preflight import reporters
from preflight.core.model import CLUSTER_NODE, Finding, Scope, Status
from preflight.core.verdict import Verdict, decide
from preflight.integrations import slurm
from preflight.reporters.view import build_view
from tests.conftest import make_report, make_result

HOST = CLUSTER_NODE  # a real host that happens to have the name cluster results are filed under


def _env(node: str, gpus: int = 0, status: Status = Status.PASS):
    facts = {"nvidia_gpus": [{"address": f"0000:{i:02x}:00.0", "class": "0x030200"} for i in range(gpus)]}
    return make_result("node.environment", node, status, facts=facts)


def _consistency():
    return make_result("versions.consistency", CLUSTER_NODE, Status.PASS, "all nodes identical", scope=Scope.CLUSTER)


def test_a_gpu_skip_on_a_host_named_cluster_blocks_like_on_any_other_host():
    skip = make_result("gpu.visibility", HOST, Status.SKIP, "no NVIDIA driver (NVML unavailable)")
    report = make_report([_env(HOST, gpus=8), skip, _env("gpu02", gpus=8), _consistency()],
                         nodes=[HOST, "gpu02"], needs={"gpu.visibility": ["gpu"]}, roles={"node.environment": "inventory"})
    report.planned = ["node.environment", "gpu.visibility", "versions.consistency"]
    report.results.append(make_result("gpu.visibility", "gpu02", Status.PASS, "8 GPUs"))
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert [(r.check_id, r.node) for r in decision.skipped_expected] == [("gpu.visibility", HOST)]


def test_missing_results_are_told_apart_by_scope():
    report = make_report([_env("gpu02"), _consistency()], nodes=[HOST, "gpu02"])
    report.planned = ["node.environment", "versions.consistency"]
    decision = decide(report)
    assert decision.verdict is Verdict.INCOMPLETE
    assert decision.missing == [("node.environment", HOST)]
    assert "node.environment on cluster" in decision.reason
    report.results = [_env(HOST), _env("gpu02")]  # the cluster check's result is the one missing now
    assert decide(report).missing == [("versions.consistency", CLUSTER_NODE)]


def test_the_report_shows_a_host_named_cluster_as_a_node():
    failing = make_result("node.environment", HOST, Status.FAIL, "/dev/shm is 64 MiB",
                          findings=[Finding("node.environment.shm-small", Status.FAIL, "/dev/shm is 64 MiB")])
    report = make_report([failing, _env("gpu02"), _consistency()], nodes=[HOST, "gpu02"])
    view = build_view(report)
    assert view.matrix[HOST]["node.environment"] == "FAIL"
    assert [c for c, _ in view.matrix_checks] == ["node.environment"]
    assert [(f.check_id, f.where) for f in view.blocking] == [("node.environment", "on cluster")]
    assert slurm.drain_plan(report, {}) == {HOST: "preflight: node.environment (node.environment.shm-small)"}


# -- reporter plugins and the files preflight keeps -------------------------------------------------------

def _reporter_distribution(site, formats: dict[str, str]) -> None:
    """A real installed distribution with one reporter module per format (name -> its FILENAME)."""
    dist_info = site / "acme_reports-0.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-reports\nVersion: 0.1\n")
    lines = "".join(f"{name} = acme_report_{i}\n" for i, name in enumerate(formats))
    (dist_info / "entry_points.txt").write_text(f"[preflight.reporters]\n{lines}")
    for i, filename in enumerate(formats.values()):
        (site / f"acme_report_{i}.py").write_text(textwrap.dedent(f"""
            FILENAME = {filename!r}
            def render(report):
                return "overwritten"
        """))


@pytest.fixture
def reporter_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    reporters._discovered.cache_clear()
    yield site
    reporters._discovered.cache_clear()


def test_a_reporter_may_not_write_what_preflight_keeps_or_another_format_writes(reporter_site):
    _reporter_distribution(reporter_site, {"acme-jsonl": "results.jsonl", "acme-md": "report.md",
                                           "acme-up": "../results.json", "acme-scratch": "scratch",
                                           "acme-ok": "acme.txt"})
    found, refused = reporters.available(), reporters.refused()
    assert found["md"].module == "preflight.reporters.markdown"
    assert found["acme-ok"].filename == "acme.txt"
    assert set(refused) == {"acme-jsonl", "acme-md", "acme-up", "acme-scratch"}
    assert "acme-reports 0.1" in refused["acme-jsonl"] and "results.jsonl" in refused["acme-jsonl"]
    assert "the md format writes" in refused["acme-md"]
    with pytest.raises(reporters.ReporterError, match="left out"):
        reporters.reporter("acme-jsonl")


def test_a_format_left_out_is_a_usage_error_naming_why(reporter_site):
    from preflight.cli.options import UsageProblem, check_formats

    _reporter_distribution(reporter_site, {"acme-jsonl": "results.jsonl"})
    with pytest.raises(UsageProblem, match="results.jsonl"):
        check_formats("json,acme-jsonl")
    assert check_formats("json,md") == ["json", "md"]
