"""Findings as the verdict weighs them and every report lists them: one entry per thing found.

A result carries the findings its check stated. Some results state none: a third-party check that
returns an Outcome with a status and a summary, or an ERROR the runner filed (a timeout, a crash, a
node that could not be reached). For those, one finding stands for the result itself, with an id
under the check's id and the fix that fits how it went wrong, so that every report and the verdict
read findings only.

A finding is never worse than the result it belongs to: a SKIP result ("reported, not judged")
whose check noted a WARN finding does not warn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import preflight
from preflight.core.model import CheckResult, Finding, Status

# Suffixes of the ids of findings that stand for a result without findings of its status.
TIMED_OUT = ".timed-out"
CRASHED = ".crashed"
COULD_NOT_MEASURE = ".could-not-measure"
UNREACHABLE = ".unreachable"
ERROR = ".error"
NOT_INSTALLED = ".not-installed"
# What a transport reports (a node not reached, a check that ran out of time) is not a finding about
# the cluster that a team can accept: it means nothing was measured there. No silence covers it.
TRANSPORT_SUFFIXES = (UNREACHABLE, TIMED_OUT, ".nodes-unreachable")


def is_transport(finding_id: str) -> bool:
    return finding_id.endswith(TRANSPORT_SUFFIXES)

# The advice for a node that could not be reached, whatever check was to run there.
UNREACHABLE_FIX = ("Check that the node's name resolves from this machine (`getent hosts NAME`) and that "
                   "`ssh NAME true` succeeds without a prompt; then run preflight again.")



def install_fix(version: str) -> str:
    """How to put this preflight on a node that lacks it, until a release is on the package index.
    (`pip install preflight` installs an unrelated package of that name.)"""
    wheel = f"preflight_cluster-{version}-py3-none-any.whl"
    return (f"Install preflight-cluster {version} for the node's Python: in the preflight clone, "
            f"`python3 -m pip wheel --no-deps -w dist .`; copy dist/{wheel} to the node and run "
            f"`python3 -m pip install --user {wheel}` there (its requirements are light libraries, never a "
            "framework); or run again with --ship, which installs it for that run only, in a throwaway venv "
            "that sees the node's own packages; or point --remote-python at an "
            "interpreter that has it.")


@dataclass(frozen=True)
class Found:
    """One finding of one result, as the reports list it.

    `blocks` says why it blocks the verdict ("" when it does not); `synthesised` is True for the
    finding that stands for a result stating none of its status.
    """

    result: CheckResult
    finding: Finding
    blocks: str = ""
    synthesised: bool = False

    @property
    def id(self) -> str:
        return self.finding.id

    @property
    def level(self) -> Status:
        return self.finding.level

    @property
    def node(self) -> str:
        """Where it was found: the node or link a cluster check's finding names, else the result's node."""
        return self.finding.node or self.result.node


def lacks_preflight(message: str) -> bool:
    """The node was reached, and its interpreter lacks preflight or runs another version of it."""
    return message.startswith("preflight is not installed") or " runs preflight " in message


def node_label(error: str) -> str:
    """What a node the run could not use is called: never "unreachable" when it was reached."""
    return "without preflight" if lacks_preflight(error) else "unreachable"


def _error_finding(result: CheckResult, unreachable: bool) -> Finding:
    cid, summary = result.check_id, result.summary
    rerun = f"`preflight run --checks {cid}`"
    if lacks_preflight(summary):
        return Finding(cid + NOT_INSTALLED, Status.ERROR, summary, install_fix(preflight.__version__))
    if unreachable:
        return Finding(cid + UNREACHABLE, Status.ERROR, summary, UNREACHABLE_FIX)
    if summary.startswith(("timed out", "did not finish")):
        return Finding(cid + TIMED_OUT, Status.ERROR, summary,
                       f"See where it stopped in the check's evidence (report.html); if it only needs longer on "
                       f"this node, raise its limit with `--set {cid}.timeout=SECONDS` or `timeout = SECONDS` "
                       f"under `[checks.\"{cid}\"]` in preflight.toml.")
    if summary.startswith("crashed"):
        return Finding(cid + CRASHED, Status.ERROR, summary,
                       f"The check itself failed: its traceback is in the evidence (report.html, results.json). "
                       f"Run {rerun} again, and report the traceback if it repeats.")
    if summary.startswith("could not measure"):
        return Finding(cid + COULD_NOT_MEASURE, Status.ERROR, summary,
                       f"Provide what the message names on this node, then run {rerun} again.")
    fix = " ".join(result.remediation) or f"See the check's evidence in report.html, then run {rerun} again."
    return Finding(cid + ERROR, Status.ERROR, summary, fix)


def findings_of(result: CheckResult, unreachable: bool = False) -> list[Finding]:
    """The findings of one result that a report lists: every one that is not PASS, capped at the
    result's own status, plus one standing for the result when none carries that status.

    `unreachable`: the result's node could not be reached, so an ERROR there is about reaching it.
    """
    fired = []
    for f in result.findings:
        if f.level is Status.PASS:
            continue
        if f.level.severity > result.status.severity:
            f = Finding(f.id, result.status, f.message, f.fix, f.node)
        fired.append(f)
    if result.status is Status.PASS or any(f.level is result.status for f in fired):
        return fired
    if result.status is Status.ERROR:
        stand_in = _error_finding(result, unreachable)
    else:
        fix = " ".join(result.remediation) if result.status is not Status.SKIP else ""
        stand_in = Finding(f"{result.check_id}.{result.status.value.lower()}", result.status, result.summary, fix)
    return [stand_in, *fired]


# A figure in a sentence: 0.96, 8192, 1,024, 19.1 (in "19.1x"); not a part of gpu01, n2 or 198.18.0.3.
FIGURE = re.compile(r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)?(?![.,]?\d)")


def figure_shape(text: str) -> str:
    """The sentence with each figure as '#': findings that differ only in their figures share it."""
    return FIGURE.sub("#", text)


def shapes() -> Callable[[str], str]:
    """figure_shape with a memory, for one pass over a run's findings: the same sentence found on node
    after node is shaped once."""
    memo: dict[str, str] = {}

    def shape(text: str) -> str:
        shaped = memo.get(text)
        if shaped is None:
            shaped = memo[text] = figure_shape(text)
        return shaped
    return shape


def fold_key(found: Found, shape: Callable[[str], str] = figure_shape) -> tuple:
    """Findings with one key are one entry in every list and every count: one check, one id, one level,
    the same sentence and fix up to their figures (the same slow disk on 12 nodes, a few percent apart).
    `shape`: figure_shape, or one with a memory (shapes) when many findings are keyed."""
    return (found.result.check_id, found.id, found.level, shape(found.finding.message),
            shape(found.finding.fix), found.blocks)


def count_folded(found: list[Found]) -> int:
    """How many entries the reports list for these findings (fold_key)."""
    shape = shapes()
    return len({fold_key(f, shape) for f in found})


def _number(token: str) -> float:
    return float(token.replace(",", ""))


def merge_figures(texts: list[str]) -> str:
    """One sentence for sentences of one shape (figure_shape): each figure that differs among them as
    its range, lowest to highest ("torch.save writes at 0.41-0.46 GB/s, below 1.0 GB/s")."""
    texts = list(dict.fromkeys(texts))  # the same sentence from many nodes adds no figure to a range
    first = texts[0]
    columns = list(zip(*(FIGURE.findall(t) for t in texts)))
    if len(texts) == 1 or not columns:
        return first
    parts, pos = [], 0
    for match, column in zip(FIGURE.finditer(first), columns):
        low, high = min(column, key=_number), max(column, key=_number)
        parts += [first[pos:match.start()], low if _number(low) == _number(high) else f"{low}-{high}"]
        pos = match.end()
    return "".join(parts) + first[pos:]
