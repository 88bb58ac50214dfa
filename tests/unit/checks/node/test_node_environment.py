from dataclasses import replace

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.node.environment import Params, NodeEnvironment
from tests.conftest import finding_ids, load_facts

CHECK = NodeEnvironment()


def evaluate(facts, **params):
    return CHECK.evaluate(facts, replace(Params(), **params), Expect())


def test_tuned_gpu_node_passes():
    outcome = evaluate(load_facts("node_environment/healthy_gpu_node.json"))
    assert outcome.status is Status.PASS, outcome.details
    shm = next(m for m in outcome.measurements if m.name == "/dev/shm size")
    assert shm.ok and shm.value > 1000


def test_docker_default_shm_fails_and_names_the_cause():
    outcome = evaluate(load_facts("node_environment/docker_defaults.json"))
    assert outcome.status is Status.FAIL
    assert finding_ids(outcome) == ["node.environment.shm-small", "node.environment.memlock-limited",
                                    "node.environment.nofile-low"]
    nofile = next(f for f in outcome.findings if f.id == "node.environment.nofile-low")
    assert "hard limit allows raising it" in nofile.message  # said when raising it needs no root


def test_loopback_hostname_is_explained():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["hostname_addresses"] = ["127.0.1.1"]
    facts["env"] = {}
    outcome = evaluate(facts)
    assert outcome.status is Status.WARN and finding_ids(outcome) == ["node.environment.hostname-loopback"]


def test_loopback_hostname_notes_interface_pinning():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["hostname_addresses"] = ["127.0.0.1"]
    outcome = evaluate(facts)
    assert finding_ids(outcome) == ["node.environment.hostname-loopback"]
    assert "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME is set" in outcome.findings[0].message  # the pinning is noted


def test_thresholds_are_parameters():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    assert finding_ids(evaluate(facts, min_free_disk_gib=10_000)) == ["node.environment.disk-low"]
    assert finding_ids(evaluate(facts, min_shm_gib=2048)) == ["node.environment.shm-small"]
    relaxed = evaluate(load_facts("node_environment/docker_defaults.json"), min_shm_gib=0.05,
                       require_unlimited_memlock=False, min_open_files=1024)
    assert relaxed.status is Status.PASS, relaxed.details


def test_missing_shm_and_unreadable_disk_fail():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["shm_total_bytes"] = None
    facts["disks"] = {"/gone": {"error": "No such file or directory"}}
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL
    assert finding_ids(outcome) == ["node.environment.shm-missing", "node.environment.disk-unreadable"]
    assert "/gone" in outcome.remediation[1]  # the fix names the directory


# -- what the node has to train with ------------------------------------------------------------

from preflight_checks.node.environment import NO_FRAMEWORK, importable, nvidia_pci_gpus  # noqa: E402


def _pci_device(root, address, vendor, pci_class, driver=None, device="0x2330"):
    path = root / "devices" / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(f"{vendor}\n")
    (path / "class").write_text(f"{pci_class}\n")
    (path / "device").write_text(f"{device}\n")
    if driver:
        target = root / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (path / "driver").symlink_to(target)


def test_pci_scan_finds_nvidia_gpus_not_nvswitches_nor_other_vendors(tmp_path):
    _pci_device(tmp_path, "0000:18:00.0", "0x10de", "0x030200", driver="nvidia")  # H100 (3D controller)
    _pci_device(tmp_path, "0000:2a:00.0", "0x10de", "0x030000")  # a VGA NVIDIA GPU, no driver bound
    _pci_device(tmp_path, "0000:05:00.0", "0x10de", "0x068000", driver="nvidia")  # NVSwitch: a bridge
    _pci_device(tmp_path, "0000:00:02.0", "0x8086", "0x030000", driver="i915")  # Intel graphics
    _pci_device(tmp_path, "0000:3b:00.0", "0x15b3", "0x020700", driver="mlx5_core")  # InfiniBand NIC
    gpus = nvidia_pci_gpus(str(tmp_path / "devices"))
    assert [(g["address"], g["driver"]) for g in gpus] == [("0000:18:00.0", "nvidia"), ("0000:2a:00.0", None)]
    assert gpus[0]["class"] == "0x030200" and gpus[0]["device"] == "0x2330"
    assert nvidia_pci_gpus(str(tmp_path / "nowhere")) == []


def test_importable_does_not_import():
    import sys

    found = importable(["json", "surely_not_a_module_xyz"])
    assert found == {"json": True, "surely_not_a_module_xyz": False}
    assert "surely_not_a_module_xyz" not in sys.modules


def _facts(gpus=(), frameworks=None):
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["nvidia_gpus"] = [{"address": f"0000:{i:02x}:00.0", "class": "0x030200", "driver": d}
                            for i, d in enumerate(gpus)]
    facts["frameworks"] = frameworks if frameworks is not None else {"torch": True, "tensorflow": False}
    return facts


def _ids(outcome):
    return {f.id for f in outcome.findings if f.level is not Status.PASS}


def test_gpus_on_the_bus_without_a_driver_fail():
    outcome = evaluate(_facts(gpus=[None] * 8))
    assert outcome.status is Status.FAIL
    assert _ids(outcome) == {"node.environment.gpu-without-driver"}
    assert next(m for m in outcome.measurements if m.name == "NVIDIA GPUs on the PCI bus").value == 8
    assert any("nvidia-smi" in fix for fix in outcome.remediation)
    assert evaluate(_facts(gpus=["nvidia"] * 8)).status is Status.PASS


def test_neither_framework_is_no_go_unless_stated_on_purpose():
    none = {"torch": False, "tensorflow": False}
    outcome = evaluate(_facts(frameworks=none))
    assert outcome.status is Status.FAIL and outcome.summary == NO_FRAMEWORK  # the headline of a NO-GO
    assert _ids(outcome) == {"node.environment.no-framework"}
    stated = CHECK.evaluate(_facts(frameworks=none), Params(), Expect(frameworks=[]))
    assert stated.status is Status.PASS
    only_tf = evaluate(_facts(frameworks={"torch": False, "tensorflow": True}))
    assert only_tf.status is Status.PASS


def test_an_expected_framework_that_is_missing_fails_with_its_own_fix():
    outcome = CHECK.evaluate(_facts(), Params(), Expect(frameworks=["torch", "tensorflow"]))
    assert _ids(outcome) == {"node.environment.framework-missing"}
    assert outcome.remediation == ["Install tensorflow into the Python that runs preflight on this node (pip install "
                                   "tensorflow), or remove it from expect.frameworks."]


def test_findings_carry_their_own_fixes():
    outcome = evaluate(load_facts("node_environment/docker_defaults.json"))
    assert {"node.environment.shm-small", "node.environment.memlock-limited", "node.environment.nofile-low"} <= _ids(outcome)
    assert not any("hostname" in fix for fix in outcome.remediation)


def test_the_output_directory_is_one_figure_whatever_its_path():
    """A dated --out is a new path each run: the figure is named by its role, so fleet history sees
    one figure across runs; a configured disk path keeps its own name."""
    names = []
    for out in ("/data/runs/2026-12-01T09-00-00Z", "/data/runs/2026-12-02T09-00-00Z"):
        facts = load_facts("node_environment/healthy_gpu_node.json")
        facts["output_dir"] = out
        facts["disks"] = {out: {"free_bytes": 200 * 2**30, "total_bytes": 500 * 2**30},
                          "/scratch": {"free_bytes": 900 * 2**30, "total_bytes": 1000 * 2**30}}
        names.append(sorted(m.name for m in evaluate(facts).measurements if m.name.startswith("free disk")))
    assert names[0] == names[1] == ["free disk at /scratch", "free disk at the output directory"]
