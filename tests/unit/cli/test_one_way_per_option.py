"""Options mean the same on every command: --no-color everywhere, --json for JSON on stdout (the
older --format json of diff still works), --out for the file or directory written (init's --output
still works); `list` keeps its columns apart."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from preflight.cli.main import _commands, cli
from tests.conftest import DATA

RESULTS = str(DATA / "reports" / "cluster_run.json")


def invoke(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kwargs)


def test_every_command_takes_no_color():
    missing = [c.name for c in _commands(cli) if not any("--no-color" in p.opts for p in c.params)]
    assert missing == []
    assert invoke("list", "--no-color").exit_code == 0


def test_diff_json_is_format_json_and_both_still_work():
    new = invoke("diff", RESULTS, RESULTS, "--json")
    old = invoke("diff", RESULTS, RESULTS, "--format", "json")
    assert new.exit_code == old.exit_code == 0 and json.loads(new.output) == json.loads(old.output)
    assert invoke("diff", RESULTS, RESULTS, "--json", "--format", "md").exit_code == 2


def test_explain_json_has_what_list_json_has_and_the_fixes():
    listed = {c["id"]: c for c in json.loads(invoke("list", "--json").output)["checks"]}
    explained = json.loads(invoke("explain", "net.bandwidth", "--json").output)
    assert {k: explained[k] for k in listed["net.bandwidth"]} == json.loads(json.dumps(listed["net.bandwidth"]))
    assert explained["why"] and all(k.startswith("net.bandwidth.") for k in explained["fixes"])


def test_init_writes_where_out_says_and_output_still_works(tmp_path):
    for flag in ("--out", "--output", "-o"):
        target = tmp_path / f"{flag.strip('-')}.toml"
        assert invoke("init", flag, str(target)).exit_code == 0 and target.read_text().strip()


def test_list_keeps_every_id_apart_from_its_scope():
    rows = [line for line in invoke("list").output.splitlines() if line and not line.startswith((" ", "profiles", "`"))]
    assert rows
    for line in rows:
        assert re.match(r"\S+ {2,}(node|cluster) {2,}\S", line), line


def test_report_json_prints_the_summary_as_run_does(tmp_path):
    done = invoke("report", RESULTS, "--out", str(tmp_path / "out"), "--format", "md", "--json")
    summary = json.loads(done.stdout)
    assert summary["verdict"] in ("GO", "NO-GO", "INCOMPLETE") and summary["exit_code"] == done.exit_code
