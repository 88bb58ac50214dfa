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
        out.append(f'[checks."{check_id}"]')
        out.append(f"# {check.title}  ({check.scope.value} scope)")
        out.append(f"# timeout = {check.timeout_s:g}")
        if dataclasses.is_dataclass(check.Params):
            for f in dataclasses.fields(check.Params):
                default = f.default if f.default is not dataclasses.MISSING else (
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
                if check.param_docs().get(f.name):
                    out.append(f"# {f.name}: {check.param_docs()[f.name]}")
                if default is None:
                    out.append(f"# {f.name} =            (unset by default)")
                else:
                    out.append(f"# {f.name} = {_toml_value(default)}")
        out.append("")
    return "\n".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)
