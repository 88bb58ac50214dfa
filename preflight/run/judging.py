"""What a run is judged with, recorded in the run report, and rebuilt from it to judge again.

`preflight run` records (RunReport.judged_with) every parameter it judged with beyond the checks'
defaults, its expectations, the --set values, the config file's text and which layer each value came
from: the profile, the config file, --set, or the check itself (a value a check prepared on the
coordinator, such as the pins it read from the working directory). `preflight report --rejudge`
starts from that record, so re-judging with no options judges as the run did; the options given to
--rejudge override it on top (a --profile given then replaces the values the run's own profile
set), and the re-judged report names the source of every value.

Reports written before this record existed keep their profile, expectations, level and fail_on;
only their --set values and config file are unknown, and the re-judged report says so.
"""

from __future__ import annotations

import copy
from typing import Any

from preflight.core.check import Check, Expect

SET = "--set"
PREPARED = "prepared by the check on the coordinator"
RUN = "the run"
RUN_KEYS = ("fail_on", "level")


def recorded_sources(config: Any) -> dict[str, str]:
    """Where each value the run is judged with came from, as the config recorded it (origins): every
    parameter beyond the defaults, every expectation set, and the run's fail_on and level."""
    from preflight.core.config import ORIGIN_DEFAULT

    sources = {f"{cid}.{key}": config.origins.get(f"{cid}.{key}", PREPARED)
               for cid, params in config.params.items() for key in params}
    sources.update({f"expect.{key}": config.origins.get(f"expect.{key}", ORIGIN_DEFAULT)
                    for key, value in config.expect.to_dict().items() if value is not None})
    sources.update({f"run.{key}": config.origins.get(f"run.{key}", ORIGIN_DEFAULT) for key in RUN_KEYS})
    return sources


def record_judging(config: Any, checks: dict[str, type[Check]]) -> dict[str, Any]:
    """RunReport.judged_with for a run about to start with this (validated, prepared) config."""
    from preflight.core.redact import NOTE, redact_text, scrub

    text = config.file_text
    settings = list(config.settings)
    record = {
        "params": scrub(copy.deepcopy(config.params)),
        "expect": config.expect.to_dict(),
        "sources": recorded_sources(config),
        "profile": config.profile or "",
        "config_file": config.path or "",
        "config_text": redact_text(text, assignments=True) if text else text,  # a password is never recorded
        "settings": [redact_text(s, assignments=True) for s in settings],
    }
    if record["config_text"] != text or record["settings"] != list(settings) or record["params"] != config.params:
        record["redacted"] = NOTE
    return record


def _merge(params: dict[str, dict[str, Any]], layer: dict[str, dict[str, Any]]) -> None:
    for check_id, values in layer.items():
        params.setdefault(check_id, {}).update(copy.deepcopy(values))


def _given(checks: dict[str, type[Check]], profile: str | None, config_file: str | None, settings: list[str]) -> Any:
    """The values the options given now set (a profile, a config file, --set), each with its origin."""
    from preflight.core import config as config_mod

    given = config_mod.load(config_file, checks, profile=profile)
    config_mod.apply_cli_settings(given, settings, checks)
    return given


def _run_sources(recorded: dict[str, Any], expect: dict[str, Any]) -> dict[str, str]:
    sources = {key: source if source.startswith(RUN) else f"{RUN} ({source})"
               for key, source in (recorded.get("sources") or {}).items() if key != "note"}
    for key, value in expect.items():
        if value is not None:
            sources.setdefault(f"expect.{key}", RUN)
    sources.setdefault("run.fail_on", RUN)
    sources.setdefault("run.level", RUN)
    return sources


def _drop_profile(recorded: dict[str, Any], run_profile: str, params: dict[str, dict[str, Any]],
                  expect: dict[str, Any], sources: dict[str, str]) -> None:
    """A new profile replaces what the run's own profile set; the run's file and --set stay."""
    old = (f"--profile {run_profile}", f"{RUN} (--profile {run_profile})")
    for key, source in (recorded.get("sources") or {}).items():
        check_id, _, name = key.rpartition(".")
        if source in old and check_id in params:
            params[check_id].pop(name, None)
            sources.pop(key, None)
        if source in old and key.startswith("expect."):
            expect[name] = None
            sources.pop(key, None)


def rejudge_config(registry: Any, report: Any, profile: str | None, settings: list[str],
                   config_file: str | None) -> tuple[Any, dict[str, str]]:
    """The Config to judge the recorded facts with, and where each of its values came from.

    Raises preflight.core.config.ConfigError for a bad profile, file or setting given to --rejudge,
    or for values that contradict each other once merged (as `preflight run` refuses them).
    """
    from preflight.core import config as config_mod

    recorded = report.judged_with or {}
    checks = registry.checks
    params: dict[str, dict[str, Any]] = copy.deepcopy(recorded.get("params") or {})
    expect = {k: v for k, v in (recorded.get("expect") or report.expect or {}).items()
              if k in Expect.__dataclass_fields__}
    sources = _run_sources(recorded, expect)
    run_profile = recorded.get("profile", report.profile) or ""
    profile_sources = list(report.profile_sources)
    if not recorded and run_profile and (profile is None or profile == run_profile):
        # An older report kept only its profile's name: its thresholds come from that profile again.
        base = config_mod.load(None, checks, profile=run_profile)
        _merge(params, base.params)
        sources.update({key: f"{RUN} ({origin})" for key, origin in base.origins.items()
                        if not key.startswith(("run.", "expect.", "history."))})
    new_profile = profile if profile is not None and profile != run_profile else None
    if new_profile:
        _drop_profile(recorded, run_profile, params, expect, sources)
    given = _given(checks, new_profile, config_file, settings)
    _merge(params, given.params)
    for key, value in given.expect.to_dict().items():
        if f"expect.{key}" in given.origins:
            expect[key] = value
    fail_on = given.fail_on if "run.fail_on" in given.origins else report.fail_on
    level = given.level if "run.level" in given.origins else report.level
    sources.update({key: origin for key, origin in given.origins.items()
                    if not key.startswith("history.") and not key.endswith(".timeout") and key != "run.timeout"})
    config = config_mod.Config(params={k: v for k, v in params.items() if v}, expect=Expect(**expect),
                               fail_on=fail_on, profile=new_profile or run_profile,
                               profile_sources=list(given.profile_sources) if new_profile else profile_sources,
                               level=level, path=config_file, silence=given.silence)
    config.origins = dict(sources)
    config_mod.validate(config, checks)
    if not recorded:
        sources["note"] = ("recorded before preflight kept the run's --set values and config file: re-judged with "
                           "its profile, expectations, level and fail_on only")
    return config, dict(sorted(sources.items()))
