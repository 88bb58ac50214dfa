"""One run, one set of files: a directory per run, or every report file of an earlier run replaced."""

from __future__ import annotations

import datetime as dt

from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.run.outdir import OWNED_FILES, run_directory
from preflight.reporters import json_report

MOMENT = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.timezone.utc)


def test_each_run_gets_its_own_directory_and_latest_points_at_the_newest(tmp_path):
    first = run_directory(tmp_path / "preflight-report", per_run=True, now=MOMENT)
    (first / "report.md").write_text("first")
    second = run_directory(tmp_path / "preflight-report", per_run=True, now=MOMENT)  # the same second
    assert first.name == "2026-11-29T10-00-00Z" and second.name == "2026-11-29T10-00-00Z-2"
    latest = tmp_path / "preflight-report" / "latest"
    assert latest.is_symlink() and latest.resolve() == second.resolve()
    assert (first / "report.md").read_text() == "first"  # an earlier run, perhaps the baseline, is kept


def test_an_explicit_directory_loses_the_earlier_runs_reports_and_nothing_else(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in OWNED_FILES:
        (out / name).write_text("old run")
    (out / "notes.txt").write_text("mine")
    (out / "keep").mkdir()
    assert run_directory(out, per_run=False) == out
    assert sorted(p.name for p in out.iterdir()) == ["keep", "notes.txt"]


def test_a_latest_that_preflight_did_not_make_is_left_alone(tmp_path):
    base = tmp_path / "preflight-report"
    (base / "latest").mkdir(parents=True)
    (base / "latest" / "x").write_text("mine")
    run_directory(base, per_run=True, now=MOMENT)
    assert not (base / "latest").is_symlink() and (base / "latest" / "x").read_text() == "mine"


def test_report_rerenders_into_a_directory_without_leaving_other_formats_behind(tmp_path, sample_report):
    results = tmp_path / "results.json"
    results.write_text(json_report.render(sample_report))
    out = tmp_path / "out"
    runner = CliRunner()
    runner.invoke(cli, ["report", str(results), "--out", str(out)])
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.html", "results.json", "junit.xml"}
    runner.invoke(cli, ["report", str(results), "--out", str(out), "--format", "md"])
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]  # no html or json of the earlier run beside it


def test_report_without_out_writes_beside_its_input_and_never_moves_latest(tmp_path, sample_report, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from preflight.run.outdir import run_directory

    run = run_directory("preflight-report", per_run=True)
    (run / "results.json").write_text(json_report.render(sample_report))
    (run / "results.jsonl").write_text("kept\n")
    later = run_directory("preflight-report", per_run=True)  # a newer run: latest points at it
    latest = tmp_path / "preflight-report" / "latest"
    before = sorted(p.name for p in (tmp_path / "preflight-report").iterdir())
    done = CliRunner().invoke(cli, ["report", str(run / "results.json"), "--format", "md,json"])
    assert done.exit_code == 1, done.output
    assert sorted(p.name for p in (tmp_path / "preflight-report").iterdir()) == before  # no new run directory
    assert latest.resolve() == later.resolve()
    assert sorted(p.name for p in run.iterdir()) == ["report.md", "results.json", "results.jsonl"]
    assert (run / "results.jsonl").read_text() == "kept\n"
    # --rejudge without --out: into the run's own rejudged/, latest untouched again.
    done = CliRunner().invoke(cli, ["report", str(run / "results.json"), "--rejudge", "--format", "json"])
    assert (run / "rejudged" / "results.json").exists(), done.output
    assert latest.resolve() == later.resolve()


def test_report_prints_markdown_to_standard_output(tmp_path, sample_report):
    results = tmp_path / "results.json"
    results.write_text(json_report.render(sample_report))
    done = CliRunner().invoke(cli, ["report", str(results), "--format", "md", "--out", "-"])
    assert done.exit_code == 1  # the verdict, as ever
    assert done.output.startswith("## ❌ preflight: **NO-GO**") and "| net.bandwidth |" in done.output
    assert not (tmp_path / "-").exists() and not (tmp_path / "preflight-report").exists()
    several = CliRunner().invoke(cli, ["report", str(results), "--out", "-"])
    assert several.exit_code == 2 and "--out - prints one report" in several.output


def test_a_run_cannot_write_to_standard_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["run", "--checks", "node.environment", "--out", "-"])
    assert done.exit_code == 2 and "--out - prints one report" in done.output
    assert list(tmp_path.iterdir()) == []


def test_rerendering_a_run_into_its_own_directory_is_refused_and_removes_nothing(tmp_path, sample_report):
    """`report DIR/results.json --out DIR` would replace the results it reads and delete DIR/results.jsonl."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_text(json_report.render(sample_report))
    (out / "results.jsonl").write_text("the run as it streamed\n")
    (out / "report.html").write_text("old")
    before = {p.name: p.read_text() for p in out.iterdir()}
    for given in (out / "results.json", out / "results.jsonl"):
        done = CliRunner().invoke(cli, ["report", str(given), "--out", str(out), "--format", "md"])
        assert done.exit_code == 2 and str(given) in done.output, done.output
        assert {p.name: p.read_text() for p in out.iterdir()} == before


def test_run_without_out_writes_its_own_directory(tmp_path, monkeypatch):
    """The quickstart's `preflight run` gives no --out: a directory per run, `latest` pointing at it."""
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["run", "--checks", "node.environment", "--set",
                                    "node.environment.min_free_disk_gib=0.001"])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    assert done.exit_code in (0, 1, 3), done.output
    latest = tmp_path / "preflight-report" / "latest"
    assert latest.is_symlink() and (latest / "results.json").exists() and (latest / "report.html").exists()


def test_no_report_of_an_earlier_run_in_any_format_stays_beside_a_new_verdict(tmp_path, sample_report):
    """A GO run wrote preflight.prom (and a plugin's CSV); a NO-GO run into the same --out must not leave them."""
    from preflight.run.outdir import owned_files

    good = tmp_path / "good.json"
    good.write_text(json_report.render(make_report_go()))
    bad = tmp_path / "bad.json"
    bad.write_text(json_report.render(sample_report))
    out = tmp_path / "out"
    formats = "prometheus,example-csv" if "results.csv" in owned_files() else "prometheus"
    first = CliRunner().invoke(cli, ["report", str(good), "--format", formats, "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert 'preflight_verdict{verdict="GO"} 1.0' in (out / "preflight.prom").read_text()
    second = CliRunner().invoke(cli, ["report", str(bad), "--out", str(out)])
    assert second.exit_code == 1
    assert not (out / "preflight.prom").exists() and not (out / "results.csv").exists()
    third = CliRunner().invoke(cli, ["report", str(bad), "--format", "prometheus", "--out", str(out)])
    assert third.exit_code == 1
    assert 'preflight_verdict{verdict="NO-GO"} 1.0' in (out / "preflight.prom").read_text()


def make_report_go():
    from preflight.core.model import Measurement, Status
    from tests.conftest import make_report, make_result

    return make_report([make_result("node.environment", "n1", Status.PASS,
                                    measurements=[Measurement("free", 5.0, "GiB", 1.0, ">=", True)])])


def test_the_run_directory_is_absolute_whatever_the_working_directory(tmp_path, monkeypatch):
    # A check hands paths under it to programs started in other working directories (the GPU probe).
    from preflight.run.outdir import run_directory

    monkeypatch.chdir(tmp_path)
    assert run_directory("preflight-report", per_run=True).is_absolute()
    assert run_directory("out", per_run=False) == tmp_path / "out"
