"""gpu.visibility paths no GPU node had exercised: findings by id, MIG, NVML bindings, NUMA, run order."""

from __future__ import annotations

import copy
import json
import os

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight.core.registry import discover
from preflight.workers.gpu_probe import numa_local, parse_cpulist, sysfs_bus_id
from preflight_checks.gpu.visibility import GpuVisibility
from tests.conftest import TESTS

DATA = TESTS / "data" / "gpu_visibility"
CHECK = GpuVisibility()


def fixture(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def judge(data: dict, expect: Expect | None = None, **params):
    return CHECK.evaluate(data, CHECK.params_from(params), expect or Expect())


def ids(outcome) -> set[str]:
    return {f.id for f in outcome.findings if f.level is not Status.PASS}


@pytest.mark.parametrize("name, finding", [
    ("ecc_errors.json", "gpu.visibility.ecc-uncorrectable"),
    ("thermal_throttle.json", "gpu.visibility.at-slowdown"),
    ("pcie_degraded.json", "gpu.visibility.pcie-degraded"),
    ("remap_failure.json", "gpu.visibility.remap-failed"),
    ("torch_nvml_mismatch.json", "gpu.visibility.framework-count"),
])
def test_degraded_fixtures_name_their_finding_with_its_own_fix(name, finding):
    outcome = judge(fixture(name))
    assert outcome.status is Status.FAIL
    assert finding in ids(outcome)
    fired = next(f for f in outcome.findings if f.id == finding)
    assert fired.fix and fired.fix in outcome.remediation


def test_healthy_node_has_no_findings_that_fired():
    outcome = judge(fixture("healthy_8x_h100.json"), Expect(gpus_per_node=8))
    assert outcome.status is Status.PASS and not ids(outcome)
    assert outcome.remediation == []


def test_mig_node_never_reads_pass_with_one_of_eight_computing():
    outcome = judge(fixture("mig_1_of_8.json"), Expect(gpus_per_node=8))
    computed = next(m for m in outcome.measurements if m.name == "GPUs computing correctly")
    assert (computed.value, computed.threshold, computed.ok) == (1, 8, False)
    assert outcome.status is not Status.PASS
    assert "gpu.visibility.mig-enabled" in ids(outcome)


def test_fewer_products_than_gpus_without_mig_fails():
    data = fixture("healthy_8x_h100.json")
    data["torch"]["devices"] = data["torch"]["devices"][:3]
    outcome = judge(data)
    assert outcome.status is Status.FAIL and "gpu.visibility.not-all-computed" in ids(outcome)


def test_broken_nvml_bindings_are_a_finding_not_a_crash():
    data = fixture("healthy_8x_h100.json")
    data["nvml"] = {"available": False, "error_kind": "bindings",
                    "error": "AttributeError: module 'pynvml' has no attribute 'nvmlDeviceGetCurrentClocksEventReasons'",
                    "bindings": {"nvidia-ml-py": "12.550.52", "pynvml": "11.5.0"}}
    outcome = judge(data)
    assert outcome.status is Status.WARN
    assert ids(outcome) == {"gpu.visibility.nvml-bindings"}
    assert "pynvml 11.5.0" in outcome.findings[0].message  # the shadowing package is named
    assert outcome.remediation == [GpuVisibility.fixes["nvml-bindings"]]
    # No framework sees a GPU either, and 8 are expected: that is a FAIL, still without a crash.
    data["torch"].update(device_count=0, devices=[])
    data["tensorflow"].update(device_count=0, devices=[])
    assert judge(data, Expect(gpus_per_node=8)).status is Status.FAIL


def test_copies_not_bound_to_the_gpus_numa_node_are_labelled_and_not_judged_as_local():
    data = fixture("healthy_8x_h100.json")
    for device in data["torch"]["devices"]:
        device["host_device"]["numa"] = {"bound": False, "reason": "cannot read 0000:18:00.0/local_cpulist"}
    outcome = judge(data, min_host_device_gbps=56.0)  # above the 55.1 GB/s the copies reached
    assert outcome.status is Status.WARN
    assert ids(outcome) == {"gpu.visibility.copy-slow-not-numa-local"}
    names = [m.name for m in outcome.measurements if "copy" in m.name]
    assert names == ["slowest host-to-device copy (not NUMA-local)", "slowest device-to-host copy (not NUMA-local)"]
    bound = judge(fixture("healthy_8x_h100.json"), min_host_device_gbps=56.0)
    assert bound.status is Status.FAIL and "gpu.visibility.copy-slow" in ids(bound)


def test_bus_ids_and_cpulists():
    assert sysfs_bus_id("00000000:2A:00.0") == "0000:2a:00.0"
    assert sysfs_bus_id("0000:18:00.0") == "0000:18:00.0"
    assert sysfs_bus_id(None) is None and sysfs_bus_id("nonsense") is None
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("") == set()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_numa_local_binds_to_the_gpus_cpus_and_restores(tmp_path):
    before = os.sched_getaffinity(0)
    cpu = min(before)
    device = tmp_path / "0000:18:00.0"
    device.mkdir()
    (device / "local_cpulist").write_text(f"{cpu}\n")
    with numa_local("00000000:18:00.0", sysfs=str(tmp_path)) as record:
        assert os.sched_getaffinity(0) == {cpu}
    assert record == {"bound": True, "cpus": str(cpu), "pci": "0000:18:00.0"}
    assert os.sched_getaffinity(0) == before
    with numa_local("00000000:99:00.0", sysfs=str(tmp_path)) as record:
        assert os.sched_getaffinity(0) == before
    assert record["bound"] is False and "local_cpulist" in record["reason"]


def test_gpu_visibility_runs_before_the_checks_that_load_the_gpus():
    registry = discover()
    order = [c.id for c in registry.ordered()]
    first_loader = min(order.index(i) for i in ("checkpoint.roundtrip", "collectives.local", "scaling.multi_gpu",
                                                "dataloader.throughput") if i in order)
    assert order.index("gpu.visibility") < first_loader
    assert order[0] == "gpu.visibility"


def test_every_gpu_fixture_has_the_units_and_shapes_nvml_gives():
    for path in sorted(DATA.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data.get("_source"), path.name
        nvml = data["nvml"]
        for gpu in nvml.get("gpus") or []:
            total, free, used = gpu["memory_total_bytes"], gpu["memory_free_bytes"], gpu["memory_used_bytes"]
            assert total == free + used, path.name  # NVML v1: used = total - free, in bytes
            if not gpu.get("processes") and not copy.deepcopy(gpu).get("error"):
                # An idle H100 under NVML v1 reports its driver reservation as used: 0.3-0.6 GiB.
                assert 0.3 * 2**30 <= used <= 0.6 * 2**30, path.name
            assert all(isinstance(m, int) and m >= 0 for m in gpu["throttle_reason_samples"] or []), path.name
            assert gpu["pci_bus_id"] == gpu["pci_bus_id"].upper() and len(gpu["pci_bus_id"]) == 16, path.name
        for device in (data.get("torch") or {}).get("devices") or []:
            copies = device.get("host_device") or {}
            if copies.get("h2d_gbps_samples"):
                assert copies["bytes"] == 256 * 2**20
                assert all(1 < v < 64 for v in copies["h2d_gbps_samples"] + copies["d2h_gbps_samples"])  # gen5 x16
                assert "numa" in copies, path.name
