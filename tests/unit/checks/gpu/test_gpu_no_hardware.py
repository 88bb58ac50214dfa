"""gpu.visibility where GPUs are expected but there is no NVIDIA hardware, or no driver for it: advice
that fits (no reseat where there is nothing to reseat)."""

from preflight.core.check import Expect
from preflight.core.model import Status
from tests.unit.checks.gpu.test_gpu_visibility import facts, judge


def test_gpus_expected_on_a_node_with_no_nvidia_device_or_driver_say_so_and_advise_no_reseat():
    data = facts("no_driver_cpu_node.json")
    data["pci_gpus"] = []  # sysfs read, no NVIDIA display or 3D controller on the bus
    outcome = judge(data, Expect(gpus_per_node=8))
    assert outcome.status is Status.FAIL
    fired = [f for f in outcome.findings if f.level is Status.FAIL]
    assert [f.id for f in fired] == ["gpu.visibility.no-nvidia-hardware"]
    assert "no NVIDIA GPU and no NVIDIA driver" in fired[0].fix and "--nodes" in fired[0].fix
    assert "reseat" not in fired[0].fix and "dmesg" not in fired[0].fix
    # GPUs on the bus without a driver: the driver is the fix, for both findings.
    data["pci_gpus"] = [{"address": "0000:17:00.0", "driver": None}]
    fired = [f for f in judge(data, Expect(gpus_per_node=8)).findings if f.level is Status.FAIL]
    assert [f.id for f in fired] == ["gpu.visibility.driver-missing", "gpu.visibility.no-gpu"]
    assert all("reseat" not in f.fix for f in fired) and "modprobe nvidia" in fired[1].fix
