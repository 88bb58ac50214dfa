"""The house: each folder imports only the folders below it (README, "How it is built"), no module
is over 500 lines, and only the process layer (and programs that run on nodes) starts or kills
processes. Read from the source with ast, so a new import that runs upwards fails here."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

# Top to bottom; a layer may import itself and any layer after it.
LAYERS = ["cli", "checks", "launch", "run", "reporters", "workers", "integrations", "history", "transport", "core",
          "machine"]
PROCESS_CALLS = re.compile(r"subprocess\.|Popen|killpg|os\.kill\(|\.kill\(\)|\.terminate\(\)")


def _modules():
    for path in sorted((ROOT / "preflight").rglob("*.py")) + sorted((ROOT / "checks").rglob("*.py")):
        rel = path.relative_to(ROOT)
        layer = "checks" if rel.parts[0] == "checks" else (rel.parts[1] if len(rel.parts) > 2 else None)
        yield rel, layer, path.read_text(encoding="utf-8")


def _imported_layers(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "preflight_checks":
                found.add("checks")
            elif parts[0] == "preflight" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


def test_every_import_runs_downwards():
    upward = []
    for rel, layer, source in _modules():
        if layer is None:
            continue
        for target in _imported_layers(source) - {layer}:
            if LAYERS.index(target) < LAYERS.index(layer):
                upward.append(f"{rel} imports {target}")
    assert upward == []


def test_no_module_is_over_500_lines():
    assert [str(rel) for rel, _, source in _modules() if source.count("\n") > 500] == []


def test_only_the_process_layer_and_node_programs_start_or_stop_processes():
    found = [str(rel) for rel, layer, source in _modules()
             if PROCESS_CALLS.search(source) and layer != "workers" and str(rel) != "preflight/transport/process.py"]
    assert found == []


# The layers that know no check: what they need of one is declared on the check (its parameters'
# `learn`, its `image`, `headlines`, `alarm_figures`, ...) and read through the registry or the report.
CHECK_FREE_LAYERS = ("core", "run", "reporters", "history", "integrations", "launch", "cli")


def test_the_check_ids_of_built_in_checks_appear_nowhere_outside_the_checks():
    ids = []
    for rel, layer, source in _modules():
        if layer == "checks":
            ids += re.findall(r'^\s+id = "([a-z_]+\.[a-z_]+)"', source, re.M)
    assert len(ids) >= 14
    named = [f"{rel}: {cid}" for rel, layer, source in _modules() if layer in CHECK_FREE_LAYERS
             for cid in ids if f'"{cid}' in source]
    assert named == []
