"""Nothing read from a checkpoint runs: every reader preflight has is given a pickle whose
__reduce__ would create a marker file, and the marker never appears.

Readers: checkpoint.roundtrip's compat_path as a torch.save file, as a DCP directory whose
`.metadata` is the payload, and as a DCP directory whose non-tensor value is; the DCP reader of the
round trip itself; and the resume worker's torch.load of the newest checkpoint in its directory.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from preflight_checks.checkpoint.dcp_safe import MetadataUnpickler, Refused, load_metadata  # noqa: E402
from preflight_checks.checkpoint.formats import compat_test, load_dcp  # noqa: E402
from tests.conftest import ROOT  # noqa: E402


class Payload:
    """Unpickled, it creates `marker` (builtins.open in write mode)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def save_dcp(state, directory: Path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(directory), no_dist=True)


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "MARKER"
    yield path
    assert not path.exists(), "a pickle from the checkpoint ran"


def test_a_torch_save_file_with_a_payload_is_refused(tmp_path, marker):
    torch.save({"model": {"w": torch.ones(2)}, "extra": Payload(marker)}, tmp_path / "old.pt")
    facts = compat_test(str(tmp_path / "old.pt"), tmp_path)
    assert facts["format"] == "torch.save" and "error" in facts


def test_dcp_metadata_with_a_payload_is_refused_naming_it(tmp_path, marker):
    save_dcp({"w": torch.ones(3)}, tmp_path / "old")
    (tmp_path / "old" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    facts = compat_test(str(tmp_path / "old"), tmp_path)
    assert facts.get("refused") is True and "io.open" in facts["error"], facts
    with pytest.raises(Refused, match="io.open"):
        load_dcp({"w": torch.zeros(3)}, tmp_path / "old")


def test_dcp_metadata_that_hides_a_payload_inside_its_own_classes_is_refused(tmp_path, marker):
    """A real Metadata object with a payload planted among its fields."""
    save_dcp({"w": torch.ones(3)}, tmp_path / "old")
    metadata = load_metadata((tmp_path / "old" / ".metadata").read_bytes())
    metadata.planner_data["w"] = Payload(marker)
    (tmp_path / "old" / ".metadata").write_bytes(pickle.dumps(metadata))
    facts = compat_test(str(tmp_path / "old"), tmp_path)
    assert facts.get("refused") is True, facts


def test_a_dcp_value_with_a_payload_is_refused(tmp_path, marker):
    save_dcp({"w": torch.ones(3), "extra": Payload(marker)}, tmp_path / "old")  # pickled at save, not run
    facts = compat_test(str(tmp_path / "old"), tmp_path)
    assert facts.get("refused") is True and "extra" in facts["error"], facts
    with pytest.raises(Refused):
        load_dcp({"w": torch.zeros(3), "extra": None}, tmp_path / "old")


def test_a_clean_dcp_checkpoint_still_loads_safe_and_trusted(tmp_path):
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 7, "lr": [0.1, 0.01], "name": "run-1"}
    save_dcp(state, tmp_path / "old")
    for trusted in (False, True):
        facts = compat_test(str(tmp_path / "old"), tmp_path, trusted=trusted)
        assert "error" not in facts, facts
        assert facts["tensors"] == 1 and facts["top_level_keys"] == ["model", "step", "lr", "name"]
    into = {"model": {"w": torch.zeros(2, 3)}, "step": 0, "lr": [], "name": ""}
    load_dcp(into, tmp_path / "old")
    assert torch.equal(into["model"]["w"], state["model"]["w"]) and into["step"] == 7 and into["name"] == "run-1"


def test_the_metadata_unpickler_accepts_only_what_dcp_writes():
    class Probe(MetadataUnpickler):
        pass

    assert Probe.find_class(Probe.__new__(Probe), "torch", "Size") is torch.Size
    assert Probe.find_class(Probe.__new__(Probe), "torch", "bfloat16") is torch.bfloat16
    for module, name in (("os", "system"), ("builtins", "eval"), ("torch", "load"), ("subprocess", "Popen"),
                         ("torch.distributed.checkpoint.filesystem", "pickle"),
                         ("torch.distributed.checkpoint.state_dict_loader", "load")):
        with pytest.raises(Refused):
            Probe.find_class(Probe.__new__(Probe), module, name)


def test_the_resume_worker_refuses_a_planted_checkpoint(tmp_path, marker):
    directory = tmp_path / "ckpts"
    directory.mkdir()
    torch.save({"model": {}, "optimizer": {}, "step": 5, "extra": Payload(marker)}, directory / "ckpt-00000099.pt")
    proc = subprocess.run([sys.executable, "-m", "preflight.workers.checkpoint_train", "--dir", str(directory),
                           "--steps", "2", "--save-every", "1", "--resume"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0 and "Weights only load failed" in proc.stderr, proc.stderr[-2000:]


def _calls(attribute: str, owner: str):
    """(file, source) of every call OWNER.ATTRIBUTE(...) in preflight/ and checks/, from the syntax tree."""
    for folder in ("preflight", "checks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(text)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == owner):
                    yield str(path.relative_to(ROOT)), node


def test_every_torch_load_in_preflight_and_the_checks_is_weights_only():
    calls = list(_calls("load", "torch"))
    assert len(calls) >= 5
    unsafe = [(path, ast.unparse(call)) for path, call in calls
              if not any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                         for k in call.keywords)]
    assert not unsafe, unsafe
    pickled = [(path, ast.unparse(call)) for name in ("load", "loads") for path, call in _calls(name, "pickle")]
    assert not pickled, f"calls that unpickle with the full pickle machinery: {pickled}"
