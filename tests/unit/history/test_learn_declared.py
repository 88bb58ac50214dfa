"""What fleet history learns, and from what: declared by the checks on their parameters, robust to a bad
run, never a floor of zero, and written as TOML that recorded text cannot add keys to. And what it
records: an imported report's own results decide its verdict."""

from __future__ import annotations

import json
import tomllib
from collections import namedtuple
from dataclasses import dataclass


from preflight.core.check import Check, Learnable, param
from preflight.history.learn import Rule, _learn_one, learn_baseline, render_profile, rules
from preflight.history.queries import Key
from preflight.history.store import Store
from tests.unit.history import fleet

Row = namedtuple("Row", "key_id run_id node_id value spread")


def test_a_third_party_check_declares_what_can_be_learned_and_history_learns_it():
    @dataclass
    class DecodeParams:
        min_tokens_per_s: float | None = param(None, kind="threshold", help="lowest tokens/s (tokens/s)",
                                               learn=Learnable("floor", "decode throughput", figure="rate",
                                                               unit="tokens/s"))
        repeats: int = param(3, kind="count", help="repeats")

    class Decode(Check):
        id = "acme.decode"
        Params = DecodeParams

    found = [r for r in rules({"acme.decode": Decode}) if r.check_id == "acme.decode"]
    assert [(r.param, r.bound, r.what) for r in found] == [("min_tokens_per_s", "floor", "decode throughput")]
    rate = Key(1, "acme.decode", "decode", series="", at="", unit="tokens/s", figure="rate", direction="higher")
    other = Key(2, "acme.decode", "decode", series="", at="", unit="GB/s", figure="rate", direction="higher")
    assert found[0].matches(rate) and not found[0].matches(other)


def test_the_built_in_rules_come_from_the_checks_parameters():
    from preflight.core.registry import discover

    checks = discover().checks
    declared = {(cid, name) for cid, c in checks.items() for name in c.learnable()}
    assert {(r.check_id, r.param) for r in rules()} == declared
    assert ("collectives.local", "min_busbw_gbps") in declared and ("net.bandwidth", "min_gbps") in declared


def _series(tmp_path, bad_run: bool):
    nodes = fleet.node_names(2)
    reports = fleet.series_of_runs(nodes, 6)
    if bad_run:  # a bad day: every node of one GO run 15% slow (still above the floor it was judged with)
        reports.append(fleet.fleet_report(nodes, fleet.START + fleet.timedelta(days=7), busbw_factor=0.85, seed=99))
    store = Store(tmp_path / f"h{int(bad_run)}.sqlite")
    for report in reports:
        assert report["verdict"]["verdict"] == "GO"
        store.ingest(report, source="test")
    return store


def test_one_bad_run_among_healthy_ones_does_not_move_the_floor(tmp_path):
    with _series(tmp_path, bad_run=False) as clean, _series(tmp_path, bad_run=True) as poisoned:
        _, before = learn_baseline(clean, min_runs=5)
        _, after = learn_baseline(poisoned, min_runs=5)
    key = "collectives.local.min_busbw_gbps"
    old, new = before["floors"][key]["value"], after["floors"][key]["value"]
    assert abs(new - old) / old < 0.02, (old, new)
    assert after["floors"][key]["left_out_runs"] == 1 and "MAD" in after["statistic"]


def _rule(bound: str = "floor") -> tuple[Rule, list[Key]]:
    key = Key(7, "acme.decode", "decode", series="", at="", unit="tokens/s", figure="rate", direction="higher")
    return Rule("acme.decode", "min_tokens_per_s", bound, lambda k: True, what="decode throughput"), [key]


def test_a_floor_at_or_below_zero_is_refused_with_the_reason():
    rule, keys = _rule()
    # Figures whose repeats spread by three times their value: the noise eats the whole floor.
    rows = {7: [Row(7, run, node, 100.0 + run, 3.0) for run in range(5) for node in range(2)]}
    entry = _learn_one(rule, keys, rows, set(), 5.0)
    assert entry["value"] is None and "at or below zero" in entry["refused"]
    healthy = {7: [Row(7, run, node, 100.0 + run, 0.02) for run in range(5) for node in range(2)]}
    assert _learn_one(rule, keys, healthy, set(), 5.0)["value"] > 0


def test_recorded_text_cannot_write_keys_into_a_learned_profile():
    planted = 'busbw\nmin_busbw_gbps = 0.001\n[checks."net.bandwidth"]\nmin_gbps = 0.001'
    provenance = {"from": "2026-11-01T10:00:00", "to": "2026-11-02T10:00:00", "image": "driver=1\nx = 1",
                  "images": {"d": "driver 1\n[expect]\ngpus_per_node = 1"}, "percentile": 5.0, "runs": 5,
                  "nodes": 2, "node_results": 10, "gpus_per_node": None, "refused": {"a.b": "why\nc = 1"},
                  "floors": {"collectives.local.min_busbw_gbps": {
                      "check_id": "collectives.local", "param": "min_busbw_gbps", "bound": "floor", "value": 400.0,
                      "percentile_value": 410.0, "noise": 2.0, "observations": 10, "runs": 5, "nodes": 2,
                      "unit": "GB/s\r\nmax_latency_us = 1", "figures": [planted], "what": "busbw"}}}
    loaded = tomllib.loads(render_profile(provenance))
    assert loaded["checks"] == {"collectives.local": {"min_busbw_gbps": 400.0}}
    assert set(loaded) == {"profile", "checks"}


def test_an_imported_report_is_recorded_with_the_verdict_its_results_give(tmp_path):
    from preflight.history.queries import list_runs

    report = fleet.fleet_report(fleet.node_names(2), fleet.START)
    failed = next(r for r in report["results"] if r["check_id"] == "collectives.local")
    failed["status"] = "FAIL"
    for finding in failed["findings"]:
        finding["level"] = "FAIL" if finding["level"] != "PASS" else "PASS"
    failed["findings"].append({"id": "collectives.local.slow", "level": "FAIL", "message": "slow", "fix": "fix it"})
    assert report["verdict"]["verdict"] == "GO"  # hand-edited: the file still says GO
    path = tmp_path / "results.json"
    path.write_text(json.dumps(report))
    from tests.conftest import run_preflight

    db = tmp_path / "h.sqlite"
    proc = run_preflight("history", "import", str(path), "--url", f"sqlite:///{db}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "the file says GO, but its results say NO-GO" in proc.stderr
    with Store(db) as store:
        assert [r.verdict for r in list_runs(store)] == ["NO-GO"]


def test_history_import_accepts_only_what_report_accepts(tmp_path):
    from tests.conftest import run_preflight

    report = fleet.fleet_report(fleet.node_names(1), fleet.START)
    report["results"][0]["status"] = "MAYBE"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(report))
    proc = run_preflight("history", "import", str(path), "--url", f"sqlite:///{tmp_path / 'h.sqlite'}", cwd=tmp_path)
    assert proc.returncode == 2 and "results[0].status" in proc.stderr, proc.stderr


def test_a_nodes_image_comes_from_what_the_checks_declare_the_most_trusted_source_first():
    from preflight.core.registry import discover
    from preflight.history.extract import image_checks, image_of

    checks = discover().checks
    declared = {c.id: c.image_source for c in image_checks(frozenset(checks))}
    assert declared == {cid: c.image_source for cid, c in checks.items() if c.image_source}
    facts = {"versions.pinned": {"stack": {"driver": "550.54.15", "torch": "2.4.1", "kernel": "6.1.0"}},
             "gpu.visibility": {"nvml": {"driver_version": "550.90.07", "device_count": 8,
                                         "gpus": [{"name": "NVIDIA H100 80GB HBM3", "vbios_version": "96.00"}] * 8},
                                "torch": {"version": "2.4.1+cu124", "cuda": "12.4"}},
             "node.environment": {"nvidia_gpus": [{"bdf": "0000:18:00.0"}] * 7}}
    image = image_of(facts)
    # What is installed wins over what a device reports, which wins over the PCI bus.
    assert (image["driver"], image["torch"], image["cuda"], image["kernel"]) == ("550.54.15", "2.4.1", "12.4", "6.1.0")
    assert (image["gpu_model"], image["gpu_count"], image["vbios"]) == ("NVIDIA H100 80GB HBM3", 8, "96.00")
    assert image_of({"node.environment": facts["node.environment"]})["gpu_count"] == 7
    assert image_of({})["digest"] is None and image["digest"]
