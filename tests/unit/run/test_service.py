"""The application layer of a run: prepare() and nodes_for(), without running a check."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.registry import discover
from preflight.run import service
from preflight.run.nodes import nodes_for
from preflight.run.request import HookRequest, K8sRequest, RunProblem, RunRequest

REGISTRY = discover()
MISSING = "/nonexistent/requirements-gpu.txt"


def request(tmp_path, **fields) -> RunRequest:
    return RunRequest(out_dir=str(tmp_path / "out"), formats=("json",), history="off", **fields)


def test_prepare_records_the_origin_of_every_value_it_was_given(tmp_path):
    prepared = service.prepare(request(tmp_path, checks="collectives.local", profile="h100-8x",
                                       settings=("collectives.local.min_busbw_gbps=100",), fail_on="warn"),
                               REGISTRY)
    origins = prepared.config.origins
    assert str(origins["collectives.local.min_busbw_gbps"]) == "--set"
    assert str(origins["collectives.local.busbw_size_bytes"]) == "--profile h100-8x"
    assert str(origins["run.fail_on"]) == "--fail-on" and prepared.config.fail_on == "warn"
    sources = prepared.plan.judged_with["sources"]
    assert sources["collectives.local.min_busbw_gbps"] == "--set"
    assert sources["run.level"] == "default"
    ids = [c.id for c in prepared.plan.checks]
    assert "collectives.local" in ids and len(ids) > 1  # the inventory check it reads is pulled in ...
    assert any("also running" in note for note in prepared.notes)  # ... and the user is told


@pytest.mark.parametrize("hook", [None, HookRequest(budget_s=45.0, node="n1")])
def test_a_configured_requirements_file_that_does_not_exist_stops_both_kinds_of_run(tmp_path, hook):
    ask = request(tmp_path, checks="versions.pinned", settings=(f"versions.pinned.requirements=['{MISSING}']",),
                  hook=hook)
    with pytest.raises(RunProblem) as info:
        service.prepare(ask, REGISTRY)
    assert "versions.pinned.requirements" in str(info.value) and MISSING in str(info.value)


def test_run_and_healthcheck_agree_on_a_missing_requirements_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "preflight.toml"
    config.write_text(f'[checks."versions.pinned"]\nrequirements = ["{MISSING}"]\n')
    for command in (["run", "--checks", "versions.pinned", "--out", str(tmp_path / "r"), "--no-history"],
                    ["healthcheck", "--checks", "versions.pinned"]):
        done = CliRunner().invoke(cli, [*command, "--config", str(config)])
        assert done.exit_code == 2, (command, done.output)
        assert "versions.pinned.requirements" in done.output and MISSING in done.output


def test_a_hook_runs_at_the_quick_level_on_its_own_node_within_its_budget(tmp_path):
    config = tmp_path / "preflight.toml"
    config.write_text("[expect]\nnodes = 4\n")
    prepared = service.prepare(RunRequest(config_file=str(config), formats=(), history="off",
                                          hook=HookRequest(budget_s=1.0, node="n7")), REGISTRY)
    try:
        assert prepared.config.level == "quick" and str(prepared.config.origins["run.level"]) == "healthcheck"
        assert prepared.config.expect.nodes is None  # how many nodes the cluster has is not this node's question
        assert [n.name for n in prepared.nodes] == ["n7"]
        assert prepared.left_out  # one second holds no check's floor: left out, with the reason
        assert not set(prepared.left_out) & {c.id for c in prepared.plan.checks}
        assert prepared.scratch and prepared.out.is_dir()
    finally:
        service.release(prepared)
    assert not prepared.out.exists()


def test_a_hook_refuses_a_cluster_check(tmp_path):
    with pytest.raises(RunProblem, match="cluster check"):
        service.prepare(RunRequest(checks="net.bandwidth", formats=(), hook=HookRequest(budget_s=45.0)), REGISTRY)


def test_nodes_for_this_machine_and_a_node_set():
    assert [n.transport.kind for n in nodes_for(RunRequest())] == ["local"]
    nodes = nodes_for(RunRequest(nodes_file="gpu[01-02]"))
    assert [(n.name, n.transport.kind) for n in nodes] == [("gpu01", "ssh"), ("gpu02", "ssh")]


def test_nodes_for_slurm_says_what_to_do_outside_an_allocation():
    with pytest.raises(RunProblem, match="add --slurm"):
        nodes_for(RunRequest(drain=True), env={})
    with pytest.raises(RunProblem, match="exclude each other"):
        nodes_for(RunRequest(slurm=True, nodes_file="gpu01"), env={})
    with pytest.raises(RunProblem, match="inside a Slurm allocation"):
        nodes_for(RunRequest(slurm=True, argv=("run", "--slurm")), env={})


def test_nodes_for_kubernetes_needs_an_image_and_no_other_source():
    with pytest.raises(RunProblem, match="--image"):
        nodes_for(RunRequest(k8s=K8sRequest()))
    with pytest.raises(RunProblem, match="excludes --nodes"):
        nodes_for(RunRequest(k8s=K8sRequest(image="team/train:1"), nodes_file="gpu01"))


def test_a_hook_drains_its_own_node_and_checks_only_it():
    nodes = nodes_for(RunRequest(drain=True, hook=HookRequest(budget_s=45.0, node="gpu07")))
    assert [(n.name, n.transport.kind) for n in nodes] == [("gpu07", "local")]


def test_a_runs_deadline_holds_the_time_a_cluster_checks_pass_takes_on_the_nodes_found():
    """A Kubernetes run's pods end at its deadline: made of the checks' timeouts before the nodes were
    known, a 64-node run's pods would end while net.bandwidth's isolation pass still searched."""
    from preflight.core.config import Config

    bandwidth = REGISTRY.checks["net.bandwidth"]
    checks = [REGISTRY.checks["node.environment"], bandwidth]
    budget = service.run_budget(Config(), checks)
    assert budget(1) == sum(c.timeout_s for c in checks)
    assert budget(64) == checks[0].timeout_s + bandwidth.timeout_at(64, bandwidth.Params()) > budget(8) > budget(1)
