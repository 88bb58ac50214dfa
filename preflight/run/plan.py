"""The run plan: which checks run, and what each needs (the header line results.jsonl starts with is
written from it by preflight.engine.head)."""

from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from preflight.core.check import ROLE_INVENTORY, Check
from preflight.engine.head import needs_of


class PlanError(ValueError):
    """A selection that cannot be run as asked (exit 2, nothing run)."""


@dataclass
class Selection:
    ids: list[str]  # what runs, before ordering
    added: dict[str, str] = field(default_factory=dict)  # id pulled in -> the check that reads it


def select(checks: dict[str, type[Check]], wanted: list[str], skipped: set[str], explicit: bool) -> Selection:
    """The checks to run: `wanted` without `skipped`, plus what they read.

    A check's run_after dependencies are pulled in (a check that compares what another records on
    each node), and the inventory check (Check.role) whenever a check needs a GPU or a framework: its
    facts say whether the node has NVIDIA GPUs, which decides whether a SKIP there blocks. A dependency
    the user skipped on purpose, of a check the user asked for by name, is a contradiction (PlanError);
    of a check that was only there by default, the dependent is dropped too.
    """
    inventory = [cid for cid, c in sorted(checks.items()) if c.role == ROLE_INVENTORY]
    chosen = [c for c in wanted if c not in skipped]
    selection = Selection(list(chosen))
    pending = list(chosen)
    while pending:
        check_id = pending.pop(0)
        if check_id not in selection.ids:
            continue
        check = checks[check_id]
        deps = list(check.run_after)
        if needs_of(check):
            deps += [i for i in inventory if i not in deps]
        for dep in deps:
            if dep in selection.ids or dep not in checks:
                continue
            if dep in skipped:
                if dep in inventory and dep not in check.run_after:
                    continue  # only the inference is lost: the check still measures
                if explicit:
                    raise PlanError(f"--skip {dep} removes what {check_id} reads; drop {dep} from --skip "
                                    f"or {check_id} from --checks")
                selection.ids.remove(check_id)
                break
            selection.ids.append(dep)
            selection.added[dep] = check_id
            pending.append(dep)
    return selection


def _requirement(check: type[Check], expect: Any, slots: list[int | None], profile: str = "") -> str:
    """Which expectation makes this check one that must run ("expect.nodes = 2"), or ""."""
    import dataclasses

    from preflight.core.check import Expect

    instance = check()
    for f in dataclasses.fields(Expect):
        value = getattr(expect, f.name)
        if value in (None, []) or not instance.expected_to_run(Expect(**{f.name: value})):
            continue
        shown = f"expect.{f.name} = {value!r}"
        return f"{shown} (--profile {profile})" if profile and f.name == "gpus_per_node" else shown
    for count in slots:
        if count and instance.expected_to_run(Expect(gpus_per_node=count)):
            return f"the hosts file's slots={count}"
    return "the configuration's [expect] table" if instance.expected_to_run(expect) else ""


def check_deselection(checks: dict[str, type[Check]], wanted: list[str], skipped: set[str], selection: Selection,
                      expect: Any, slots: list[int | None], profile: str = "") -> None:
    """A check the expectations say must run may not be taken out by --skip, directly or because it
    reads a check that was skipped: PlanError (exit 2) naming the flag, the check and the expectation.
    Checks simply not named in --checks are the user's narrower question, not a contradiction."""
    for check_id in sorted(skipped):
        if check_id in checks:
            why = _requirement(checks[check_id], expect, slots, profile)
            if why:
                raise PlanError(f"--skip {check_id}: {why} says {check_id} must run; drop it from --skip or "
                                "change the expectation")
    for check_id in wanted:
        if check_id in skipped or check_id in selection.ids or check_id not in checks:
            continue
        why = _requirement(checks[check_id], expect, slots, profile)
        reads = [d for d in checks[check_id].run_after if d in skipped]
        if why and reads:
            raise PlanError(f"--skip {', '.join(reads)} removes {check_id}, which reads what {reads[0]} records, and "
                            f"{why} says {check_id} must run; drop {reads[0]} from --skip or change the expectation")


def prepare_params(ids: list[str], checks: dict[str, type[Check]], config: Any, cwd: Path | None = None) -> None:
    """Let each check read, on the coordinator, what its nodes need (a lock file, say) into its params
    (Check.prepare_on_coordinator); a ValueError it raises is the user's mistake (a configured file
    that does not exist) and stops the run before it starts."""
    where = cwd or Path.cwd()
    for check_id in ids:
        before = dict(config.params.get(check_id, {}))
        try:
            after = checks[check_id].prepare_on_coordinator(dict(before), where)
        except ValueError as exc:
            raise PlanError(f"{check_id}: {exc}") from None
        if after != before:
            config.params[check_id] = after
            from preflight.core.origin import PREPARED

            for key in after:
                if key not in before or before[key] != after[key]:
                    config.origins[f"{check_id}.{key}"] = PREPARED
