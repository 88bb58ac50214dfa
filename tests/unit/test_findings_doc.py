"""docs/findings.md lists every finding id of every built-in check with its fix, and is current."""

import importlib.util
import subprocess
import sys

from tests.conftest import ROOT


def table():
    spec = importlib.util.spec_from_file_location("findings_table", ROOT / "scripts" / "findings_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_findings_md_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "findings_table.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_built_in_check_has_a_section_with_the_ids_its_tests_assert_on():
    text = (ROOT / "docs" / "findings.md").read_text()
    for check in table().builtin_checks():
        assert f"## {check.id}\n" in text
    for finding_id in ("node.environment.no-framework", "gpu.visibility.no-nvidia-hardware",
                       "dataloader.throughput.no-demand", "collectives.local.no-floor", "collectives.cluster.no-floor",
                       "checkpoint.roundtrip.slow-read", "checkpoint.roundtrip.slow-write"):
        assert f"| `{finding_id}` |" in text


def test_the_table_carries_each_findings_own_fix():
    rows = {fid: fix for check in table().builtin_checks() for fid, _, fix in table().source_findings(check)}
    # A fix the check declares by finding kind (Check.fixes) is that finding's own.
    rows.update({f"{check.id}.{kind}": fix for check in table().builtin_checks() for kind, fix in check.fixes.items()})
    assert "Slow writes" not in rows["checkpoint.roundtrip.slow-read"]
    assert "Slow writes" in rows["checkpoint.roundtrip.slow-write"]
    assert "--set dataloader.throughput.required_samples_per_s=" in rows["dataloader.throughput.no-demand"]
    assert "no NVIDIA GPU and no NVIDIA driver" in rows["gpu.visibility.no-nvidia-hardware"]
