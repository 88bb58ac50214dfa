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


def _layer_sources(config: Any, name: str, sources: dict[str, str], expect_sources: dict[str, str]) -> None:
    for check_id, params in config.params.items():
        for key in params:
            sources[f"{check_id}.{key}"] = name
    for key, value in config.expect.to_dict().items():
        if value is not None:
            expect_sources[f"expect.{key}"] = name


def _layers(checks: dict[str, type[Check]], profile: str | None, config_file: str | None,
            settings: list[str]) -> list[tuple[str, Any]]:
    """(source name, Config) for each layer given, lowest first: profile, config file, --set."""
    from preflight.core import config as config_mod

    layers = []
    if profile:
        layers.append((f"--profile {profile}", config_mod.load(None, checks, profile=profile)))
    if config_file:
        layers.append((f"--config {config_file}", config_mod.load(config_file, checks)))
    if settings:
        only_set = config_mod.Config()
        config_mod.apply_cli_settings(only_set, settings, checks)
        layers.append((SET, only_set))
    return layers


def _read_text(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""


def record_judging(config: Any, checks: dict[str, type[Check]], *, profile: str | None, config_file: str | None,
                   settings: list[str], flags: dict[str, Any]) -> dict[str, Any]:
    """RunReport.judged_with for a run about to start with this (validated, prepared) config."""
    sources: dict[str, str] = {}
    expect_sources: dict[str, str] = {}
    for name, layer in _layers(checks, profile, config_file, settings):
        _layer_sources(layer, name, sources, expect_sources)
    for check_id, params in config.params.items():
        for key in params:
            sources.setdefault(f"{check_id}.{key}", PREPARED)
    run_sources = {}
    for key, flag in (("fail_on", "--fail-on"), ("level", "--level")):
        given = flags.get(flag)
        run_sources[f"run.{key}"] = flag if given else (f"--config {config_file}" if config_file else "default")
    from preflight.core.redact import NOTE, redact_text, scrub

    text = _read_text(config_file)
    record = {
        "params": scrub(copy.deepcopy(config.params)),
        "expect": config.expect.to_dict(),
        "sources": {**sources, **expect_sources, **run_sources},
        "profile": profile or "",
        "config_file": config_file or "",
        "config_text": redact_text(text, assignments=True),  # a password in the file is never recorded
        "settings": [redact_text(s, assignments=True) for s in settings],
    }
    if record["config_text"] != text or record["settings"] != list(settings) or record["params"] != config.params:
        record["redacted"] = NOTE
    return record


def _merge(params: dict[str, dict[str, Any]], layer: dict[str, dict[str, Any]]) -> None:
    for check_id, values in layer.items():
        params.setdefault(check_id, {}).update(copy.deepcopy(values))


def rejudge_config(registry: Any, report: Any, profile: str | None, settings: list[str],
                   config_file: str | None) -> tuple[Any, dict[str, str]]:
    """The Config to judge the recorded facts with, and where each of its values came from.

    Raises preflight.core.config.ConfigError for a bad profile, file or setting given to --rejudge.
    """
    from preflight.core import config as config_mod

    recorded = report.judged_with or {}
    checks = registry.checks
    params: dict[str, dict[str, Any]] = copy.deepcopy(recorded.get("params") or {})
    expect = {k: v for k, v in (recorded.get("expect") or report.expect or {}).items()
              if k in Expect.__dataclass_fields__}
    sources = {key: source if source.startswith(RUN) else f"{RUN} ({source})"
               for key, source in (recorded.get("sources") or {}).items() if key != "note"}
    for key, value in expect.items():
        if value is not None:
            sources.setdefault(f"expect.{key}", RUN)
    sources.setdefault("run.fail_on", RUN)
    sources.setdefault("run.level", RUN)
    run_profile = recorded.get("profile", report.profile) or ""
    profile_sources = list(report.profile_sources)
    if not recorded and run_profile and (profile is None or profile == run_profile):
        # An older report kept only its profile's name: its thresholds come from that profile again.
        base = config_mod.load(None, checks, profile=run_profile)
        _merge(params, base.params)
        _layer_sources(base, f"{RUN} (--profile {run_profile})", sources, {})
    effective_profile = run_profile
    fail_on, level = report.fail_on, report.level
    if profile is not None and profile != run_profile:
        # The new profile replaces what the run's own profile set; the run's file and --set stay.
        old = (f"--profile {run_profile}", f"{RUN} (--profile {run_profile})")
        for key, source in (recorded.get("sources") or {}).items():
            check_id, _, name = key.rpartition(".")
            if source in old and check_id in params:
                params[check_id].pop(name, None)
                sources.pop(key, None)
            if source in old and key.startswith("expect."):
                expect[name] = None
                sources.pop(key, None)
        effective_profile = profile
    layers = _layers(checks, profile if profile is not None and profile != run_profile else None, config_file,
                     settings)
    for name, layer in layers:
        _merge(params, layer.params)
        for key, value in layer.expect.to_dict().items():
            if value is not None:
                expect[key] = value
        _layer_sources(layer, name, sources, {})
        for key, value in layer.expect.to_dict().items():
            if value is not None:
                sources[f"expect.{key}"] = name
        if name.startswith("--profile"):
            profile_sources = list(layer.profile_sources)
        if name.startswith("--config"):
            text = _read_text(config_file)
            raw = config_mod._parse_toml(text, config_file or "") if text else {}
            run_table = raw.get("run", {}) if isinstance(raw.get("run"), dict) else {}
            if "fail_on" in run_table:
                fail_on, sources["run.fail_on"] = layer.fail_on, name
            if "level" in run_table:
                level, sources["run.level"] = layer.level, name
    config = config_mod.Config(params={k: v for k, v in params.items() if v}, expect=Expect(**expect),
                               fail_on=fail_on, profile=effective_profile, profile_sources=profile_sources,
                               level=level)
    if not recorded:
        sources["note"] = ("recorded before preflight kept the run's --set values and config file: re-judged with "
                           "its profile, expectations, level and fail_on only")
    return config, dict(sorted(sources.items()))
