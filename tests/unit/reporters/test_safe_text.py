"""Machine text cannot forge a line, an escape sequence or a reordering in the terminal or in Markdown."""

from __future__ import annotations

import re

from preflight.core.compare import compare
from preflight.core.model import Evidence, Finding, NodeInfo, Status
from preflight.reporters import baseline as baseline_words
from preflight.reporters.markdown import render as render_markdown
from preflight.reporters.markdown_text import md_code_block, md_escape
from preflight.reporters.safe_text import block, single_line
from preflight.reporters.terminal import render as render_terminal, result_line
from tests.conftest import make_report, make_result

FORGED = "\n## preflight: GO\npreflight: GO - every check passed"
ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m"
BIDI = "\u202egnp.exe\u2066\u2069\u202a\u202b\u202c\u202d\u200e\u200f\u061c\u2067\u2068"
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def hostile_report():
    bad = make_result("gpu.visibility", "gpu01", Status.FAIL, f"2 GPUs missing{FORGED}{ESCAPES}{BIDI}",
                      findings=[Finding("gpu.visibility.count", Status.FAIL, f"count{FORGED}", fix=f"reseat{FORGED}")],
                      remediation=[f"reseat it{FORGED}\r## preflight: GO"],
                      evidence=[Evidence("nvidia-smi", 1, f"line one\r\npreflight: GO\x1b[1A{BIDI}")])
    warn = make_result("node.environment", "gpu01", Status.WARN, f"shm small\r\n## preflight: GO{ESCAPES}")
    report = make_report([bad, warn], incomplete_reason="")
    report.nodes = [NodeInfo("gpu01"), NodeInfo("gpu02", reachable=False, error=f"ssh: refused{FORGED}\x1b[2K")]
    report.load_errors = [{"entry_point": "x.y = m:C", "distribution": "evil 1", "error": f"boom{FORGED}"}]
    return report


def assert_inert(text: str, forged_prefixes: tuple[str, ...]) -> None:
    assert "\x1b" not in text and "\x9b" not in text
    assert not HIDDEN.search(text.replace("\n", "").replace("\t", ""))
    for line in text.splitlines():
        assert not line.lstrip(" >-*").startswith(forged_prefixes), line


def test_terminal_summary_has_no_forged_line_and_no_escape():
    text = render_terminal(hostile_report())
    assert text.startswith("preflight: NO-GO")
    assert_inert(text, ("preflight: GO", "## preflight"))


def test_the_line_printed_per_result_is_one_inert_line():
    line = result_line(hostile_report().results[0])
    assert "\n" not in line and "\r" not in line
    assert_inert(line, ("preflight: GO",))


def test_markdown_report_has_no_forged_heading_and_no_escape():
    text = render_markdown(hostile_report())
    assert "**NO-GO**" in text.splitlines()[0]
    assert_inert(text, ("## preflight", "preflight: GO"))


def test_diff_text_is_inert_too():
    old = make_report([make_result("gpu.visibility", "gpu01", Status.PASS, "fine")])
    new = hostile_report()
    text = baseline_words.render_text(compare(old, new, 0.1, old_label=f"old{FORGED}"))
    assert_inert(text, ("preflight: GO", "## preflight"))


def test_helpers_fold_breaks_show_controls_and_keep_ordinary_text():
    assert single_line("a\nb\rc\u2028d\x85e") == "a b c d e"
    assert single_line("ring\x07") == "ring\\x07" and single_line("x\u202ey") == "x\\u202ey"
    assert single_line("\x1b[31mred\x1b[0m and \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "red and link"
    assert single_line("café ✅ ⚠️  two  spaces") == "café ✅ ⚠️  two  spaces"
    assert block("one\r\ntwo\rthree\tfour\x1b[2J") == "one\ntwo\nthree\tfour"
    assert md_escape("**bold**\n# heading\x1b[2J") == "\\*\\*bold\\*\\* # heading"
    fenced = md_code_block("out\x1b[2J\n```\n## preflight: GO")
    assert "\x1b" not in fenced and fenced.startswith("````text")
