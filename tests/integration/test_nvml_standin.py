"""Every NVML path of preflight against the stand-in libnvidia-ml.so.1 (tests/nvml/standin), loaded by
nvidia-ml-py's pynvml in a child process through LD_LIBRARY_PATH, as on a GPU node: the bindings'
symbols and struct versions, the facts preflight.workers.gpu_nvml reads (checked against what
preflight's own `nvidia-smi -q` parser reads from the same real readings), gpu.visibility's findings
for each fault, the real check worker, and the node image fleet history fingerprints."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight.history.extract import images_of_report
from preflight_checks.gpu.nvidia_smi import parse_query
from preflight_checks.gpu.visibility import GpuVisibility
from preflight.engine.protocol import CheckJob
from tests.conftest import ROOT
from tests.nvml.standin import DESCRIPTIONS, description, standin_env

CHECK = GpuVisibility()
READINGS = sorted(p.stem for p in DESCRIPTIONS.glob("*.json") if not p.stem.startswith("fault-"))


def python(code: str, name: str, timeout: float = 60) -> dict:
    """Run `code` in a child Python whose pynvml loads the stand-in answering from description `name`;
    it prints one JSON document."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=standin_env(name), capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def nvml_facts(name: str) -> dict:
    return python("import json; from preflight.workers.gpu_nvml import nvml_facts; "
                  "print(json.dumps(nvml_facts(throttle_samples=1)))", name)


def judged(nvml: dict, gpus_per_node: int | None = None) -> set[str]:
    """The finding ids gpu.visibility gives these NVML facts, on a node without frameworks."""
    facts = {"nvml": nvml, "cuda_visible_devices": None, "torch": {"framework": "torch", "installed": False},
             "tensorflow": {"framework": "tensorflow", "installed": False}}
    outcome = CHECK.evaluate(facts, CHECK.params_from({}), Expect(gpus_per_node=gpus_per_node))
    return {f.id for f in outcome.findings if f.level in (Status.WARN, Status.FAIL)}


def reading_of(name: str) -> dict:
    source = json.loads(description(name).read_text())["source"]["reading"]
    return parse_query((ROOT / source).read_text())


# ------------------------------------------------------------------------------------- the library


def test_pynvml_finds_every_symbol_preflight_calls_with_the_struct_versions_it_passes():
    got = python("""
        import json, pynvml as n
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {"count": n.nvmlDeviceGetCount(), "uuid_handle": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(
                   n.nvmlDeviceGetUUID(h))),
               "margin": n.nvmlDeviceGetMarginTemperature(h), "mem_v2": n.nvmlDeviceGetMemoryInfo(h, n.nvmlMemory_v2).reserved,
               "pci": n.nvmlDeviceGetPciInfo(h).busIdLegacy, "serial": n.nvmlDeviceGetSerial(h),
               "vbios": n.nvmlDeviceGetVbiosVersion(h), "power_mw": n.nvmlDeviceGetPowerUsage(h),
               "sm_clock": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), "util": n.nvmlDeviceGetUtilizationRates(h).gpu,
               "cuda": n.nvmlSystemGetCudaDriverVersion_v2(), "nvml": n.nvmlSystemGetNVMLVersion()}
        try:  # a struct of another version is refused, as NVML refuses it
            n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2 + 1)
        except n.NVMLError as exc:
            out["wrong_version"] = exc.value
        for query in (lambda: n.nvmlDeviceGetNvLinkState(h, 0), lambda: n.nvmlDeviceGetRetiredPages(h, 0),
                      lambda: n.nvmlDeviceGetVirtualizationMode(h)):
            try:
                query()
            except n.NVMLError as exc:
                out.setdefault("errors", []).append([exc.value, str(exc)])
        n.nvmlShutdown()
        try:
            n.nvmlDeviceGetCount()
        except n.NVMLError as exc:
            out["after_shutdown"] = exc.value
        print(json.dumps(out))
    """, "gpud_535.161.08_h100_hw_slowdown")
    assert got["count"] == 2 and got["uuid_handle"] == 0
    assert got["margin"] == 56 and got["mem_v2"] == 551 * 1024 ** 2
    assert got["pci"] == "0000:19:00.0" and got["serial"] == "1650124031592" and got["vbios"] == "96.00.74.00.0D"
    assert (got["power_mw"], got["sm_clock"], got["util"]) == (67740, 86, 0)
    assert got["cuda"] == 12020 and got["nvml"] == "12.535.161.08"
    assert got["wrong_version"] == 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    # No NVLink state and no page retirement in the reading: NOT_SUPPORTED, as on the real H100 for
    # retired pages; a function the library lacks is FUNCTION_NOT_FOUND, as on an old driver.
    assert got["errors"] == [[3, "Not Supported"], [3, "Not Supported"], [13, "Function Not Found"]]
    assert got["after_shutdown"] == 1  # NVML_ERROR_UNINITIALIZED


def test_no_description_is_a_node_without_a_driver(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "preflight.workers.gpu_nvml"], capture_output=True, text=True,
                          timeout=60, env={**standin_env("gpud_560.35.03_titan_v"), "PREFLIGHT_NVML_STANDIN": ""})
    facts = json.loads(proc.stdout)
    assert facts["available"] is False and facts["error_kind"] == "no_driver"
    assert "Driver Not Loaded" in facts["error"]


# --------------------------------------------------------------- real readings, through NVML


@pytest.mark.parametrize("name", READINGS)
def test_nvml_facts_are_what_nvidia_smi_printed(name):
    """What preflight reads through NVML equals what its nvidia-smi parser reads from the same reading."""
    nvml, smi = nvml_facts(name), reading_of(name)
    assert nvml["available"] is True and nvml["driver_version"] == smi["driver_version"]
    assert nvml["cuda_driver_version"] == smi["cuda_driver_version"] and nvml["device_count"] == len(smi["gpus"])
    compared = ("name", "uuid", "pci_bus_id", "memory_total_bytes", "memory_free_bytes", "memory_used_bytes",
                "remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending", "remap_failure",
                "temperature_c", "temperature_margin_c", "temperature_slowdown_tlimit_c", "temperature_shutdown_tlimit_c",
                "persistence_mode", "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
                "throttle_reason_samples", "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected")
    for ours, theirs in zip(nvml["gpus"], smi["gpus"]):
        assert ours["errors"] == {}, ours["errors"]
        assert {k: ours[k] for k in compared} == {k: theirs[k] for k in compared}
        assert ours["mig_enabled"] == theirs["mig_enabled"]
    # The real readings' own findings, now reached through NVML.
    reading = ROOT / json.loads(description(name).read_text())["source"]["reading"]
    source = json.loads(reading.with_name(reading.name + ".source.json").read_text())
    ids = judged(nvml)
    assert set(source["expect"]["findings"]) <= ids, ids
    assert not set(source["expect"]["not_findings"]) & ids, ids


def test_a_consumer_gpu_answers_not_supported_for_ecc_and_that_is_said():
    """TITAN V: nvidia-smi prints ECC Mode N/A, NVML answers NOT_SUPPORTED for ECC, no ECC counters."""
    nvml = nvml_facts("gpud_560.35.03_titan_v")
    gpu = nvml["gpus"][0]
    assert gpu["ecc_enabled"] is None and "ecc_mode" in gpu["unsupported"] and gpu["errors"] == {}
    assert {p["pid"] for p in gpu["processes"]} >= {100607, 100838}  # graphics processes, with their names
    assert "gpu.visibility.ecc-unsupported" in judged(nvml)
    assert "gpu.visibility.ecc-unsupported" not in judged(nvml_facts("gpud_535.154.05_rtx4090"))  # ECC off: ecc-off


# ------------------------------------------------------------------------------------ faults


FAULTS = {
    # fault variant: (GPUs the node should have, finding that must appear)
    "fault-gpu-missing": (2, "gpu.visibility.count"),
    "fault-ecc-double-bit": (2, "gpu.visibility.ecc-uncorrectable"),
    "fault-pcie-x8-gen3": (2, "gpu.visibility.pcie-degraded"),
    "fault-nvlink-down": (2, "gpu.visibility.nvlink-down"),
    "fault-gpu-lost-midrun": (2, "gpu.visibility.gpu-lost"),
    "fault-gpu-lost": (2, "gpu.visibility.gpu-lost"),
    "fault-version-mismatch": (2, "gpu.visibility.nvml-broken"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_fault_is_found_and_is_not_in_the_reading_it_came_from(name):
    gpus, finding = FAULTS[name]
    base = json.loads(description(name).read_text())["fault"]["derived_from"].removesuffix(".json")
    assert finding in judged(nvml_facts(name), gpus)
    assert finding not in judged(nvml_facts(base), gpus)


def test_pending_row_remaps_and_thermal_throttling_come_from_real_readings():
    assert "gpu.visibility.remap-pending" in judged(nvml_facts("gpud_535.129.03_a10_remap_pending"))
    assert "gpu.visibility.remap-pending" in judged(nvml_facts("mlengineering_a100_xid63_remap_pending"))
    hw = CHECK.evaluate({"nvml": nvml_facts("gpud_535.161.08_h100_hw_slowdown")}, CHECK.params_from({}), Expect())
    assert {(f.id, f.level) for f in hw.findings} >= {("gpu.visibility.throttled", Status.FAIL)}


def test_a_gpu_lost_mid_run_keeps_what_was_read_before_and_reads_nothing_after():
    nvml = nvml_facts("fault-gpu-lost-midrun")
    healthy, lost = nvml["gpus"]
    assert not healthy.get("lost") and healthy["errors"] == {}
    assert lost["lost"] is True and "GPU is lost" in lost["error"]
    assert lost["name"] == "NVIDIA H100 80GB HBM3" and lost["uuid"]  # read before it was lost
    assert lost["errors"] == {} and "temperature_c" not in lost  # nothing after: one finding, not one per field
    gone = nvml_facts("fault-gpu-lost")["gpus"][1]  # lost before its handle was taken
    assert gone["lost"] is True and set(gone) == {"index", "error", "lost"}


def test_a_driver_without_newer_functions_gives_facts_without_errors():
    nvml = nvml_facts("fault-old-driver")
    for gpu in nvml["gpus"]:
        assert gpu["errors"] == {}
        assert {"temperature_margin", "temperature_tlimits", "pcie_gen_gpu_max"} <= set(gpu["unsupported"])
    # nvmlDeviceGetCurrentClocksEventReasons is missing: the older throttle query still reads the mask.
    assert nvml["gpus"][1]["throttle_reason_samples"] == nvml_facts("gpud_535.183.01_h100_sw_thermal")["gpus"][1][
        "throttle_reason_samples"]


# ------------------------------------------------------------------- the real worker, and history


def run_worker(tmp_path: Path, check_id: str, name: str, expect: dict, params: dict | None = None) -> dict:
    job = CheckJob(check_id=check_id, node="gpu01", output_dir=str(tmp_path), timeout_s=300,
                   params=params or {}, expect=expect).to_dict()
    proc = subprocess.run([sys.executable, "-m", "preflight.engine.check_process"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=300, env=standin_env(name), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def h100_node(tmp_path_factory) -> dict[str, dict]:
    """gpu.visibility and versions.pinned, run for real on a node whose NVML is the H100 reading."""
    tmp = tmp_path_factory.mktemp("h100")
    return {"gpu.visibility": run_worker(tmp, "gpu.visibility", "gpud_535.161.08_h100_hw_slowdown",
                                         {"gpus_per_node": 2}, {"probe_tensorflow": True}),
            "versions.pinned": run_worker(tmp, "versions.pinned", "gpud_535.161.08_h100_hw_slowdown", {},
                                          {"probe_builds": False})}


def test_the_check_says_what_it_could_and_could_not_compare_when_frameworks_see_no_gpu(h100_node):
    result = h100_node["gpu.visibility"]
    assert result["status"] == "FAIL"
    measured = {m["name"]: m for m in result["measurements"]}
    # Compared: NVML's count with the expectation, and each framework's count with NVML's.
    assert (measured["GPUs visible (NVML)"]["value"], measured["GPUs visible (NVML)"]["threshold"]) == (2, 2)
    for framework in ("torch", "tensorflow"):
        assert (measured[f"GPUs visible ({framework})"]["value"], measured[f"GPUs visible ({framework})"]["threshold"]) \
            == (0, 2)
    ids = [f["id"] for f in result["findings"]]
    assert ids.count("gpu.visibility.framework-count") == 2 and "gpu.visibility.throttled" in ids
    # Not compared, and said so: no product, no copies, no PCIe link under load.
    assert "gpu.visibility.not-compared" in ids
    assert not {"GPUs computing correctly", "slowest host-to-device copy", "slowest device-to-host copy"} & set(measured)
    assert not any(d.get("pcie_under_load") for d in result["facts"]["torch"].get("devices") or [])


def test_the_node_image_history_fingerprints_comes_from_nvml(h100_node):
    report = {"nodes": [{"name": "gpu01"}],
              "results": [dict(r, node="gpu01") for r in h100_node.values()]}
    image = images_of_report(report)["gpu01"]
    assert (image["driver"], image["cuda_driver"]) == ("535.161.08", "12.2")
    assert (image["gpu_model"], image["gpu_count"], image["vbios"]) == ("NVIDIA H100 80GB HBM3", 2, "96.00.74.00.0D")
    assert image["digest"]
    assert h100_node["versions.pinned"]["facts"]["stack"]["driver"] == "535.161.08"


def test_the_worker_names_the_lost_gpu(tmp_path):
    result = run_worker(tmp_path, "gpu.visibility", "fault-gpu-lost-midrun", {"gpus_per_node": 2},
                        {"probe_tensorflow": False})
    lost = [f for f in result["findings"] if f["id"] == "gpu.visibility.gpu-lost"]
    assert result["status"] == "FAIL" and len(lost) == 1 and "00000000:75:00.0" in lost[0]["message"]


def test_the_canary_samples_utilisation_of_the_gpu_cuda_visible_devices_names_by_uuid():
    uuid = json.loads(description("gpud_535.183.01_h100_sw_thermal").read_text())["gpus"][1]["uuid"]
    got = python(f"""
        import json, os, time
        os.environ["CUDA_VISIBLE_DEVICES"] = "{uuid}"
        from preflight.workers.canary import UtilisationSampler
        with UtilisationSampler(1) as sampler:
            time.sleep(0.5)
        print(json.dumps({{"samples": sampler.samples[0], "error": sampler.error}}))
    """, "gpud_535.183.01_h100_sw_thermal")
    assert got["error"] is None and got["samples"] and set(got["samples"]) == {0}  # the reading's "Gpu : 0 %"
    lost = python("""
        import json, os, time
        from preflight.workers.canary import UtilisationSampler
        with UtilisationSampler(2) as sampler:
            time.sleep(0.5)
        print(json.dumps({"error": sampler.error}))
    """, "fault-gpu-lost")
    assert "GpuIsLost" in lost["error"]  # reported as not measured, with the reason
