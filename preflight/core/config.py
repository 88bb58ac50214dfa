"""preflight.toml: expectations and per-check parameters.

Precedence is CLI > file > profile > run level > the check's own defaults. Every key is validated
against the check's Params dataclass, so a typo is an error that names the file, the key and the
line, not a silently ignored setting. A value is checked against what its field declares
(`preflight.core.check.param`: a count, a threshold, a fraction, a duration, a choice...), and a
NaN or an infinity is refused for any number.

    [run]
    timeout = 300              # default per-check timeout, seconds
    fail_on = "fail"           # or "warn"
    level = "standard"         # or "quick", "thorough" (preflight.core.levels)
    blast_radius = 0.02        # --drain and --cordon act on at most this share of the run's nodes

    [expect]
    gpus_per_node = 8
    nodes = 4

    [checks."site.link"]      # a check's parameters, by id
    min_gbps = 100
    timeout = 180              # this check's timeout

    [checkpoint]               # shorthand: applies to every check whose id starts with "checkpoint."
    dir = "/shared/ckpt"
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from preflight.core import levels, origin as origins_mod
from preflight.core.origin import Origin
from preflight.core.param_types import _matches, _param_fields, _type_name, param_specs
from preflight.core.check import PARAM_AT_LEAST, PARAM_AT_MOST, PARAM_KIND, Check, Expect
from preflight.core.values import is_number as _number, value_problem
from preflight.core.history_settings import parse_history
from preflight.core.registry import not_imported
from preflight.core.silence import parse_silence
from preflight.core.suggest import suggest
from preflight.core.toml_lines import line_of

RUN_KEYS = {"timeout": (int, float), "fail_on": (str,), "level": (str,), "blast_radius": (int, float)}
# [run] blast_radius: a share of the run's nodes (preflight.core.blame.acting), above 0 and at most 1.
BLAST_RADIUS_SPEC = {PARAM_KIND: "fraction"}
FAIL_ON_CHOICES = ("fail", "warn")
# Keys every check section accepts besides its Params fields.
COMMON_CHECK_KEYS = {"timeout": (int, float)}
# What those keys are, as a Params field declares it (preflight.core.check.param).
TIMEOUT_SPEC = {PARAM_KIND: "duration"}



class ConfigError(Exception):
    def __init__(self, message: str, path: str | None = None, key: str | None = None, line: int | None = None):
        self.path, self.key, self.line = path, key, line
        where = path or "configuration"
        if line:
            where += f":{line}"
        if key:
            where += f": {key}"
        super().__init__(f"{where}: {message}")


@dataclass
class Config:
    path: str | None = None
    expect: Expect = field(default_factory=Expect)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # check id -> overrides
    timeouts: dict[str, float] = field(default_factory=dict)  # check id -> seconds
    default_timeout: float | None = None
    fail_on: str = "fail"
    blast_radius: float = 0.02  # [run] blast_radius: the share of nodes --drain and --cordon may act on
    profile: str = ""  # the --profile it was built on, if any
    profile_sources: list[str] = field(default_factory=list)  # where the profile's figures come from
    pulled_in: dict[str, str] = field(default_factory=dict)  # check id -> the selected check that reads it
    level: str = levels.DEFAULT_LEVEL  # the run level (--level, [run] level)
    history_enabled: bool = True  # [history] enabled: record the run in fleet history
    history_url: str | None = None  # [history] url: another SQLite file, or a PostgreSQL URL
    silence: dict[str, dict[str, str]] = field(default_factory=dict)  # [silence]: finding id -> reason, until
    # Where each value set beyond the defaults came from: "<check id>.<key>", "expect.<key>",
    # "run.<key>" -> a profile, the config file, --set, a flag, the check's own preparation, the run.
    origins: dict[str, Origin] = field(default_factory=dict)
    file_text: str = ""  # the config file as it was read
    settings: list[str] = field(default_factory=list)  # the --set values given, as given

    def set_run(self, key: str, value: Any, origin: Origin) -> None:
        """A [run] value (fail_on, level, timeout) set by `origin` (a flag)."""
        if key == "timeout":
            self.default_timeout = float(value)
        else:
            setattr(self, key, value)
        self.origins[f"run.{key}"] = origin

    def origin_of(self, check: type[Check] | None, key: str) -> Origin:
        """Where the value of `key` ("<check id>.<param>", "expect.<name>", "run.<name>") came from:
        its recorded origin, the run level's (for a parameter the level sets), or the default."""
        if key in self.origins:
            return self.origins[key]
        if check is not None and key.rpartition(".")[2] in levels.overrides(check, self.level):
            return origins_mod.level(self.level)
        return origins_mod.DEFAULT

    def overrides_for(self, check: type[Check]) -> dict[str, Any]:
        """The parameters a check runs with beyond its defaults: the level's, then the user's."""
        return {**levels.overrides(check, self.level), **self.params.get(check.id, {})}

    def params_for(self, check: type[Check]) -> Any:
        return check.params_from(self.overrides_for(check))

    def timeout_for(self, check: type[Check], nodes: int | None = None) -> float:
        """The check's wall-clock limit: the config's (the check's own, then every check's), else the run
        level's or its default, grown by what its work grows by on a run of `nodes` reachable nodes where
        that is known (a cluster check's isolation pass is given more rounds on a larger cluster:
        Check.timeout_at)."""
        if check.id in self.timeouts:
            return self.timeouts[check.id]
        if self.default_timeout is not None:
            return self.default_timeout
        at_level = levels.timeout(check, self.level)
        # What the check's work grows by on this many nodes, over its default or its level's timeout.
        grown = check.timeout_at(nodes, self.params_for(check)) - check.timeout_s if nodes else 0.0
        return (at_level if at_level is not None else check.timeout_s) + grown

    def skipped_at_level(self, check: type[Check]) -> str:
        """Why the check does not run at this run's level, or ""."""
        return levels.skip_reason(check, self.level)


def load(path: str | Path | None, checks: dict[str, type[Check]], profile: str | None = None,
         under: Config | None = None) -> Config:
    """Read and validate a config file, on top of a profile, on top of `under` (the values a recorded
    run was judged with, for `report --rejudge`); none of them means defaults only."""
    config = _load_files(path, checks, profile)
    return config if under is None else stack(under, config)


def _load_files(path: str | Path | None, checks: dict[str, type[Check]], profile: str | None) -> Config:
    layers: list[tuple[str, str, bool]] = []  # (file, text, is the profile)
    if profile:
        layers.append((*_read(profile_path(profile)), True))
    if path is not None:
        layers.append((*_read(Path(path)), False))
    if not layers:
        return Config()
    # Validate each layer on its own, so an error names the right file and line ...
    datas = [_parse_toml(text, name) for name, text, _ in layers]
    origins: dict[str, Origin] = {}
    for (name, text, is_profile), data in zip(layers, datas):
        built = _build(data, text, checks, name, allow_profile=is_profile)
        origin = origins_mod.profile(profile or name) if is_profile else origins_mod.config_file(path or name)
        origins.update(_origins(built, data, origin))
    # ... then merge them, the config file over the profile.
    merged: dict[str, Any] = {}
    for data in datas:
        _deep_merge(merged, data)
    config = _build(merged, "", checks, layers[-1][0], allow_profile=True)
    config.path = str(path) if path is not None else ""
    config.profile = profile or ""
    config.origins = origins
    config.file_text = layers[-1][1] if path is not None else ""
    return config


def stack(lower: Config, upper: Config) -> Config:
    """`upper` over `lower`: every value `upper` sets (its origins say which) replaces `lower`'s; the
    settings no origin covers (the file read, the [silence], the [history]) are `upper`'s."""
    config = dataclasses.replace(upper, params={cid: dict(values) for cid, values in lower.params.items()},
                                 timeouts={**lower.timeouts, **upper.timeouts},
                                 origins={**lower.origins, **upper.origins})
    for check_id, values in upper.params.items():
        config.params.setdefault(check_id, {}).update(values)
    config.expect = Expect(**{key: getattr(upper.expect if f"expect.{key}" in upper.origins else lower.expect, key)
                              for key in Expect.__dataclass_fields__})
    for key in ("fail_on", "level"):
        setattr(config, key, getattr(upper if f"run.{key}" in upper.origins else lower, key))
    if "run.timeout" not in upper.origins:
        config.default_timeout = lower.default_timeout
    if not upper.profile:
        config.profile, config.profile_sources = lower.profile, list(lower.profile_sources)
    return config


def _origins(layer: Config, data: dict[str, Any], origin: Origin) -> dict[str, Origin]:
    """Every key one layer (a profile, a file) sets, with that layer as its origin."""
    found = {f"{cid}.{key}": origin for cid, params in layer.params.items() for key in params}
    found.update({f"{cid}.timeout": origin for cid in layer.timeouts})
    for table in ("run", "expect", "history"):
        body = data.get(table)
        if isinstance(body, dict):
            found.update({f"{table}.{key}": origin for key in body})
    return found


PROFILE_SUFFIX = ".toml"


def profile_path(name: str) -> Path:
    """A shipped profile by name (`h100-8x`), or a profile file of the user's own by path."""
    if name.endswith(PROFILE_SUFFIX) or "/" in name:
        return Path(name)
    shipped = Path(__file__).parent.parent / "profiles" / f"{name}{PROFILE_SUFFIX}"
    if not shipped.is_file():
        raise ConfigError(f"unknown profile; shipped profiles: {', '.join(shipped_profiles())}", "--profile", name)
    return shipped


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in (Path(__file__).parent.parent / "profiles").glob(f"*{PROFILE_SUFFIX}"))


MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a configuration of every check's every threshold is under 100 KiB


def _read(path: Path) -> tuple[str, str]:
    """The text of a config file or profile, read no further than MAX_CONFIG_BYTES (its size is
    checked before a byte is read)."""
    from preflight.core.bounded import InputError, read_text

    if not path.exists() and not path.is_symlink():
        raise ConfigError("file not found", str(path))
    try:
        return str(path), read_text(path, MAX_CONFIG_BYTES)
    except InputError as exc:
        raise ConfigError(exc.said(), str(path)) from None


def _deep_merge(into: dict[str, Any], data: dict[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


def _parse_toml(text: str, path: str) -> dict[str, Any]:
    from preflight.core.bounded import TooDeep, load_toml

    try:
        return load_toml(text, path)
    except TooDeep as exc:
        raise ConfigError(exc.reason, path) from None
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"invalid TOML: {exc}", path, line=int(match.group(1)) if match else None) from None


def parse(text: str, checks: dict[str, type[Check]], path: str = "preflight.toml") -> Config:
    return _build(_parse_toml(text, path), text, checks, path, allow_profile=False)


def _build(data: dict[str, Any], text: str, checks: dict[str, type[Check]], path: str, allow_profile: bool) -> Config:
    config = Config(path=path)
    # (check id, key) set in [checks."<id>"]: an alias never overrides them, whatever the file's order.
    explicit = {(cid, key) for cid, body in (data.get("checks") or {}).items() if isinstance(body, dict)
                for key in body}

    def fail(message: str, key: str) -> typing.NoReturn:
        raise ConfigError(message, path, key, line_of(text, key))

    for section, body in data.items():
        if section == "profile" and allow_profile:
            _expect_table(body, "profile", fail)
            config.profile_sources = [str(s) for s in body.get("sources", [])]
            continue
        if section == "run":
            _expect_table(body, "run", fail)
            _parse_run(config, body, fail)
        elif section == "history":
            _expect_table(body, "history", fail)
            config.history_enabled, config.history_url = parse_history(body, fail)  # core/history_settings.py
        elif section == "expect":
            _expect_table(body, "expect", fail)
            config.expect = _parse_expect(body, fail)
        elif section == "silence":
            _expect_table(body, "silence", fail)
            config.silence = parse_silence(body, checks, fail)  # preflight.core.silence
        elif section == "checks":
            _expect_table(body, "checks", fail)
            _parse_checks(config, body, checks, fail)
        else:
            _parse_area(config, section, body, checks, fail, explicit)
    return config


def _parse_run(config: Config, body: dict[str, Any], fail: Any) -> None:
    """Check the keys of [run] and set the run-wide settings (timeout, fail_on, level) it names."""
    for key, value in body.items():
        if key not in RUN_KEYS:
            fail(f"unknown key; [run] accepts {', '.join(sorted(RUN_KEYS))}{suggest(key, RUN_KEYS)}", f"run.{key}")
        _expect_type(value, RUN_KEYS[key], f"run.{key}", fail)
        spec = TIMEOUT_SPEC if key == "timeout" else BLAST_RADIUS_SPEC if key == "blast_radius" else {}
        check_value(spec, value, f"run.{key}", fail)
    if "timeout" in body:
        config.default_timeout = float(body["timeout"])
    if "blast_radius" in body:
        if not 0 < body["blast_radius"] <= 1:
            fail("must be above 0 and at most 1 (a share of the run's nodes: 0.02 is 2%)", "run.blast_radius")
        config.blast_radius = float(body["blast_radius"])
    if "fail_on" in body:
        if body["fail_on"] not in FAIL_ON_CHOICES:
            fail(f"must be one of {', '.join(FAIL_ON_CHOICES)}", "run.fail_on")
        config.fail_on = body["fail_on"]
    if "level" in body:
        if body["level"] not in levels.LEVELS:
            fail(f"must be one of {', '.join(levels.LEVELS)}", "run.level")
        config.level = body["level"]


def _parse_checks(config: Config, body: dict[str, Any], checks: dict[str, type[Check]], fail: Any) -> None:
    """Apply each [checks."<id>"] table to its check; an unknown id fails, one --skip kept unimported is left."""
    for check_id, overrides in body.items():
        if not_imported(checks, check_id):
            continue  # a plugin --skip kept from being imported: its settings cannot be read
        if check_id not in checks:
            fail(f"unknown check id{suggest(check_id, checks) or '; known: ' + ', '.join(sorted(checks))}",
                 f"checks.{check_id}")
        _expect_table(overrides, f"checks.{check_id}", fail)
        _apply_check_overrides(config, checks[check_id], overrides, f"checks.{check_id}", fail)


def _parse_area(config: Config, section: str, body: Any, checks: dict[str, type[Check]], fail: Any,
                explicit: set[tuple[str, str]]) -> None:
    """Apply an area shorthand ([checkpoint] dir = ...) to every check of the area with that parameter."""
    area = [c for cid, c in sorted(checks.items()) if cid.split(".", 1)[0] == section]
    aliased = {k.split(".", 1)[1] for c in checks.values() for k in c.config_aliases if k.split(".")[0] == section}
    if not area and not aliased and not_imported(checks, section):
        return  # the area of plugins --skip kept from being imported
    if not area and not aliased:
        areas = {cid.split(".", 1)[0] for cid in checks}
        fail("unknown section; expected [run], [expect], [history], [silence], [checks.\"<id>\"] or a check "
             f"area such as [{sorted(areas)[0]}]"
             + suggest(section, {"run", "expect", "history", "silence", "checks", *areas}), section)
    _expect_table(body, section, fail)
    for key, value in body.items():
        takers = [c for c in area if key in _param_fields(c) or key in COMMON_CHECK_KEYS]
        if not takers and key not in aliased:
            known = {k for c in area for k in _param_fields(c)}
            fail(f"no {section}.* check has a parameter {key!r}{suggest(key, known)}", f"{section}.{key}")
        for check in takers:
            _apply_check_overrides(config, check, {key: value}, f"{section}.{key}", fail)
        _apply_aliases(config, checks, f"{section}.{key}", value, fail, explicit)


def _apply_aliases(config: Config, checks: dict[str, type[Check]], setting: str, value: Any, fail: Any,
                   explicit: set[tuple[str, str]]) -> None:
    """`[checkpoint] dir` reaches storage.shared's `dir` too (Check.config_aliases), unless that check's
    own setting says otherwise."""
    for check in checks.values():
        param = check.config_aliases.get(setting)
        if param and (check.id, param) not in explicit:
            _apply_check_overrides(config, check, {param: value}, setting, fail)


def apply_cli_settings(config: Config, settings: list[str], checks: dict[str, type[Check]]) -> None:
    """`--set ID.KEY=VALUE` (or AREA.KEY=VALUE), VALUE in TOML syntax; CLI beats the file."""
    from preflight.core.bounded import TooDeep, load_toml

    config.settings.extend(settings)
    for setting in settings:
        if "=" not in setting:
            raise ConfigError("expected KEY=VALUE", "--set", setting)
        key, raw = setting.split("=", 1)
        try:
            value = load_toml(f"v = {raw}", "--set")["v"]
        except TooDeep as exc:
            raise ConfigError(exc.reason, "--set", key) from None
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word is a string
        if key.startswith("expect."):
            merged = {**dataclasses.asdict(config.expect), key.split(".", 1)[1]: value}
            config.expect = _parse_expect(merged, lambda m, k: _raise(ConfigError(m, "--set", k)))
            config.origins[key] = origins_mod.SET
            continue
        check_id, _, param = key.rpartition(".")
        if check_id in checks:
            targets = [checks[check_id]]
        else:
            targets = [c for cid, c in checks.items() if cid.split(".", 1)[0] == check_id and param in _param_fields(c)]
        aliased = [c for c in checks.values() if key in c.config_aliases and c not in targets]
        if not targets and not aliased and not_imported(checks, check_id):
            continue  # a setting of a plugin --skip kept from being imported
        if not targets and not aliased:
            known = [f"{cid}.{p}" for cid, c in checks.items() for p in _param_fields(c)]
            raise ConfigError("no check has this parameter" + suggest(key, known), "--set", key)
        for check in targets:
            _apply_check_overrides(config, check, {param: value}, key, lambda m, k: _raise(ConfigError(m, "--set", k)))
            config.origins[f"{check.id}.{param}"] = origins_mod.SET
        for check in aliased:
            own = f"{check.id}.{check.config_aliases[key]}"
            if not any(s.split("=", 1)[0] == own for s in settings):
                _apply_check_overrides(config, check, {check.config_aliases[key]: value}, key,
                                       lambda m, k: _raise(ConfigError(m, "--set", k)))
                config.origins[own] = origins_mod.SET


def _raise(exc: Exception) -> typing.NoReturn:
    raise exc


def _parse_expect(body: dict[str, Any], fail: Any) -> Expect:
    hints = typing.get_type_hints(Expect)
    specs = {f.name: f.metadata for f in dataclasses.fields(Expect)}
    values = {}
    for key, value in body.items():
        if key not in hints:
            fail(f"unknown key; [expect] accepts {', '.join(sorted(hints))}{suggest(key, hints)}", f"expect.{key}")
        if value is not None and not _matches(value, hints[key]):
            fail(f"expected {_type_name(hints[key])}, got {type(value).__name__} {value!r}", f"expect.{key}")
        check_value(specs[key], value, f"expect.{key}", fail)
        values[key] = value
    return Expect(**values)


def _apply_check_overrides(config: Config, check: type[Check], overrides: dict[str, Any], where: str, fail: Any) -> None:
    fields = _param_fields(check)
    specs = param_specs(check)
    for key, value in overrides.items():
        name = f"{where}.{key}" if not where.endswith(f".{key}") else where
        if key == "timeout":
            _expect_type(value, COMMON_CHECK_KEYS["timeout"], name, fail)
            check_value(TIMEOUT_SPEC, value, name, fail)
            config.timeouts[check.id] = float(value)
            continue
        if key not in fields:
            known = ", ".join(sorted(set(fields) | set(COMMON_CHECK_KEYS))) or "none"
            fail(f"unknown parameter for {check.id}"
                 f"{suggest(key, set(fields) | set(COMMON_CHECK_KEYS)) or '; known: ' + known}", name)
        if not _matches(value, fields[key]):
            fail(f"expected {_type_name(fields[key])}, got {type(value).__name__} {value!r}", name)
        check_value(specs.get(key, {}), value, name, fail)
        config.params.setdefault(check.id, {})[key] = value


def _expect_table(value: Any, name: str, fail: Any) -> None:
    if not isinstance(value, dict):
        fail("expected a table", name)


def _expect_type(value: Any, kinds: tuple[type, ...], name: str, fail: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, kinds):
        fail(f"expected {' or '.join(k.__name__ for k in kinds)}, got {type(value).__name__} {value!r}", name)


# ------------------------------------------------------------------------------ value checks

def check_value(spec: Any, value: Any, where: str, fail: Any) -> None:
    problem = value_problem(spec, value)
    if problem:
        fail(problem, where)


def validate(config: Config, checks: dict[str, type[Check]]) -> None:
    """Relations between values, on the merged configuration (profile, file and --set together): a
    WARN level stricter than its PASS level, as the WARN level's field declares it (`at_most`: not
    above the PASS floor it warns under; `at_least`: not below the PASS ceiling)."""
    for check_id in sorted(config.params):
        params = config.params_for(checks[check_id]) if check_id in checks else None
        if params is None or not dataclasses.is_dataclass(params):
            continue
        values = dataclasses.asdict(params)
        for name, spec in param_specs(checks[check_id]).items():
            warn = values.get(name)
            for key, stricter in ((PARAM_AT_MOST, lambda w, p: w > p), (PARAM_AT_LEAST, lambda w, p: w < p)):
                other = spec.get(key)
                level = values.get(other) if other else None
                if _number(warn) and _number(level) and stricter(warn, level):
                    raise ConfigError(f"the WARN level {warn!r} is stricter than the PASS level {other} = "
                                      f"{level!r}: WARN must lie between PASS and FAIL",
                                      config.path or "configuration", f"checks.{check_id}.{name}")
    for f in dataclasses.fields(Expect):
        problem = value_problem(f.metadata, getattr(config.expect, f.name))
        if problem:
            raise ConfigError(problem, config.path or "configuration", f"expect.{f.name}")
