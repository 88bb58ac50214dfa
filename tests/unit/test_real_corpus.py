"""Every real artifact under tests/data/real/<kind>/ read by preflight's own parser for its kind.

Each artifact (a program's output, or a pin file, as published) has a sidecar `<file>.source.json`
naming where it came from and what the right reading is (`expect`), in terms of the parser's output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from preflight.core.check import CannotMeasure, Expect

REAL = Path(__file__).resolve().parents[1] / "data" / "real"
KINDS = ("nccl_tests", "nccl_log", "slurm_node", "torchelastic", "iperf3", "requirements", "pyproject", "uv_lock",
         "poetry_lock", "pipfile_lock", "conda", "nvidia_smi", "hostlist", "slurm_json", "nvidia_smi_xml", "slurm_table", "prometheus_rules", "pixi")
PIN_KINDS = ("requirements", "pyproject", "uv_lock", "poetry_lock", "pipfile_lock", "conda", "pixi")


def artifacts() -> list[Path]:
    return sorted(p for p in REAL.rglob("*") if p.is_file() and not p.name.endswith(".source.json"))


def sidecar(path: Path) -> dict:
    return json.loads(Path(f"{path}.source.json").read_text(encoding="utf-8"))


def kind_of(path: Path) -> str:
    return path.relative_to(REAL).parts[0]


def test_the_corpus_is_large_and_every_artifact_says_where_it_is_from():
    found = artifacts()
    assert len(found) >= 180
    kinds = {kind_of(p) for p in found}
    assert kinds == set(KINDS)
    for path in found:
        side = sidecar(path)
        assert side["source"].strip() and side["program"].strip() and "expect" in side, path
        assert side["source"].startswith(("https://", "generated for this corpus")), path


CASES = [pytest.param(p, id=str(p.relative_to(REAL))) for p in artifacts()]


@pytest.mark.parametrize("path", CASES)
def test_real_artifact_reads_as_expected(path: Path):
    kind, expect = kind_of(path), sidecar(path)["expect"]
    text = path.read_text(encoding="utf-8")
    {"nccl_tests": _nccl_tests, "nccl_log": _nccl_log, "slurm_node": _slurm_node, "torchelastic": _torchelastic,
     "iperf3": _iperf3, "nvidia_smi": _nvidia_smi, "hostlist": _hostlist, "slurm_json": _slurm_json,
     "nvidia_smi_xml": _nvidia_smi, "slurm_table": _slurm_table,
     "prometheus_rules": _prometheus_rules}.get(kind, _pins)(path, text, expect)


# ------------------------------------------------------------------------------------------ nccl

def _nccl_tests(path: Path, text: str, expect: dict) -> None:
    from preflight_checks.collectives.local import judge_nccl_tests
    from preflight_checks.collectives.nccl_tests import parse_output, run_error

    parsed = parse_output(text)
    rows = parsed["rows"]
    assert len(rows) == expect["rows"]
    assert not parsed["unparsed"], parsed["unparsed"]
    halves = [h for row in rows for h in (row["out_of_place"], row["in_place"])]
    if rows:
        assert (rows[0]["bytes"], rows[-1]["bytes"]) == (expect["first_bytes"], expect["last_bytes"])
        assert rows[-1]["out_of_place"]["busbw_gbps"] == pytest.approx(expect["last_busbw_gbps"])
        assert parsed["avg_busbw_gbps"] == (pytest.approx(expect["avg_busbw_gbps"]) if expect["avg_busbw_gbps"] else None)
        wrong = None if any(h["wrong"] is None for h in halves) else sum(h["wrong"] for h in halves)
        assert wrong == expect["wrong"]
        if "max_error" in expect:  # the old layout's float deviation, never read as a count
            assert max(h["error"] for h in halves) == pytest.approx(expect["max_error"])
    for wanted in expect.get("failures", []):
        assert any(wanted in line for line in parsed["failures"]), parsed["failures"]
    if "out_of_bounds" in expect:  # the summary line, with or without its '#'
        assert parsed["out_of_bounds"] == expect["out_of_bounds"]
    run = {"argv": ["all_reduce_perf"], "returncode": 1 if parsed["failures"] else 0,
           "error": run_error(1 if parsed["failures"] else 0, parsed), **parsed}
    ids = {f.id for f in judge_nccl_tests(run, [], [], [])}
    if expect.get("out_of_bounds"):
        assert "collectives.local.nccl-tests-wrong" in ids
        ids.discard("collectives.local.nccl-tests-wrong")
    if expect.get("failures"):
        assert "collectives.local.nccl-tests-failure" in ids and run["error"] in parsed["failures"]
    else:
        assert run["error"] is None and not ids


def _nccl_log(path: Path, text: str, expect: dict) -> None:
    from preflight_checks.collectives.nccl_tests import parse_output
    from preflight.launch.nccl_log import nccl_network

    found = nccl_network(text.splitlines())
    assert found is not None
    for key, value in expect.items():
        if key == "table_rows":
            assert len(parse_output(text)["rows"]) == value
        else:
            assert found[key] == value, (key, found)
    if found["network"] is None:
        assert found["unrecognised"] or found["ib_unavailable"]


# ----------------------------------------------------------------------------------------- slurm

def _slurm_node(path: Path, text: str, expect: dict) -> None:
    from preflight.integrations.slurm import parse_show_node

    nodes = parse_show_node(text)
    assert len(nodes) == expect["nodes"]
    one_line = parse_show_node("\n".join(" ".join(record.split()) for record in _records(text)))
    for name, wanted in expect["records"].items():
        for state in (nodes[name], one_line[name]):  # as printed, and as `-o` prints the same record
            for key, value in wanted.items():
                if key == "fields":
                    assert {k: state.fields.get(k) for k in value} == value
                else:
                    assert getattr(state, key) == value, (name, key)


def _slurm_json(path: Path, text: str, expect: dict) -> None:
    from preflight.integrations.slurm_json import jobs, node_states

    if "nodes" in expect:
        nodes = node_states(text)
        assert len(nodes) == expect["count"]
        for name, wanted in expect["nodes"].items():
            assert {k: getattr(nodes[name], k) for k in wanted} == wanted
        from preflight.run.hosts import nodes_from_arg

        assert [h.name for h in nodes_from_arg(str(path))] == list(nodes)  # the listing saved, given as --nodes
    for got, wanted in zip(jobs(text) if "jobs" in expect else [], expect.get("jobs", [])):
        assert {k: got[k] for k in wanted} == wanted


def _slurm_table(path: Path, text: str, expect: dict) -> None:
    from ClusterShell.NodeSet import NodeSet

    from preflight.integrations.slurm_tables import parse_table, sinfo_node_states, squeue_jobs

    table = parse_table(text)
    assert table["columns"] == expect["columns"] and len(table["rows"]) == expect["rows"]
    if table["rows"]:
        assert (table["rows"][0], table["rows"][-1]) == (expect["first"], expect["last"])
    for row in table["rows"]:  # sinfo's own count of each node set matches the names it folds
        if row.get("NODES", "").isdigit() and row.get("NODELIST", "").strip("(") == row.get("NODELIST"):
            assert len(NodeSet(row["NODELIST"])) == int(row["NODES"]), row
    if "nodes" in expect:
        nodes = sinfo_node_states(text)
        assert len(nodes) == expect["nodes"]
        from preflight.run.hosts import nodes_from_arg

        assert [h.name for h in nodes_from_arg(str(path))] == list(nodes)  # the table saved, given as --nodes
        for name, wanted in expect["node"].items():
            assert {"state": nodes[name].state, "reason": nodes[name].reason} == wanted
    if "jobs" in expect:
        assert squeue_jobs(text) == expect["jobs"]


def _prometheus_rules(path: Path, text: str, expect: dict) -> None:
    from preflight_checks.monitoring.alarms import LATENCY_METRIC, MonitoringAlarms, Params, covers_utilisation
    from preflight_checks.monitoring.rule_files import rules_from_text

    rules = rules_from_text(text, str(path))
    assert len(rules) == expect["alerts"] and (rules[0]["name"], rules[-1]["name"]) == (expect["first"], expect["last"])
    assert [r["name"] for r in rules if covers_utilisation(r["query"])] == expect["utilisation"]
    assert [r["name"] for r in rules if LATENCY_METRIC in r["query"]] == expect["latency"]
    facts = {"url": None, "nodes": [], "file_rules": rules, "rule_files": [str(path)]}
    outcome = MonitoringAlarms().evaluate(facts, Params(rule_files=[str(path)]), Expect())
    assert {f.id for f in outcome.findings} == set(expect["findings"])


def _records(text: str) -> list[str]:
    records: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("NodeName="):
            records.append(line)
        elif records and line.strip():
            records[-1] += " " + line.strip()
    return records


def _torchelastic(path: Path, text: str, expect: dict) -> None:
    from preflight.launch.torchrun_log import failure_text, parse_failure_summary

    summary = parse_failure_summary(text)
    assert failure_text(summary) == expect["last_error"]
    if "agent_error" in expect:  # what one node's torchrun is said to have ended with, from its stderr
        from preflight.launch.torchrun_log import summarize_agent

        assert summarize_agent([], text, 1, False, 1.0)["last_error"] == expect["agent_error"]
    if "root_cause" in expect:
        wanted = expect["root_cause"]
        assert (summary["root_cause"] is None) == (wanted is None)
        for key, value in (wanted or {}).items():
            assert summary["root_cause"][key] == value
    for got, wanted in zip(summary["failures"], expect.get("failures", [])):
        assert {k: got[k] for k in wanted} == wanted
    assert len(summary["failures"]) == len(expect.get("failures", []))
    if "agent_failure" in expect:
        assert summary["agent_failure"] == expect["agent_failure"]
    wanted = expect.get("nccl_watchdog")  # the cause of a SIGABRT, when the log holds it
    assert (summary["nccl_watchdog"] is None) == (wanted is None)
    for key, value in (wanted or {}).items():
        assert summary["nccl_watchdog"][key] == value


def _iperf3(path: Path, text: str, expect: dict) -> None:
    from preflight_checks.net.iperf import report_from_text, summarize_sample

    report, unparsed = report_from_text(text)
    assert report is not None and not unparsed
    assert report["start"]["version"] == expect["version"]
    assert len(report["start"].get("connected") or []) == expect["connected"]
    if "documents" in expect:
        assert len(re.findall(r'(?m)^\t"start":', text)) == expect["documents"]  # top-level keys only
    sample = summarize_sample({"5201": {"rc": 0, "report": report, "stderr": ""}}, 1)
    if expect["error"] is None:
        assert "error" not in sample and sample["gbps"] == pytest.approx(expect["gbps"], rel=1e-3)
    else:
        assert expect["error"] in sample["error"] and "gbps" not in sample


# ------------------------------------------------------------------------------------------ pins

def _normal(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text.lower())


def _pins(path: Path, text: str, expect: dict) -> None:
    from preflight_checks.versions.pins import discover, read_requirements

    if "cannot_measure" in expect:
        with pytest.raises(CannotMeasure, match=re.escape(expect["cannot_measure"])):
            read_requirements([str(path)])
        return
    pins = read_requirements([str(path)])
    entries = pins["entries"]
    assert (len(entries), len(pins["skipped"]), len(pins["files"])) == (expect["entries"], expect["skipped"], expect["files"])
    lines = text.splitlines()
    for entry in entries:
        # Every pin points at its own line: the line holds the name it pins (the inline
        # `{ name = "torch" }` tables of another uv.lock package, or the same string in an earlier
        # array, would not be found first).
        file, _, number = entry["where"].rpartition(":")
        if file != str(path):
            continue  # from an included file
        physical = lines[int(number) - 1]
        assert entry["name"] in _normal(physical), (entry, physical)
        if kind_of(path) in ("uv_lock", "poetry_lock"):
            assert re.fullmatch(r'name = "[^"]+"', physical.strip()), physical
        if kind_of(path) == "pyproject" and entry["line"] != physical.strip():  # PEP 621: the quoted string
            assert f'"{entry["line"]}"' in physical or f"'{entry['line']}'" in physical, (entry, physical)
    for wanted in expect["pins"]:
        where = f"{path.parent / wanted.get('file', path.name)}:{wanted['line']}"  # "file": an included one
        match = [e for e in entries if e["name"] == wanted["name"] and e["where"] == where]
        assert match, wanted
        assert {k: match[0][k] for k in ("specifier", "kind", "optional", "source")} == \
            {k: wanted[k] for k in ("specifier", "kind", "optional", "source")}
    if kind_of(path) in ("conda", "pixi"):  # any *.yml/*.yaml with `dependencies:` is found, and pixi.toml
        assert path in discover(path.parent)


# ------------------------------------------------------------------------------------------- GPU

def _nvidia_smi(path: Path, text: str, expect: dict) -> None:
    from preflight_checks.gpu.visibility import GpuVisibility, Params
    from preflight_checks.gpu.nvidia_smi import parse_query
    from preflight.workers.gpu_nvml import throttle_reason_names

    from preflight_checks.gpu.nvidia_smi_xml import parse_query_xml

    nvml = parse_query(text)  # the text report, or the XML one (-x), told apart by parse_query
    if kind_of(path) == "nvidia_smi_xml":
        assert nvml == parse_query_xml(text)
    assert nvml["driver_version"] == expect["driver"] and len(nvml["gpus"]) == expect["gpus"]
    assert nvml["attached"] == expect.get("attached", expect["gpus"])
    assert {g["name"] for g in nvml["gpus"]} == ({expect["name"]} if expect["gpus"] else set())
    if "cuda" in expect:  # the highest CUDA the driver supports, without driver 610's deprecation note
        assert nvml["cuda_driver_version"] == expect["cuda"]
    for index in range(len(nvml["gpus"])):
        for key, value in expect.get(f"gpu{index}", {}).items():
            gpu = nvml["gpus"][index]
            got = throttle_reason_names(gpu["throttle_reason_samples"][0]) if key == "throttle_reasons" else gpu[key]
            assert (sorted(got) if key == "throttle_reasons" else got) == (sorted(value) if key == "throttle_reasons" else value)
    outcome = GpuVisibility().evaluate({"nvml": nvml, "cuda_visible_devices": None}, Params(), Expect())
    ids = {f.id for f in outcome.findings}
    assert set(expect["findings"]) <= ids and not set(expect["not_findings"]) & ids, ids


def _hostlist(path: Path, text: str, expect: dict) -> None:
    from preflight.run.hosts import load_hosts, nodes_from_arg

    if "hosts" in expect:  # a hosts file
        hosts = nodes_from_arg(str(path))
        assert [h.name for h in hosts] == expect["hosts"] and [h.slots for h in hosts] == expect["slots"]
        assert hosts == load_hosts(path)
        return
    hosts = nodes_from_arg(text.strip())  # a --nodes value that is a node set, as Slurm prints them
    names = [h.hostname for h in hosts]
    assert len(names) == len(set(names)) == expect["count"]
    assert (names[0], names[-1]) == (expect["first"], expect["last"])
    assert not set(expect.get("absent", [])) & set(names)
