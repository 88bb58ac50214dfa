"""URL passwords and tokens are masked wherever preflight shows or records text."""

from __future__ import annotations

import io

import pytest

from preflight.core.model import CheckResult, Evidence, RunReport, Status
from preflight.core.redact import RedactingStream, basic_auth, redact_text, scrub

SECRET = "hunter2XYZ"


@pytest.mark.parametrize("text", [
    f"postgresql://preflight:{SECRET}@db:5432/history",
    f"postgresql+psycopg://preflight:{SECRET}@db/history",
    f"http://alice:{SECRET}@prom:9090",
    f"http://alice:p@ss{SECRET}@prom:9090/api",  # an @ in the password
    f"postgresql://u:{SECRET}@db:5x32/h",  # a port that is no number
    f"postgresql://u:{SECRET}@[::1/h",  # a bracket never closed
    f"https://prom/api/v1/query?query=up&token={SECRET}",
    f"https://prom/?X-Api-Key={SECRET}&a=1",
    f'cannot reach "http://alice:{SECRET}@prom:9090": refused',
    f"https://{SECRET}{SECRET}@kube:6443",
    f"://alice:{SECRET}@db/history",  # the scheme left out
    f"alice:{SECRET}@db/history",  # no scheme at all: a history URL, a hosts file's line
    f"history store alice:{SECRET}@db:5432/h: cannot connect",
    f'http://alice:pa"{SECRET}@prom:9090',  # quotes in the password
    f"http://alice:pa'{SECRET}'@prom:9090/x",
    f"url = \"postgresql://u:p\\\"{SECRET}@db/h\"",
    f"{{'url': \"http://u:{SECRET}'@h\"}}",
    f"https://prom/?apitoken={SECRET}",
    f"https://prom/?JWT={SECRET}&query=up",
    f"https://prom/?Session={SECRET}",
    f"https://prom/?key={SECRET}",
    f"https://s3/b/o?X-Amz-Signature={SECRET}",
    f"https://blob/c?sv=1&sig={SECRET}",
    f"https://prom/?PASSWORD={SECRET}",
    f"https://prom/?client_secret={SECRET}",
    f"https://prom/?auth={SECRET}",
    f"https://prom/?api_key={SECRET}",
])
def test_a_secret_in_a_url_is_masked(text):
    masked = redact_text(text)
    assert SECRET not in masked and "***" in masked


def test_config_text_assignments_are_masked_and_the_rest_kept():
    text = f'[history]\nurl = "postgresql://a:{SECRET}@db/h"\npassword = "{SECRET}"\nkeyboard = 3\n'
    masked = redact_text(text, assignments=True)
    assert SECRET not in masked and "keyboard = 3" in masked and 'url = "postgresql://a:***@db/h"' in masked


def test_text_without_secrets_is_unchanged():
    for text in ("gpu01:22", "http://prom:9090/api?query=up", "a=b", "sqlite:////tmp/h.sqlite", "user@host",
                 "git@github.com:org/repo", "ssh alice@gpu01:22", "pytorch:24.01-py3@sha256:" + "ab" * 32,
                 "registry.example:5000/team/train@sha256:" + "0f" * 32, "http://[::1]:9090/x", '{"a": "b@c", "d": "e:f"}'):
        assert redact_text(text) == text


def test_scrub_masks_a_report_in_place_and_keeps_statuses():
    result = CheckResult("x.y", "n1", Status.ERROR, f"http://a:{SECRET}@h failed",
                         evidence=[Evidence(f"GET http://a:{SECRET}@h/api", None, "")], facts={"url": f"http://a:{SECRET}@h"})
    report = RunReport(started_at="2026-12-01T00:00:00+00:00", command=f"preflight run --set x.url=http://a:{SECRET}@h")
    report.add(result)
    scrub(report)
    assert SECRET not in repr(report) and report.results[0].status is Status.ERROR


def test_the_terminal_stream_masks_what_is_written_even_across_writes():
    out = io.StringIO()
    stream = RedactingStream(out)
    stream.write("postgresql://u:hun")
    stream.write("ter2XYZ@db/h\n")
    stream.write(f"token={SECRET}")
    stream.flush()
    assert SECRET not in out.getvalue() and "hunter2" not in out.getvalue()
    with pytest.raises(TypeError):
        stream.write(b"")


def test_credentials_in_a_url_become_basic_authentication():
    url, headers = basic_auth(f"http://alice:{SECRET}@prom:9090/x")
    assert url == "http://prom:9090/x" and headers["Authorization"].startswith("Basic ")
    assert basic_auth("http://prom:9090") == ("http://prom:9090", {})


def test_a_secret_in_a_result_is_in_no_report_format_nor_in_results_jsonl(tmp_path):
    """Each result is masked once, as it joins the report (before results.jsonl gets its line); the
    report pass before the reports are written leaves the results alone, and none of them leaks."""
    from preflight.core.config import Config
    from preflight.core.model import Finding, Measurement
    from preflight.reporters import available
    from preflight.run import finish as steps
    from preflight.run.request import HISTORY_OFF, RunRequest
    from preflight.engine.runner import Runner, RunPlan

    url = f"http://alice:{SECRET}@prom:9090/api?token={SECRET}"
    result = CheckResult("x.y", "n1", Status.FAIL, f"cannot reach {url}", details=[f"GET {url}: refused"],
                         measurements=[Measurement(f"latency of {url}", 1.5, "s", 1.0, "<=", False)],
                         findings=[Finding("x.y.unreachable", Status.FAIL, f"{url} is down", fix=f"check {url}")])
    out = tmp_path / "out"
    runner = Runner(RunPlan(checks=[], config=Config(), output_dir=out, nodes=[],
                            command=f"preflight run --set x.url={url}"))
    runner.record(result)
    runner.jsonl.close()
    formats = tuple(sorted(available()))
    assert {"json", "md", "html", "junit", "prometheus"} <= set(formats)
    run = steps.Finishing(RunRequest(history=HISTORY_OFF, formats=formats), Config(), out, lambda kind, text: None)
    steps.finish(runner.report, run, (("reports", steps.reports),))
    written = {path.name: path.read_text(encoding="utf-8") for path in [*run.written, out / "results.jsonl"]}
    assert len(written) == len(formats) + 1
    assert [name for name, text in written.items() if SECRET in text] == []
    assert "latency of http://alice:***@prom:9090/api?token=***" in written["results.jsonl"]
    assert "cannot reach http://alice:***@" in written["results.json"]


@pytest.mark.parametrize("text", [";" * 200_000, "://a:" * 200_000 + " x@y", "a:" * 200_000 + "@x",
                                  '"a:' * 100_000 + "@x", "=;" * 100_000, "?token" * 100_000])
def test_redaction_is_linear_on_any_text(text):
    """No pattern is tried from every `;` or `://` of a line to its end: each runs once over one word.
    (Quadratic here would be minutes: 200,000 starts times 200,000 characters.)"""
    masked = redact_text(text, assignments=True)
    assert len(masked) <= len(text)


def test_a_password_in_a_hosts_file_line_is_never_quoted_back(tmp_path):
    from preflight.run.hosts import HostsFileError, load_hosts

    for line in (f"alice:{SECRET}@gpu01 slots=8", f'al"ice:{SECRET}@gpu01', f"gpu01 x alice:{SECRET}@gpu02"):
        hosts = tmp_path / "hosts.txt"
        hosts.write_text(line + "\n")
        with pytest.raises(HostsFileError) as raised:
            load_hosts(hosts)
        assert SECRET not in str(raised.value) and "hosts.txt:1" in str(raised.value)


def test_a_history_url_without_its_scheme_is_refused_with_its_password_masked():
    from preflight.history.store import HistoryError, resolve

    for url in (f"alice:{SECRET}@db/preflight", f"://alice:{SECRET}@db/preflight"):
        with pytest.raises(HistoryError) as raised:
            resolve(url)
        assert SECRET not in str(raised.value) and "alice:***@db" in str(raised.value)
