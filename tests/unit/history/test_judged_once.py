"""Fleet history judges a report only when this process has not: the run `preflight run` has just
judged is recorded with that verdict; an imported results.json is judged again from its results,
once."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.config import Config
from preflight.core.model import Status
from preflight.core.verdict import decide
from preflight.history import extract as extract_mod
from preflight.run import finish as steps
from preflight.run.request import HISTORY_ON, RunRequest
from tests.conftest import make_report, make_result


@pytest.fixture
def judgings(monkeypatch):
    """Every time history judges a report's results itself (preflight.history.extract.judge)."""
    calls: list[str] = []
    real = extract_mod.judge

    def counted(report):
        judged = real(report)
        calls.append(judged[0])
        return judged

    monkeypatch.setattr(extract_mod, "judge", counted)
    return calls


def recorded_verdicts(db) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT verdict FROM runs ORDER BY id")]


def test_the_run_just_judged_is_recorded_without_judging_it_again(tmp_path, monkeypatch, judgings):
    db = tmp_path / "history.sqlite"
    monkeypatch.setenv("PREFLIGHT_HISTORY_URL", str(db))
    report = make_report([make_result("node.environment", "n1", Status.FAIL, "disk full")])
    run = steps.Finishing(RunRequest(history=HISTORY_ON, formats=("json",)), Config(), tmp_path / "out",
                          lambda kind, text: None)
    (tmp_path / "out").mkdir()
    steps.finish(report, run, (("reports", steps.reports), ("history record", steps.history_record)))
    assert judgings == [] and recorded_verdicts(db) == ["NO-GO"]
    with sqlite3.connect(db) as conn:  # the headline the reports show, recorded with the verdict, and where they are
        headline, source = conn.execute("SELECT headline, source FROM runs").fetchone()
    assert headline == decide(report).reason and headline
    assert source == str((tmp_path / "out" / "results.json").resolve())

    # The same results.json imported into another store: judged from its results, once.
    other = tmp_path / "other.sqlite"
    done = CliRunner().invoke(cli, ["history", "import", str(tmp_path / "out" / "results.json"), "--url", str(other)])
    assert done.exit_code == 0, done.output
    assert judgings == ["NO-GO"] and recorded_verdicts(other) == ["NO-GO"]


def test_finding_outliers_and_extracting_a_report_judge_nothing_until_the_verdict_is_asked(judgings):
    from preflight.history import outlier_result

    report = make_report([make_result("node.environment", f"n{i}", Status.PASS, "ok") for i in range(4)]).to_dict()
    outlier_result(report)
    ex = extract_mod.extract(report)
    assert judgings == []
    assert ex.verdict == "GO" and ex.verdict == "GO" and judgings == ["GO"]  # judged once, when asked
