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

from preflight.core import origin as origins
from preflight.core.check import Check, Expect
from preflight.core.config import Config, apply_cli_settings, load, validate
from preflight.core.origin import NOTE, Origin, OriginKind, read_sources

RUN_KEYS = ("fail_on", "level")
OLDER_REPORT = ("recorded before preflight kept the run's --set values and config file: re-judged with "
                "its profile, expectations, level and fail_on only")


def recorded_sources(config: Any) -> dict[str, Origin]:
    """Where each value the run is judged with came from, as the config recorded it (origins): every
    parameter beyond the defaults, every expectation set, and the run's fail_on and level."""
    sources = {f"{cid}.{key}": config.origins.get(f"{cid}.{key}", origins.PREPARED)
               for cid, params in config.params.items() for key in params}
    sources.update({f"expect.{key}": config.origins.get(f"expect.{key}", origins.DEFAULT)
                    for key, value in config.expect.to_dict().items() if value is not None})
    sources.update({f"run.{key}": config.origins.get(f"run.{key}", origins.DEFAULT) for key in RUN_KEYS})
    return sources


def record_judging(config: Any, checks: dict[str, type[Check]]) -> dict[str, Any]:
    """RunReport.judged_with for a run about to start with this (validated, prepared) config."""
    from preflight.core.redact import NOTE as REDACTED, redact_text, scrub

    text = config.file_text
    settings = list(config.settings)
    record = {
        "params": scrub(copy.deepcopy(config.params)),
        "expect": config.expect.to_dict(),
        "sources": {key: str(origin) for key, origin in recorded_sources(config).items()},
        "profile": config.profile or "",
        "config_file": config.path or "",
        "config_text": redact_text(text, assignments=True) if text else text,  # a password is never recorded
        "settings": [redact_text(s, assignments=True) for s in settings],
    }
    if record["config_text"] != text or record["settings"] != list(settings) or record["params"] != config.params:
        record["redacted"] = REDACTED
    return record


def recorded_layer(report: Any, checks: dict[str, type[Check]], new_profile: str | None) -> Config:
    """The values the run was judged with, as the bottom layer of `report --rejudge`: each with its
    origin, marked as the run's. A profile given anew replaces what the run's own profile set; a
    report that predates the record keeps its profile (loaded again), expectations, level and fail_on."""
    recorded = report.judged_with or {}
    run_profile = recorded.get("profile", report.profile) or ""
    layer = Config(params=copy.deepcopy(recorded.get("params") or {}), fail_on=report.fail_on, level=report.level,
                   profile=run_profile, profile_sources=list(report.profile_sources))
    if not recorded and run_profile and not new_profile:
        base = load(None, checks, profile=run_profile)
        layer.params = base.params
        layer.origins = {key: origin.as_recorded() for key, origin in base.origins.items()
                         if not key.startswith(("run.", "expect.", "history."))}
    layer.origins.update({key: origin.as_recorded() for key, origin in read_sources(recorded.get("sources")).items()})
    expect = {k: v for k, v in (recorded.get("expect") or report.expect or {}).items() if k in Expect.__dataclass_fields__}
    layer.expect = Expect(**expect)
    for key in [f"expect.{k}" for k, v in expect.items() if v is not None] + [f"run.{k}" for k in RUN_KEYS]:
        layer.origins.setdefault(key, origins.RUN)
    if new_profile:
        _drop_profile(layer, run_profile)
    return layer


def _drop_profile(layer: Config, run_profile: str) -> None:
    """A new profile replaces what the run's own profile set; the run's file and --set stay."""
    for key, origin in list(layer.origins.items()):
        if origin.kind is not OriginKind.PROFILE or origin.name != run_profile:
            continue
        check_id, _, name = key.rpartition(".")
        if key.startswith("expect."):
            setattr(layer.expect, name, None)
        elif check_id in layer.params:
            layer.params[check_id].pop(name, None)
        del layer.origins[key]


def rejudge_config(registry: Any, report: Any, profile: str | None, settings: list[str],
                   config_file: str | None) -> tuple[Any, dict[str, str]]:
    """The Config to judge the recorded facts with, and where each of its values came from: loading
    with one more layer at the bottom, what the run recorded (`recorded_layer`).

    Raises preflight.core.config.ConfigError for a bad profile, file or setting given to --rejudge,
    or for values that contradict each other once merged (as `preflight run` refuses them).
    """
    checks = registry.checks
    run_profile = (report.judged_with or {}).get("profile", report.profile) or ""
    new_profile = profile if profile is not None and profile != run_profile else None
    config = load(config_file, checks, profile=new_profile,
                             under=recorded_layer(report, checks, new_profile))
    apply_cli_settings(config, settings, checks)
    config.params = {k: v for k, v in config.params.items() if v}
    config.path = config_file
    validate(config, checks)
    sources = {key: str(origin) for key, origin in config.origins.items()
               if origin.recorded or not _not_judged(key)}
    if not report.judged_with:
        sources[NOTE] = OLDER_REPORT
    return config, dict(sorted(sources.items()))


def _not_judged(key: str) -> bool:
    """A setting that judges nothing, left out of the re-judged report's sources: [history], timeouts."""
    return key.startswith("history.") or key.endswith(".timeout") or key == "run.timeout"
