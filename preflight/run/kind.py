"""A kind of run: the object that answers what differs between the ordinary run (`preflight run`) and
the healthcheck (`preflight healthcheck`, a scheduler hook), asked where a run's assembly needs the
answer, never a flag asked in each place.

    where the nodes come from       node_source, local_name
    which checks, which plugins     select, load_errors, discover_options
    the configuration               before_settings, after_settings (the healthcheck: quick level, one node)
    the time                        budget (the healthcheck's: each check's floor out of --budget),
                                    after_execute (what the budget left out, ERROR)
    the output directory            output
    after the run                   steps (preflight.run.finish), step_summary (GITHUB_STEP_SUMMARY)
    the exit code                   exit_code (the verdict's, or 1 only for this node's own finding)

`kind_of(request)` is the one place that tells them apart (by the request's `hook`, what the
healthcheck was asked); a third kind is a third class here.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.core.model import RunReport
from preflight.run import finish, hook
from preflight.run.inputs import check_ids_known, nonempty, output_dir, plugin_name, split_ids, tagged
from preflight.run.request import HOSTS, K8S, LOCAL, SLURM, HookRequest, RunRequest

Selection = tuple[list[str], set[str], bool]  # (wanted, skipped, named explicitly)


class RunKind:
    """The answers of a kind of run; the ordinary run's, unless a kind says otherwise."""

    steps: tuple[tuple[str, finish.Step], ...] = finish.RUN_STEPS
    step_summary = True  # the markdown report appended to GITHUB_STEP_SUMMARY

    def node_source(self, request: RunRequest) -> str:
        """Where the nodes come from (preflight.run.nodes.nodes_for)."""
        if request.k8s is not None:
            return K8S
        if request.slurm or request.drain or request.resume:
            return SLURM
        return HOSTS if request.nodes_file else LOCAL

    def local_name(self) -> str | None:
        """This machine's name as a node, when the run checks it (None: as its transport names it)."""
        return None

    def discover_options(self) -> dict[str, Any]:
        """How the plugins are loaded (preflight.core.registry.discover)."""
        return {}

    def need(self, request: RunRequest) -> Any:
        """Which plugins the run needs imported (preflight.core.registry.needed_by): those --checks or
        --tag name, with what they read; all of them when nothing narrows the selection."""
        from preflight.core.registry import needed_by

        return needed_by(split_ids(request.checks) or None, [t for v in request.tags for t in split_ids(v)])

    def config_changes(self, request: RunRequest, config: Any, checks: dict[str, Any]) -> list[str]:
        """What ./preflight.toml (read because --config named no file) changes in this run, said before
        it starts and recorded in its report (preflight.run.config_changes)."""
        from preflight.run.config_changes import WORKING_DIRECTORY_CONFIG, changes

        return changes(config, checks) if request.config_file == WORKING_DIRECTORY_CONFIG else []

    def before_settings(self, config: Any) -> None:
        """The configuration as loaded, before --set."""

    def after_settings(self, config: Any) -> None:
        """The configuration after --set, before the flags."""

    def select(self, request: RunRequest, registry: Any) -> Selection:
        if request.checks is not None:
            nonempty("--checks", request.checks)
        wanted = split_ids(request.checks) or sorted(registry.checks)
        skipped = set(split_ids(request.skip))
        wanted = tagged(wanted, [t for value in request.tags for t in split_ids(value)], registry.checks)
        check_ids_known(registry, wanted, skipped)
        return wanted, skipped, bool(split_ids(request.checks))

    def load_errors(self, request: RunRequest, registry: Any, skipped: set[str]) -> list[dict[str, str]]:
        """The plugins that failed to load and that this run reports (they make it INCOMPLETE)."""
        return [e.to_dict() for e in registry.errors if plugin_name(e) not in skipped]

    def budget(self, checks: list[Any], config: Any, spent_s: float) -> tuple[dict[str, float], dict[str, str]]:
        """(check id -> its timeout, check id -> why it does not run): the ordinary run has no budget."""
        return {}, {}

    def output(self, request: RunRequest) -> tuple[Path, bool]:
        """(the output directory, whether it is a scratch directory removed after the run)."""
        profile = request.profile
        # Files the run reads that its --out must not replace (a baseline there is refused, not overwritten).
        inputs = [("--baseline", request.baseline_file), ("--config", request.config_file),
                  ("--nodes", request.nodes_file),
                  ("--profile", profile if profile and ("/" in profile or profile.endswith(".toml")) else None)]
        return output_dir(request.out_dir, inputs=inputs, formats=list(request.formats)), False

    def after_execute(self, report: RunReport, prepared: Any) -> None:
        """The report as the runner left it (prepared: preflight.run.service.Prepared)."""

    def exit_code(self, report: RunReport, node: str) -> int:
        """The command's exit code: the verdict's (130 for an interrupted run, as every report says)."""
        from preflight.core.verdict import decide

        return decide(report).exit_code


ORDINARY = RunKind()


@dataclass(frozen=True)
class Healthcheck(RunKind):
    """A scheduler hook's run: the cheap node checks on this node only, within a budget, draining the
    node only for what it measured there (its rules: preflight.run.hook)."""

    asked: HookRequest
    # No baseline, no fleet, no context; results.json only with --out.
    steps = finish.HOOK_STEPS
    step_summary = False

    def node_source(self, request: RunRequest) -> str:
        return LOCAL  # a hook checks the node it runs on; --drain and --resume act on that node

    def local_name(self) -> str | None:
        return self.asked.node or None

    def discover_options(self) -> dict[str, Any]:
        # A hook's imports are bounded by a third of its budget and count against it.
        return {"limit_s": self.asked.budget_s / 3}

    def need(self, request: RunRequest) -> Any:
        from preflight.core.registry import needed_by

        return needed_by(split_ids(request.checks) or None, hook=True)  # the hook's node checks, or --checks

    def config_changes(self, request: RunRequest, config: Any, checks: dict[str, Any]) -> list[str]:
        return []  # a healthcheck reads only --config: never a file from where it happens to start

    def before_settings(self, config: Any) -> None:
        hook.shape_config(config)

    def after_settings(self, config: Any) -> None:
        hook.after_settings(config)

    def select(self, request: RunRequest, registry: Any) -> Selection:
        wanted, skipped = hook.select(registry, request.checks, request.skip)
        return wanted, skipped, request.checks is not None

    def load_errors(self, request: RunRequest, registry: Any, skipped: set[str]) -> list[dict[str, str]]:
        return hook.load_errors_of(registry, request.checks, skipped)

    def budget(self, checks: list[Any], config: Any, spent_s: float) -> tuple[dict[str, float], dict[str, str]]:
        return hook.allot(checks, config, self.asked.budget_s, spent_s)

    def output(self, request: RunRequest) -> tuple[Path, bool]:
        if request.out_dir:
            return super().output(request)
        return Path(tempfile.mkdtemp(prefix="preflight-healthcheck-")), True

    def after_execute(self, report: RunReport, prepared: Any) -> None:
        if prepared.left_out:
            hook.record_left_out(report, prepared.selected, prepared.left_out, prepared.nodes[0].name)

    def exit_code(self, report: RunReport, node: str) -> int:
        return hook.exit_code(report, node)


def kind_of(request: RunRequest) -> RunKind:
    """The kind of run the request asks for."""
    return Healthcheck(request.hook) if request.hook is not None else ORDINARY
