"""docs/findings.md: every finding id of every built-in check, with its level and its fix.

    python scripts/findings_table.py          # rewrite docs/findings.md
    python scripts/findings_table.py --check  # exit 1 when docs/findings.md is not current

A check that declares its fixes by id (a `fixes` dict on the class: id or id suffix -> fix) is
listed from that declaration. Otherwise the ids are read from the check's source: every call that
states a finding (`Finding(f"{self.id}.NAME", ...)`, or a helper such as `found("NAME", level,
message, fix)`) with a literal name; a fix held in a module constant is shown as that constant's text,
one written with run-time values shows them as `{...}`.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "docs" / "findings.md"
HELPERS = {"found", "_finding", "add", "finding", "Finding", "_found"}
LEVELS = {"PASS", "WARN", "FAIL", "SKIP", "ERROR"}


def builtin_checks() -> list[type]:
    """The checks this tree registers in pyproject.toml (not whatever else is installed)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["preflight.checks"]
    checks = []
    for check_id, target in sorted(declared.items()):
        module, _, name = target.partition(":")
        checks.append(getattr(importlib.import_module(module), name))
    return checks


UNRESOLVED = "(composed when the check runs; see the report)"


def _text(node: ast.AST | None, names: dict[str, str]) -> str:
    """The text an expression gives, as far as the source says it: constants resolved, run-time parts `{...}`."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{...}" for v in node.values)
    if isinstance(node, ast.Name):
        return names.get(node.id, "")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left, names) + _text(node.right, names)
    if isinstance(node, ast.IfExp):
        parts = [t for t in (_text(node.body, names), _text(node.orelse, names)) if t]
        return "; or: ".join(dict.fromkeys(parts))
    return ""


def _module_names(module: object, check: type) -> dict[str, str]:
    names = {k: v for k, v in vars(module).items() if isinstance(v, str)}
    return names


def _local_names(func: ast.AST, names: dict[str, str], check: type) -> dict[str, str]:
    local = dict(names)
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                text = _text(node.value, local)
                if text:
                    local[target.id] = text
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "remediation":
                for i, element in enumerate(target.elts):
                    if isinstance(element, ast.Name) and i < len(check.remediation):
                        local[element.id] = check.remediation[i]
    return local


def _finding_name(node: ast.AST) -> str:
    """NAME of `"NAME"`, or the literal tail of f"{self.id}.NAME"; "" when it is chosen at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[-1], ast.Constant):
        tail = node.values[-1].value
        if len(node.values) == 2 and tail[:1] in ".-":
            # f"{self.id}.NAME", or f"{prefix}-NAME" under a prefix such as "<check>.tensorflow"
            return tail[1:] if tail.startswith(".") else "tensorflow" + tail
    return ""


def _level(node: ast.AST | None) -> str:
    if isinstance(node, ast.Attribute) and node.attr in LEVELS:
        return node.attr
    return "varies"


def source_findings(check: type) -> list[tuple[str, str, str]]:
    """(id, level, fix) of the findings stated in the check's module and the helper modules beside it."""
    rows: dict[tuple[str, str], str] = {}
    package = check.__module__.rsplit(".", 1)[0]
    folder = Path(inspect.getfile(check)).parent
    modules = [check.__module__] + sorted(f"{package}.{p.stem}" for p in folder.glob("*.py")
                                          if p.stem != "__init__" and f"{package}.{p.stem}" != check.__module__)
    own = Path(inspect.getfile(check)).read_text()
    imported = {node.module for node in ast.walk(ast.parse(own)) if isinstance(node, ast.ImportFrom)}
    for name in modules:
        module = importlib.import_module(name)
        text = Path(module.__file__).read_text()
        if name != check.__module__ and name not in imported:
            continue  # a sibling module the check does not use
        tree = ast.parse(text)
        names = _module_names(module, check)
        for func in [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]:
            if name != check.__module__ and "check_id" in [a.arg for a in func.args.args] \
                    and f"{func.name}(" not in own:
                continue  # a shared helper whose findings belong to the checks that call it
            local = _local_names(func, names, check)
            for node in ast.walk(func):
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if callee not in HELPERS or not node.args:
                    continue
                suffix = _finding_name(node.args[0])
                if not suffix or " " in suffix:
                    continue
                keywords = {k.arg: k.value for k in node.keywords}
                level = _level(node.args[1] if len(node.args) > 2 else None)
                given = keywords.get("fix", keywords.get("fix_text", node.args[3] if len(node.args) > 3 else None))
                fix = _text(given, local) or (UNRESOLVED if given is not None else "")
                key = (f"{check.id}.{suffix}" if not suffix.startswith(check.id) else suffix, level)
                if key not in rows or rows[key] in ("", UNRESOLVED):
                    rows[key] = fix
    return sorted((fid, level, fix) for (fid, level), fix in rows.items())


def declared_findings(check: type) -> list[tuple[str, str, str]] | None:
    fixes = getattr(check, "fixes", None)
    if not isinstance(fixes, dict) or not fixes:
        return None
    return sorted((k if k.startswith(check.id) else f"{check.id}.{k}", "", str(v)) for k, v in fixes.items())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or "—"


def render() -> str:
    lines = ["# Findings and their fixes", "",
             "Every finding a built-in check can report, by id, with the fix the reports show for it. Generated by "
             "`python scripts/findings_table.py` from the checks themselves; `{...}` stands for a value known only "
             "when the check runs. Silence one with its id under `[silence]` in preflight.toml; tests assert on "
             "these ids.", ""]
    for check in builtin_checks():
        rows = declared_findings(check) or source_findings(check)
        lines += [f"## {check.id}", "", f"{check.title}.", "", "| finding | level | fix |", "|---|---|---|"]
        lines += [f"| `{fid}` | {level or '—'} | {_cell(fix)} |" for fid, level, fix in rows]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/findings.md is not current")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT.relative_to(ROOT)} is not current: run python scripts/findings_table.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
