"""`preflight init`: a commented preflight.toml with every check's parameters at their defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

from preflight.core.check import Check


def render_init(checks: dict[str, type[Check]]) -> str:
    """A commented preflight.toml with every check's parameters at their defaults."""
    out = [
        "# preflight.toml: what this cluster must have, and per-check parameters.",
        "# Precedence: command line (--set, --timeout, --fail-on, --level) > this file > --profile > the run",
        "# level > each check's defaults.",
        "# Every line below is commented out at its default; uncomment what you change.",
        "",
        "[run]",
        "# timeout = 300        # seconds per check, unless the check sets its own",
        '# fail_on = "fail"     # "warn" makes WARN block the verdict too',
        '# level = "standard"   # "quick" (probes, at most 30 s per node) or "thorough"',
        "",
        "[expect]",
        "# gpus_per_node = 8    # GPU checks must then run: a SKIP blocks the verdict",
        "# nodes = 4            # cross-node checks must then run",
        '# frameworks = ["torch"]',
        "",
    ]
    for check_id, check in sorted(checks.items()):
        if check.config_table:
            out += _area_table(check, checks)
            continue
        out.append(f'[checks."{check_id}"]')
        out.append(f"# {check.title}  ({check.scope.value} scope)")
        out.append(f"# timeout = {check.timeout_s:g}")
        out += _param_lines(check)
        out.append("")
    return "\n".join(out)


def _area_table(check: type[Check], checks: dict[str, type[Check]]) -> list[str]:
    """[job]: the check's parameters under its area's table, then the settings of that table other
    checks take (Check.config_aliases), each commented with its meaning."""
    table = check.config_table
    out = [f"[{table}]", f"# {check.title}  ({check.id}; every key is optional)"]
    out += _param_lines(check)
    for other_id, other in sorted(checks.items()):
        for setting, own in sorted(other.config_aliases.items()):
            area, _, key = setting.partition(".")
            if area != table or other is check or key in _defaults(check):
                continue
            out.append(f"# {key}: {other.param_docs().get(own) or own}  (for {other_id})")
            default = _defaults(other).get(own)
            out.append(f"# {key} =            (unset by default)" if default is None else
                       f"# {key} = {_toml_value(default)}")
    return out + [""]


def _defaults(check: type[Check]) -> dict[str, Any]:
    if not dataclasses.is_dataclass(check.Params):
        return {}
    return {f.name: f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        for f in dataclasses.fields(check.Params)}


def _param_lines(check: type[Check]) -> list[str]:
    """Each parameter's meaning, then its default, commented out."""
    out = []
    docs = check.param_docs()
    for name, default in _defaults(check).items():
        if docs.get(name):
            out.append(f"# {name}: {docs[name]}")
        out.append(f"# {name} =            (unset by default)" if default is None else
                   f"# {name} = {_toml_value(default)}")
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)
