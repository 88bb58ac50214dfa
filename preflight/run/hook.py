"""The rules of a run for a scheduler hook (`preflight healthcheck`): the cheap node checks on this
node only, bounded in time, draining the node only for what it measured there.

Slurm runs it as HealthCheckProgram (every HealthCheckInterval seconds, on idle nodes) or as a
Prolog (before every job; a non-zero exit drains the node and requeues the job). Its exit code is 1
exactly when this node has a blocking finding of its own (what --drain drains), and 0 otherwise, GO
or not: what it could not measure (a check ERROR: a probe short of time, a plugin that did not load,
a timeout) is printed with the verdict and drains nothing.

Each check gets its run-level `quick` timeout (its floor: what it needs to finish) out of the budget,
in run order; a check the budget can no longer give its floor does not run and is ERROR, so a small
budget never turns into a half-run probe that reads as a broken GPU.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from preflight.core.model import RunReport, Scope
from preflight.core.origin import command
from preflight.run.inputs import check_ids_known, plugin_name, split_ids
from preflight.run.request import RunProblem

DEFAULT_BUDGET_S = 45.0  # slurmd kills a HealthCheckProgram after 60 s
MIN_CHECK_TIMEOUT_S = 5.0  # the floor of a check that declares no quick-level timeout
EXIT_HEALTHY, EXIT_DRAIN = 0, 1
LEVEL = "quick"  # each check's parameters sized for a hook (preflight.core.levels); --set still wins
ORIGIN = command("healthcheck")  # where the hook's own settings come from, as the config records it


def hook_check_ids(checks: dict) -> list[str]:
    """The registered node checks that declare themselves cheap enough for a hook (Check.hook)."""
    return sorted(cid for cid, check in checks.items() if check.scope is Scope.NODE and check.hook)


def local_node_name() -> str:
    """This node as Slurm names it: slurmd exports SLURMD_NODENAME to its prolog; else the short hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def floor_s(check: Any) -> float:
    """The least time a check is given: its quick-level timeout, which is sized for a hook."""
    from preflight.core import levels

    at_quick = levels.timeout(check, LEVEL)
    return float(at_quick) if at_quick is not None else MIN_CHECK_TIMEOUT_S


def shape_config(config: Any) -> None:
    """Before --set: the quick level. One node is checked here: how many nodes the cluster has is for
    `preflight run` to judge."""
    config.level = LEVEL
    config.origins["run.level"] = ORIGIN


def after_settings(config: Any) -> None:
    config.expect.nodes = None


def allot(checks: list[Any], config: Any, budget_s: float,
          spent_s: float = 0.0) -> tuple[dict[str, float], dict[str, str]]:
    """(check id -> timeout, check id -> why it does not run): in run order, each check gets its own
    timeout (the quick one, unless the configuration sets another) out of what is left of the budget;
    one that can no longer get its floor is left out, with the reason. `spent_s`: the budget used
    already (loading the plugins)."""
    left = budget_s - spent_s
    timeouts: dict[str, float] = {}
    left_out: dict[str, str] = {}
    for check in checks:
        if config.skipped_at_level(check):
            continue  # recorded as a SKIP of the level, costs nothing
        want, floor = config.timeout_for(check), floor_s(check)
        give = min(want, left)
        if give < min(want, floor):
            left_out[check.id] = (f"not run: --budget {budget_s:g} s leaves {max(0.0, left):.0f} s for it, and it "
                                  f"needs {min(want, floor):g} s; raise --budget or --skip {check.id}")
            continue
        timeouts[check.id] = give
        left -= give
    return timeouts, left_out


def select(registry: Any, only: str | None, skip: str | None) -> tuple[list[str], set[str]]:
    """(ids to run, ids skipped): the hook checks, or --checks (node checks only), less --skip."""
    if only is not None and not split_ids(only):
        raise RunProblem("--checks is empty; give check ids or leave --checks out")
    wanted = split_ids(only) or hook_check_ids(registry.checks)
    skipped = set(split_ids(skip))
    check_ids_known(registry, wanted, skipped)
    cluster = [cid for cid in wanted if registry.checks[cid].scope is not Scope.NODE]
    if cluster:
        raise RunProblem(f"--checks {', '.join(cluster)}: a cluster check measures across nodes; healthcheck "
                         "runs on this node only (use `preflight run`)")
    return [cid for cid in wanted if cid not in skipped], skipped


def load_errors_of(registry: Any, only: str | None, skipped: set[str]) -> list[dict[str, str]]:
    """The plugins that failed to load and that this healthcheck might have run: named in --checks, or
    (without --checks) any not skipped, since a plugin that did not load could not say whether it is
    a hook check. They make the verdict INCOMPLETE, which drains nothing."""
    asked = set(split_ids(only))
    return [e.to_dict() for e in registry.errors if plugin_name(e) not in skipped
            and (not asked or plugin_name(e) in asked)]


def record_left_out(report: RunReport, checks: list[Any], left_out: dict[str, str], node: str) -> None:
    """The checks the budget could not hold: planned, and ERROR with the reason."""
    from preflight.engine.execute import error_result

    for check in checks:
        if check.id in left_out:
            report.planned.append(check.id)
            report.add(error_result(check, node, left_out[check.id]))


def drain_worthy(report: RunReport, node: str) -> list[tuple[str, str]]:
    """This node's own blocking findings, measured (what --drain drains); empty: nothing to drain. The
    rule is preflight.core.blame's, which Slurm's drain and Kubernetes' cordon follow too."""
    from preflight.core.blame import own_findings

    return own_findings(report).get(node, [])


def exit_code(report: RunReport, node: str) -> int:
    return EXIT_DRAIN if drain_worthy(report, node) else EXIT_HEALTHY
