"""CLI commands through click's CliRunner, in a temporary directory."""

import json

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return CliRunner()


def test_help_documents_exit_codes(runner):
    result = runner.invoke(cli, ["run", "--help"])
    assert result.exit_code == 0
    for text in ("0 GO", "1 NO-GO", "2 usage", "3 INCOMPLETE", "130 interrupted"):
        assert text in result.output


def test_list_shows_ids_scope_and_defaults(runner):
    result = runner.invoke(cli, ["list"])
    assert result.exit_code == 0
    assert "node.environment" in result.output and "min_shm_gib=1.0" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 120  # no 700-character lines
    verbose = runner.invoke(cli, ["list", "-v"])
    assert "min_shm_gib=1.0" in verbose.output and max(len(line) for line in verbose.output.splitlines()) <= 120
    data = json.loads(runner.invoke(cli, ["list", "--json"]).output)
    env = next(c for c in data["checks"] if c["id"] == "node.environment")
    assert env["params"]["min_shm_gib"] == 1.0 and env["scope"] == "node" and "os" in env["tags"]


def test_explain_shows_why_and_parameters(runner):
    result = runner.invoke(cli, ["explain", "node.environment"])
    assert result.exit_code == 0
    assert "Why it matters" in result.output and "/dev/shm" in result.output
    assert "min_open_files = 65536" in result.output


def test_explain_unknown_id_is_usage_error(runner):
    result = runner.invoke(cli, ["explain", "gpu.nope"])
    assert result.exit_code == 2 and "unknown check id 'gpu.nope'" in result.output


def test_init_writes_a_file_and_refuses_to_overwrite(runner, tmp_path):
    assert runner.invoke(cli, ["init"]).exit_code == 0
    text = (tmp_path / "preflight.toml").read_text()
    assert '[checks."node.environment"]' in text
    again = runner.invoke(cli, ["init"])
    assert again.exit_code == 2 and "exists" in again.output
    assert (tmp_path / "preflight.toml").read_text() == text


@pytest.mark.parametrize("args, message", [
    (["--config", "missing.toml"], "missing.toml: file not found"),
    (["--checks", "gpu.visiblity"], "unknown check id 'gpu.visiblity'"),
    (["--skip", "nope.nope"], "unknown check id 'nope.nope'"),
    (["--format", "pdf"], "unknown report format pdf"),
    (["--set", "node.environment.min_shm_gib=lots"], "expected a number"),
    (["--timeout", "0"], "must be more than 0 s"),
    (["--checks", ""], "--checks is empty"),
    (["--checks", " , "], "--checks is empty"),
    (["--set", "scaling.multi_gpu.warn_efficiency=0.95"], "scaling.multi_gpu.warn_efficiency"),
    (["--set", "net.bandwidth.streams=-1"], "net.bandwidth.streams: must not be negative"),
    (["--set", "net.bandwidth.min_gbps=0"], "net.bandwidth.min_gbps: must be greater than zero"),
    (["--set", "expect.gpus_per_node=-8"], "expect.gpus_per_node: must not be negative"),
    (["--set", "net.bandwidth.min_gbps=nan"], "net.bandwidth.min_gbps: must be a finite number"),
    (["--set", "net.bandwidth.pattern=star"], "net.bandwidth.pattern: must be one of ring, full"),
    (["--set", "versions.pinned.requirements=[\"missing.txt\"]"], "missing.txt does not exist"),
    (["--checks", "versions.consistency", "--skip", "versions.pinned"], "--skip versions.pinned removes what"),
])
def test_bad_input_is_exit_2_before_anything_runs(runner, tmp_path, args, message):
    result = runner.invoke(cli, ["run", "--out", "out", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_invalid_toml_names_file_and_line(runner, tmp_path):
    (tmp_path / "preflight.toml").write_text('[expect]\ngpus_per_node = 8\n[checks."node.environment"\n')
    result = runner.invoke(cli, ["run", "--config", "preflight.toml", "--out", "out"])
    assert result.exit_code == 2
    assert "preflight.toml:3" in result.output and "invalid TOML" in result.output


def test_unwritable_output_dir_is_exit_2(runner, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = runner.invoke(cli, ["run", "--out", "file/out"])
    assert result.exit_code == 2 and "cannot be written" in result.output


def test_run_writes_every_report_and_exit_code_matches(runner, tmp_path):
    result = runner.invoke(cli, ["run", "--checks", "node.environment", "--out", "out",
                                 "--set", "node.environment.min_free_disk_gib=0.001"])
    out = tmp_path / "out"
    for name in ("report.html", "report.md", "results.json", "results.jsonl", "junit.xml"):
        assert (out / name).is_file(), name
    data = json.loads((out / "results.json").read_text())
    assert result.exit_code == data["verdict"]["exit_code"]
    assert data["results"][0]["check_id"] == "node.environment"
    assert f"preflight: {data['verdict']['verdict']}" in result.output


def test_report_rerenders_a_past_run(runner, tmp_path, sample_report):
    (tmp_path / "results.json").write_text(json.dumps(sample_report.to_dict()))
    result = runner.invoke(cli, ["report", "results.json", "--out", "again", "--format", "md,junit"])
    assert result.exit_code == 1  # the sample run is NO-GO
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == ["junit.xml", "report.md"]
    assert "**NO-GO**" in (tmp_path / "again" / "report.md").read_text()


def test_report_rejects_a_file_that_is_not_results(runner, tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    result = runner.invoke(cli, ["report", "x.json"])
    assert result.exit_code == 2 and "x.json" in result.output and "schema_version" in result.output
    assert "Traceback" not in result.output


def test_report_names_the_malformed_field_of_a_results_file(runner, tmp_path, sample_report):
    data = sample_report.to_dict()
    data["results"][0]["status"] = "GREEN"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    result = runner.invoke(cli, ["report", "bad.json"])
    assert result.exit_code == 2 and "results[0].status" in result.output, result.output
    data = sample_report.to_dict()
    data["results"][0]["measurements"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    result = runner.invoke(cli, ["report", "bad.json"])
    assert result.exit_code == 2 and "results[0].measurements" in result.output, result.output


def test_step_summary_is_appended_when_set(runner, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    runner.invoke(cli, ["run", "--checks", "node.environment", "--out", "out"])
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "preflight:" in text


def test_empty_out_is_exit_2(runner, tmp_path):
    for command in (["run", "--checks", "node.environment", "--out", ""], ["report", "results.json", "--out", ""]):
        result = runner.invoke(cli, command)
        assert result.exit_code == 2 and "--out is empty" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _jsonl_report(tmp_path, planned, results, torn=""):
    """results.jsonl as a killed run leaves it: the plan header, some results, perhaps a torn line."""
    from preflight.core.model import CheckResult, NodeInfo, RunReport, Status
    from preflight.core.results_file import plan_header

    report = RunReport(started_at="2026-11-29T10:00:00+00:00", preflight_version="0.1.0",
                       nodes=[NodeInfo(name="node1")], planned=planned)
    lines = [json.dumps(plan_header(report))]
    lines += [CheckResult(cid, "node1", Status.PASS, "fine", title=cid).to_json_line() for cid in results]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + "\n" + torn)
    return path


def test_report_of_a_killed_run_is_incomplete_naming_what_is_missing(runner, tmp_path):
    _jsonl_report(tmp_path, ["node.environment", "versions.pinned", "gpu.visibility"], ["node.environment"],
                  torn='{"check_id": "versions.pinned", "node": "no')
    result = runner.invoke(cli, ["report", "results.jsonl", "--out", "out", "--format", "md"])
    assert result.exit_code == 3, result.output
    assert "dropped line 3 of results.jsonl" in result.output
    assert "versions.pinned on node1" in result.output and "gpu.visibility on node1" in result.output
    assert "INCOMPLETE" in (tmp_path / "out" / "report.md").read_text()


def test_report_of_a_whole_run_from_its_jsonl_is_go(runner, tmp_path):
    _jsonl_report(tmp_path, ["node.environment"], ["node.environment"])
    result = runner.invoke(cli, ["report", "results.jsonl", "--out", "out", "--format", "md"])
    assert result.exit_code == 0, result.output


def test_a_bad_line_inside_results_jsonl_is_exit_2_naming_it(runner, tmp_path):
    path = _jsonl_report(tmp_path, ["node.environment"], ["node.environment"])
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], "{not json", text[1]]) + "\n")
    result = runner.invoke(cli, ["report", "results.jsonl", "--out", "out"])
    assert result.exit_code == 2 and "results.jsonl:2" in result.output and "Traceback" not in result.output


def test_run_starts_results_jsonl_with_the_plan(runner, tmp_path):
    result = runner.invoke(cli, ["run", "--checks", "node.environment", "--out", "out", "--format", "json",
                                 "--set", "node.environment.min_free_disk_gib=0.001"])
    assert result.exit_code in (0, 1), result.output
    header = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])["preflight_plan"]
    assert header["planned"] == ["node.environment"] and header["preflight_version"]
    assert [n["name"] for n in header["nodes"]] and "expect" in header and "needs" in header
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "measured" in data["verdict"]["reason"]


def test_a_check_pulls_in_what_it_reads(runner):
    from preflight.run.plan import PlanError, select
    from preflight.core.registry import discover

    checks = discover().checks
    chosen = select(checks, ["versions.consistency"], set(), explicit=True)
    assert set(chosen.ids) == {"versions.consistency", "versions.pinned"}
    assert chosen.added == {"versions.pinned": "versions.consistency"}
    gpu = select(checks, ["gpu.visibility"], set(), explicit=True)
    assert gpu.added == {"node.environment": "gpu.visibility"}
    assert select(checks, ["gpu.visibility"], {"node.environment"}, explicit=True).ids == ["gpu.visibility"]
    with pytest.raises(PlanError):
        select(checks, ["versions.consistency"], {"versions.pinned"}, explicit=True)
    implicit = select(checks, sorted(checks), {"versions.pinned"}, explicit=False)
    assert "versions.consistency" not in implicit.ids and "versions.pinned" not in implicit.ids


def _with_broken_plugin(monkeypatch):
    import preflight.core.registry as registry_module
    from preflight.core.registry import LoadError, discover

    registry = discover()
    registry.errors.append(LoadError("acme.broken = acme_broken:Check", "acme-gpu-checks 0.3",
                                     "ImportError: No module named 'acme_broken'"))
    monkeypatch.setattr(registry_module, "discover", lambda **_: registry)


def test_a_plugin_that_failed_to_load_makes_the_run_incomplete_unless_skipped(runner, tmp_path, monkeypatch):
    _with_broken_plugin(monkeypatch)
    args = ["run", "--checks", "node.environment", "--format", "md,json",
            "--set", "node.environment.min_free_disk_gib=0.001", "--set", "expect.frameworks=[]"]
    result = runner.invoke(cli, [*args, "--out", "a"])
    assert result.exit_code == 3, result.output
    report_md = (tmp_path / "a" / "report.md").read_text()
    first = report_md.splitlines()[2]
    assert first.startswith("Check plugin failed to load: acme.broken (acme-gpu-checks 0.3)"), report_md[:400]
    assert "preflight: INCOMPLETE - " in result.output and "acme.broken" in result.output.split("preflight: INCOMPLETE")[1]
    skipped = runner.invoke(cli, [*args, "--skip", "acme.broken", "--out", "b"])
    assert skipped.exit_code in (0, 1), skipped.output
    assert json.loads((tmp_path / "b" / "results.json").read_text())["load_errors"] == []
