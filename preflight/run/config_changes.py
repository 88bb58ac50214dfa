"""What the working directory's preflight.toml changes in a run, said before the run starts (stderr)
and kept in the report's configuration (RunReport.judged_with["working_directory"]).

`preflight run` reads ./preflight.toml when --config names no file: a file that came with a checkout
can make the run import and execute the repository's own code (a check's parameter that declares
`runs_code`), record the run's history somewhere else, accept findings ([silence]) and move the
thresholds. None of that may happen unseen: each one is a line here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from preflight.core.check import PARAM_KIND, PARAM_RUNS_CODE, Check, field_default

# The file `preflight run` reads when --config names none.
WORKING_DIRECTORY_CONFIG = "preflight.toml"
# Parameters whose value is a bar a result must clear (what loosening one lets through).
JUDGING_KINDS = ("threshold", "count", "fraction", "duration", "size")


def _field(check: type[Check] | None, name: str) -> Any:
    params = getattr(check, "Params", None)
    if params is None or not dataclasses.is_dataclass(params):
        return None
    return next((f for f in dataclasses.fields(params) if f.name == name), None)


def _under(config: Any, checks: dict[str, type[Check]], key: str) -> str:
    """What a key was before the file set it: the profile's value, else the check's default."""
    from preflight.core.config import ConfigError, load

    check_id, _, name = key.rpartition(".")
    if config.profile:
        try:
            profile = load(None, checks, profile=config.profile)
        except ConfigError:
            profile = None
        if profile is not None and name in profile.params.get(check_id, {}):
            return f"{profile.params[check_id][name]!r} (profile {config.profile})"
    f = _field(checks.get(check_id), name)
    return f"{field_default(f)!r} (default)" if f is not None else "its default"


def _history(config: Any, origin: Any) -> list[str]:
    from preflight.core.redact import redact_url

    lines = []
    if config.origins.get("history.url") == origin and config.history_url:
        lines.append(f"records this run's history at {redact_url(config.history_url)} ([history] url)")
    if config.origins.get("history.enabled") == origin:
        lines.append("records no history ([history] enabled = false)" if not config.history_enabled
                     else "records this run in fleet history ([history] enabled = true)")
    return lines


def changes(config: Any, checks: dict[str, type[Check]]) -> list[str]:
    """One line per thing the config file changes that a reader of the verdict must know: code it runs,
    where history goes, what it silences, thresholds, timeouts, expectations and run settings it sets."""
    from preflight.core.origin import config_file

    if not config.path:
        return []
    origin = config_file(config.path)
    lines: list[str] = []
    judging: list[str] = []
    for key, where in sorted(config.origins.items()):
        if where != origin:
            continue
        table, _, name = key.partition(".")
        if table in ("run", "expect"):
            judging.append(f"{key} = {_value(config, key)!r}")
            continue
        check_id, _, param = key.rpartition(".")
        value = config.params.get(check_id, {}).get(param) if param != "timeout" else config.timeouts.get(check_id)
        meta = getattr(_field(checks.get(check_id), param), "metadata", None) or {}
        if meta.get(PARAM_RUNS_CODE):
            lines.append(f"runs your code: {key} = {value!r} (imported and executed by the check)")
        elif param == "timeout" or meta.get(PARAM_KIND) in JUDGING_KINDS:
            judging.append(f"{key} = {value!r}, over {_under(config, checks, key)}")
    lines += _history(config, origin)
    lines += [f"silences {fid} ({s.get('reason', '')}" + (f", until {s['until']}" if s.get("until") else "") + ")"
              for fid, s in sorted(config.silence.items())]
    lines += [f"judges with {line}" for line in judging]
    return lines


def _value(config: Any, key: str) -> Any:
    table, _, name = key.partition(".")
    if table == "expect":
        return getattr(config.expect, name, None)
    return {"timeout": config.default_timeout}.get(name, getattr(config, name, None))


def announce(found: list[str]) -> list[str]:
    """The notes a run prints before it starts about what ./preflight.toml changes (`changes`)."""
    if not found:
        return []
    return [f"./{WORKING_DIRECTORY_CONFIG} changes this run ({len(found)} thing{'s' if len(found) != 1 else ''}):"] + \
        [f"  ./{WORKING_DIRECTORY_CONFIG} {line}" for line in found]
