"""How reading large user files scales, the earlier way and this tree's, side by side in one run.

    .venv/bin/python bench/input_scale.py [--nodes 2000] [--pins 5000] [--big-nodes 20000]

- `k8s judge`: a synthesised `kubectl get nodes -o json` (nodes shaped as the API serves them: labels,
  annotations, addresses, four conditions, 30 images each). Before: the whole text through PyYAML's
  pure-Python safe loader (`yaml.safe_load_all`, as `k8s judge` read it); after:
  preflight.integrations.kubernetes.nodes.read_node_file (JSON read as JSON, nesting bounded). The
  same documents, the same node extraction after. --big-nodes is timed on this tree only (the
  earlier way takes minutes there).
- pin lines: a Poetry table of --pins dependencies, the line of each found by TomlLines.key, with
  the TomlLines of commit BEFORE (read with `git show`) and with this tree's.

Not a test: nothing here is judged, and times depend on the machine; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "4920ed1"  # the tree before bounded reading


def node_list(count: int) -> str:
    def node(i: int) -> dict:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": f"gpu{i:05d}", "labels": {f"label-{k}": f"v{k}" for k in range(15)},
                             "annotations": {f"note-{k}": "x" * 40 for k in range(8)}},
                "spec": {"taints": [{"key": "dedicated", "value": "train", "effect": "PreferNoSchedule"}]},
                "status": {"addresses": [{"type": "InternalIP", "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"},
                                         {"type": "Hostname", "address": f"gpu{i:05d}"}],
                           "capacity": {"nvidia.com/gpu": "8", "cpu": "96"}, "allocatable": {"nvidia.com/gpu": "8"},
                           "conditions": [{"type": t, "status": "True" if t == "Ready" else "False", "reason": "r",
                                           "message": "m" * 50} for t in ("Ready", "MemoryPressure", "DiskPressure",
                                                                          "PIDPressure")],
                           "images": [{"names": [f"registry.example/img{k}@sha256:" + "a" * 64,
                                                 f"registry.example/img{k}:v1"], "sizeBytes": 123456}
                                      for k in range(30)]}}
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [node(i) for i in range(count)]}, indent=4)


def judge_before(text: str) -> int:
    import yaml

    from preflight.integrations.kubernetes.nodes import _node_dicts, from_node_document

    docs = list(yaml.safe_load_all(text))
    return len([from_node_document(d) for doc in docs for d in _node_dicts(doc)])


def judge_after(path: str) -> int:
    from preflight.integrations.kubernetes.nodes import read_node_file

    return len(read_node_file(path))


def timed(work, *args) -> tuple[float, object]:
    start = time.perf_counter()
    answer = work(*args)
    return time.perf_counter() - start, answer


def old_toml_lines() -> type:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:checks/versions/pin_files.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("pin_files_before")
    exec(compile(source, "pin_files_before.py", "exec"), module.__dict__)  # noqa: S102 - our own earlier source
    return module.TomlLines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--big-nodes", type=int, default=20000)
    parser.add_argument("--pins", type=int, default=5000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from preflight_checks.versions.pin_files import TomlLines

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nodes.json"
        text = node_list(args.nodes)
        path.write_text(text)
        before, found_before = timed(judge_before, text)
        after, found_after = timed(judge_after, str(path))
        assert found_before == found_after == args.nodes
        rows.append((f"k8s judge, {args.nodes:,} nodes ({len(text) / 2**20:.0f} MiB)", before, after))
        text = node_list(args.big_nodes)
        path.write_text(text)
        big, found = timed(judge_after, str(path))
        assert found == args.big_nodes
        rows.append((f"k8s judge, {args.big_nodes:,} nodes ({len(text) / 2**20:.0f} MiB), this tree only", None, big))

    poetry = "[tool.poetry.dependencies]\n" + "".join(f'pkg{i} = "1.0"\n' for i in range(args.pins))
    names = [f"pkg{i}" for i in range(args.pins)]
    old, new = old_toml_lines()(poetry), TomlLines(poetry)
    before, lines_before = timed(lambda: [old.key("tool.poetry.dependencies", n) for n in names])
    after, lines_after = timed(lambda: [new.key("tool.poetry.dependencies", n) for n in names])
    assert lines_before == lines_after
    rows.append((f"line of each of {args.pins:,} Poetry pins", before, after))

    print(f"{'what':58} {'before s':>9} {'after s':>9} {'ratio':>8}")
    for what, before_s, after_s in rows:
        ratio = f"{before_s / after_s:7.1f}x" if before_s is not None else "-"
        print(f"{what:58} {before_s if before_s is not None else float('nan'):9.2f} {after_s:9.2f} {ratio:>8}")


if __name__ == "__main__":
    main()
