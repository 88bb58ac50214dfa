"""Run levels: how much a run measures, sized to the time there is.

    quick      probes and small measurements only, for a Slurm prolog or a node health check:
               at most QUICK_BUDGET_S of check time per node, by design (every check that runs at
               quick declares a timeout, and their sum per node stays within the budget; a test
               holds it there). Checks that cannot fit are skipped with a reason that says so, and
               that SKIP never blocks the verdict.
    standard   today's run: each check at its own defaults.
    thorough   larger messages and checkpoints, more repeats, the full bandwidth matrix.

Each check declares what each level changes in its `levels` class attribute, a dict from level to
parameter overrides; two keys are not parameters: "timeout" (the check's timeout at that level, in
seconds) and "skip" (a sentence: why the check does not run at that level). Precedence, lowest first:
the check's defaults < the level < the profile < the config file < --set (and --timeout).
"""

from __future__ import annotations

from typing import Any, Callable

LEVELS = ("quick", "standard", "thorough")
DEFAULT_LEVEL = "standard"
# Check time per node each level is designed to fit in, in seconds.
QUICK_BUDGET_S = 30.0
BUDGET_S = {"quick": QUICK_BUDGET_S, "standard": 15 * 60.0, "thorough": 60 * 60.0}
DESCRIPTION = {
    "quick": "probes and small measurements only (Slurm prolog, node health check)",
    "standard": "every check at its defaults",
    "thorough": "larger messages and checkpoints, more repeats, the full bandwidth matrix",
}
# Keys of a level's declaration that are not parameters of the check.
TIMEOUT_KEY = "timeout"
SKIP_KEY = "skip"
RESERVED = (TIMEOUT_KEY, SKIP_KEY)
# Finding id suffix of the SKIP a check gets at a level it does not run at (never blocks).
SKIPPED_AT_LEVEL = ".skipped-at-level"


def declaration(check: Any, level: str) -> dict[str, Any]:
    """What `level` changes for `check`, as the check declares it ({} when nothing)."""
    return dict(check.levels.get(level) or {})


def overrides(check: Any, level: str) -> dict[str, Any]:
    """The parameter overrides of `level` for `check` (without "timeout" and "skip")."""
    return {k: v for k, v in declaration(check, level).items() if k not in RESERVED}


def timeout(check: Any, level: str) -> float | None:
    value = declaration(check, level).get(TIMEOUT_KEY)
    return float(value) if value is not None else None


def skip_reason(check: Any, level: str) -> str:
    """Why `check` does not run at `level`, or "" when it runs.

    At quick, a check that declares nothing for quick (a plugin written before levels) is left out:
    its time is unknown, and quick promises its budget.
    """
    if level == "quick" and "quick" not in check.levels:
        return (f"it declares no quick variant (a `levels` entry for quick), so it could overrun the "
                f"{QUICK_BUDGET_S:.0f} s budget")
    return str(declaration(check, level).get(SKIP_KEY) or "")


def skip_summary(check_id: str, level: str, reason: str) -> str:
    return f"not run at --level {level}: {reason}"


def level_text(report: Any) -> str:
    """The level line of every report: which level ran and its time budget per node."""
    level = getattr(report, "level", DEFAULT_LEVEL) or DEFAULT_LEVEL
    budget = report.level_budget_s if getattr(report, "level_budget_s", None) else BUDGET_S.get(level)
    seconds = f"{budget:.0f} s" if budget and budget < 120 else f"{budget / 60:.0f} min" if budget else ""
    described = DESCRIPTION.get(level, "")
    chosen = _chosen(report)
    if level == DEFAULT_LEVEL and chosen:  # not "every check at its defaults" when values were set
        described = f"each check at its defaults, except what {' and '.join(chosen)} set"
    return f"{level}: {described}" + (f"; at most {seconds} of checks per node" if seconds else "")


def _chosen(report: Any) -> list[str]:
    """Where the run's values beyond the checks' defaults came from: --set, the config file, the profile."""
    judged = getattr(report, "judged_with", None) or {}
    chosen = []
    if judged.get("settings"):
        chosen.append("--set")
    if judged.get("config_file"):
        chosen.append(str(judged["config_file"]))
    if judged.get("profile") or getattr(report, "profile", ""):
        chosen.append(f"the profile {judged.get('profile') or report.profile}")
    return chosen


def describe(check: Any, show: Callable[[Any], str] = repr) -> list[str]:
    """One line per level that changes something for `check`, for `preflight explain`."""
    lines = []
    for level in LEVELS:
        reason = skip_reason(check, level)
        if reason:
            lines.append(f"  {level}: not run ({reason})")
        elif declaration(check, level):
            lines.append(f"  {level}: " + ", ".join(f"{k} = {show(v)}" for k, v in declaration(check, level).items()))
    return lines
