"""checkpoint.roundtrip judged from recorded facts, and its pure helpers."""

from __future__ import annotations

import copy
import errno
import json
import statistics

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.checkpoint.roundtrip import CheckpointRoundtrip, Params
from preflight_checks.checkpoint.storage import storage_message, storage_problem_kind
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "checkpoint"
CHECK = CheckpointRoundtrip()


def fixture(name: str) -> tuple[dict, Params]:
    recorded = json.loads((DATA / f"{name}.json").read_text())
    return recorded["facts"], CHECK.params_from(recorded["params"])


def judge(facts: dict, params: Params) -> object:
    return CHECK.evaluate(facts, params, Expect())


def passing_params(facts: dict, params: Params) -> Params:
    """The recorded run with floors just under its slowest median, so only correctness can fail."""
    medians = [statistics.median(f[k]) for f in facts["torch"]["formats"].values()
               for k in ("write_gbps_samples", "read_gbps_samples")]
    params.min_write_gbps = params.min_read_gbps = min(medians) * 0.9
    return params


def kinds(outcome) -> list[str]:
    return [i.split(".", 2)[2] for i in finding_ids(outcome)]


def test_recorded_run_is_exact_and_reports_figures_with_thresholds():
    facts, params = fixture("pass_cpu")
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.PASS and kinds(outcome) == []
    by_name = {m.name: m for m in outcome.measurements}
    write = by_name["torch.save write"]
    assert write.unit == "GB/s" and write.comparison == ">=" and write.threshold == params.min_write_gbps
    assert write.value == round(statistics.median(facts["torch"]["formats"]["torch.save"]["write_gbps_samples"]), 3)
    assert len(write.samples) == len(facts["torch"]["formats"]["torch.save"]["write_gbps_samples"])
    assert "torch.distributed.checkpoint read" in by_name
    assert by_name["resumed weights equal uninterrupted run"].ok is True
    assert "tensorflow checkpoint write" in by_name
    assert any("resumed from the step-20 checkpoint" in d for d in outcome.details)


def test_slow_write_is_warn_and_names_the_format():
    facts, params = fixture("pass_cpu")
    params = passing_params(facts, params)
    fastest = max(max(f["write_gbps_samples"]) for f in facts["torch"]["formats"].values())
    params.min_write_gbps = fastest * 2
    outcome = judge(facts, params)
    assert outcome.status is Status.WARN and set(kinds(outcome)) == {"slow-write"}
    assert outcome.findings[0].message.startswith("torch.save ")  # the format is named
    assert next(m for m in outcome.measurements if m.name == "torch.save write").ok is False


def test_bit_difference_after_load_is_fail():
    facts, params = fixture("pass_cpu")
    facts = copy.deepcopy(facts)
    facts["torch"]["formats"]["dcp"]["mismatches"] = ["['model']['edge_values']: 1 of 32 bytes differ"]
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.FAIL and kinds(outcome) == ["not-exact"]
    assert "edge_values" in outcome.findings[0].message  # the first differing entry is named


def test_resume_that_drops_rng_state_is_fail():
    facts, params = fixture("resume_drop_rng")
    params.min_write_gbps = params.min_read_gbps = 0.0
    outcome = judge(facts, params)
    assert outcome.status is Status.FAIL and kinds(outcome) == ["resume-not-exact"]
    assert any("fault injection" in d for d in outcome.details)
    assert next(m for m in outcome.measurements if m.name.startswith("resumed")).ok is False


def test_resume_without_a_checkpoint_to_resume_from_is_fail():
    facts, params = fixture("pass_cpu")
    facts = copy.deepcopy(facts)
    facts["resume"]["resumed_from_step"] = 0
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.FAIL and kinds(outcome) == ["resume-no-checkpoint"]


def test_resume_worker_crash_is_error_with_output():
    facts, params = fixture("pass_cpu")
    facts = copy.deepcopy(facts)
    facts["resume"] = {"error": "the resumed training run exited with 1", "output_tail": "Traceback ...\nKeyError: 'model'"}
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.ERROR and kinds(outcome) == ["resume-error"]
    assert any("KeyError" in d for d in outcome.details)  # the worker's output is kept


@pytest.mark.parametrize("name, kind", [
    ("read_only_dir", "storage-read-only"),
    ("missing_dir", "storage-missing"),
    ("full_dir", "storage-full"),
])
def test_unusable_directory_is_fail_with_a_plain_message(name, kind):
    facts, params = fixture(name)
    outcome = judge(facts, params)
    assert outcome.status is Status.FAIL and kinds(outcome) == [kind]
    assert outcome.remediation == [CHECK.fixes[kind]]  # the fix for that cause, not a generic hint
    assert facts["dir"] in outcome.summary
    assert "Traceback" not in outcome.summary + "".join(outcome.details)
    assert not outcome.measurements


def test_full_dir_says_how_much_space_is_needed():
    facts, params = fixture("full_dir")
    outcome = judge(facts, params)
    assert f"{facts['free_bytes'] / 1e6:.1f} MB free" in outcome.summary
    assert f"{facts['needed_bytes'] / 1e6:.1f} MB" in outcome.summary


def test_old_checkpoint_that_loads_is_described():
    facts, params = fixture("compat_ok")
    params.min_write_gbps = params.min_read_gbps = 0.0
    outcome = judge(facts, params)
    assert outcome.status is Status.PASS and kinds(outcome) == []
    text = next(d for d in outcome.details if d.startswith("old checkpoint"))
    assert f"{facts['compat']['tensors']} tensors" in text and "model" in text


def test_old_checkpoint_that_does_not_load_is_fail():
    facts, params = fixture("compat_broken")
    params.min_write_gbps = params.min_read_gbps = 0.0
    outcome = judge(facts, params)
    assert outcome.status is Status.FAIL and kinds(outcome) == ["compat-broken"]
    assert "weights_only=True" in outcome.findings[0].message  # torch's own reason is kept


def test_an_old_checkpoint_whose_pickle_was_refused_is_fail_with_its_own_fix():
    facts, params = fixture("compat_ok")
    params.min_write_gbps = params.min_read_gbps = 0.0
    facts["compat"] = {"path": "/shared/old-dcp", "format": "torch.distributed.checkpoint", "trusted": False,
                       "refused": True, "error": "it names posix.system, which preflight does not unpickle from a "
                                                 "checkpoint it did not write"}
    outcome = judge(facts, params)
    assert outcome.status is Status.FAIL
    refused = [f for f in outcome.findings if f.id == "checkpoint.roundtrip.compat-refused"]
    assert refused and "compat_trusted" in refused[0].fix
    assert "checkpoint.roundtrip.compat-broken" not in {f.id for f in outcome.findings}


def test_tensorflow_failures():
    facts, params = fixture("pass_cpu")
    params = passing_params(facts, params)
    crashed = copy.deepcopy(facts)
    crashed["tensorflow"] = {"error": "the tensorflow worker exited with -6 without a result (killed by a signal)"}
    assert judge(crashed, params).status is Status.FAIL and kinds(judge(crashed, params)) == ["tensorflow-failed"]
    timed_out = copy.deepcopy(facts)
    timed_out["tensorflow"] = {"error": "python did not finish within 30s", "timed_out": True}
    assert judge(timed_out, params).status is Status.ERROR
    inexact = copy.deepcopy(facts)
    inexact["tensorflow"]["mismatches"] = ["kernel: values differ"]
    outcome = judge(inexact, params)
    assert outcome.status is Status.FAIL and kinds(outcome) == ["tensorflow-not-exact"]
    stale = copy.deepcopy(facts)
    stale["tensorflow"]["manager_latest"] = "ckpt-1"
    assert kinds(judge(stale, params)) == ["tensorflow-stale-latest"]


def test_no_framework_is_skip():
    facts = {"dir": "/x", "dir_is_scratch": True, "frameworks": {"torch": None, "tensorflow": None}}
    outcome = judge(facts, Params())
    assert outcome.status is Status.SKIP and kinds(outcome) == ["no-framework"]


def test_collect_without_frameworks_touches_nothing(monkeypatch, tmp_path):
    import preflight_checks.checkpoint.roundtrip as module
    from preflight.engine.context import NodeContext

    monkeypatch.setattr(module, "_framework_version", lambda *_: None)
    ctx = NodeContext(node="n", output_dir=tmp_path, scratch_dir=tmp_path / "s", expect=Expect(), timeout_s=10)
    facts = CHECK.collect(ctx, Params(dir=str(tmp_path)))
    assert judge(facts, Params()).status is Status.SKIP
    assert list(tmp_path.iterdir()) == []


def test_leftovers_are_warn():
    facts, params = fixture("pass_cpu")
    facts = copy.deepcopy(facts)
    facts["left_behind"] = ["/shared/ckpt/preflight-checkpoint-x"]
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.WARN and kinds(outcome) == ["left-behind"]


@pytest.mark.parametrize("exc, kind", [
    (OSError(errno.EROFS, "Read-only file system"), "read_only"),
    (PermissionError(errno.EACCES, "Permission denied"), "permission"),
    (OSError(errno.ENOSPC, "No space left on device"), "full"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "quota"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory"), "missing"),
    (RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 512 vs 0: No space left on device"), "full"),
    (RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"), None),
    (ValueError("something else"), None),
])
def test_storage_problem_kind(exc, kind):
    assert storage_problem_kind(exc) == kind


def test_storage_problem_kind_follows_the_cause_and_uses_free_space():
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system")
    assert storage_problem_kind(wrapped) == "read_only"
    bare = RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert storage_problem_kind(bare, free_bytes=0) == "full"
    assert storage_problem_kind(bare, free_bytes=10**9) is None


def test_storage_messages_name_the_path():
    for kind in ("read_only", "permission", "missing", "not_a_directory", "full", "quota"):
        assert "/ckpt" in storage_message(kind, "/ckpt")


# --- byte-for-byte comparison (needs torch, no storage) -------------------------------------------

def test_compare_states_is_bitwise():
    torch = pytest.importorskip("torch")
    from preflight_checks.checkpoint.state import compare_states

    nan_a = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    nan_b = torch.tensor([0x7FC00002], dtype=torch.int32).view(torch.float32)
    base = {"w": torch.tensor([1.0, -0.0]), "nan": nan_a.clone(), "step": 3, "lr": 0.1, "betas": (0.9, 0.99)}
    same = copy.deepcopy(base)
    assert compare_states(base, same)[1] == []  # NaN equals itself bit for bit, where torch.equal says no
    assert not torch.equal(base["nan"], same["nan"])

    signed_zero = copy.deepcopy(base)
    signed_zero["w"] = torch.tensor([1.0, 0.0])
    assert torch.equal(base["w"], signed_zero["w"])  # what a value comparison would miss
    assert compare_states(base, signed_zero)[1] == ["['w']: 1 of 8 bytes differ"]  # the sign bit

    payload = copy.deepcopy(base)
    payload["nan"] = nan_b
    assert compare_states(base, payload)[1] == ["['nan']: 1 of 4 bytes differ"]

    retyped = copy.deepcopy(base)
    retyped["w"] = base["w"].double()
    assert "dtype torch.float32 came back as torch.float64" in compare_states(base, retyped)[1][0]

    reshaped = copy.deepcopy(base)
    reshaped["w"] = base["w"].reshape(2, 1)
    assert "shape (2,) came back as (2, 1)" in compare_states(base, reshaped)[1][0]

    missing = copy.deepcopy(base)
    del missing["step"]
    extra = copy.deepcopy(base)
    extra["new"] = 1
    tupled = copy.deepcopy(base)
    tupled["betas"] = [0.9, 0.99]
    assert "['step']: missing after load" in compare_states(base, missing)[1]
    assert "['new']: present after load but never saved" in compare_states(base, extra)[1]
    assert "<tuple>" in compare_states(base, tupled)[1][0]


def test_compare_states_bounds_the_report():
    torch = pytest.importorskip("torch")
    from preflight_checks.checkpoint.state import (
        MAX_REPORTED_MISMATCHES,
        compare_states,
    )

    left = {f"t{i}": torch.zeros(1) for i in range(30)}
    right = {f"t{i}": torch.ones(1) for i in range(30)}
    leaves, problems = compare_states(left, right)
    assert leaves == 31
    assert len(problems) == MAX_REPORTED_MISMATCHES + 1 and problems[-1] == f"... and {30 - MAX_REPORTED_MISMATCHES} more"


def test_state_has_every_rng_and_edge_values():
    pytest.importorskip("torch")
    from preflight_checks.checkpoint.state import (
        blank_like,
        build_state,
        count_tensors,
    )

    state = build_state(0.05, seed=1)
    assert {"torch", "python", "numpy"} <= set(state["rng"])
    assert "edge_values" in state["model"] and len(state["optimizer"]["state"]) > 0
    tensors, data_bytes = count_tensors(state)
    blank = blank_like(state)
    assert count_tensors(blank) == (tensors, data_bytes)
    assert blank["step"] is None and blank["rng"]["python"] is None
    assert isinstance(blank["optimizer"]["param_groups"], list)


def test_state_that_cannot_fit_in_memory_is_refused():
    import psutil

    from preflight.core.check import CannotMeasure
    from preflight_checks.checkpoint.state import check_memory as _check_memory

    available = psutil.virtual_memory().available
    with pytest.raises(CannotMeasure, match="needs about .* MB of memory"):
        _check_memory(available / 1e6)
    _check_memory(available / 1e6 / 4)


def test_findings_have_ids_and_rates_declare_their_figure():
    facts, params = fixture("pass_cpu")
    outcome = judge(facts, passing_params(facts, params))
    rates = {(m.series, m.at) for m in outcome.measurements if m.figure == "rate"}
    assert {("write", "torch.save"), ("read", "torch.save")} <= rates
    if "dcp" in facts["torch"]["formats"]:
        assert {("write", "DCP"), ("read", "DCP")} <= rates
    resumed = next(m for m in outcome.measurements if m.name.startswith("resumed"))
    assert (resumed.comparison, resumed.threshold, resumed.ok) == ("==", "yes", True)
    slow = judge(facts, CHECK.params_from({**vars(params), "min_write_gbps": 1e9}))
    assert "checkpoint.roundtrip.slow-write" in {f.id for f in slow.findings}


def test_slow_reads_and_slow_writes_each_get_their_own_fix():
    facts, params = fixture("pass_cpu")
    params = passing_params(facts, params)
    reads = judge(facts, CHECK.params_from({**vars(params), "min_read_gbps": 1e9}))
    writes = judge(facts, CHECK.params_from({**vars(params), "min_write_gbps": 1e9}))
    read_fixes = {f.fix for f in reads.findings if f.id == "checkpoint.roundtrip.slow-read"}
    write_fixes = {f.fix for f in writes.findings if f.id == "checkpoint.roundtrip.slow-write"}
    # One fix per cause (torch.distributed.checkpoint, already sharded, has its own), never a write's for a read.
    assert read_fixes and write_fixes and not read_fixes & write_fixes
    assert all("Slow writes" not in fix for fix in read_fixes)


def test_a_slow_distributed_checkpoint_is_not_told_to_use_distributed_checkpoint():
    facts, params = fixture("pass_cpu")
    params.min_write_gbps = params.min_read_gbps = 1000.0  # every format is slow
    outcome = judge(facts, params)
    by_message = {f.message.split(" ")[0]: f for f in outcome.findings if f.id.endswith(("slow-write", "slow-read"))}
    dcp = [f for f in outcome.findings if f.message.startswith("torch.distributed.checkpoint ")]
    assert {f.id.rsplit(".", 1)[1] for f in dcp} == {"slow-write", "slow-read"}
    for f in dcp:
        assert "(torch.distributed.checkpoint)" not in f.fix and "already" in f.fix
    assert "torch.distributed.checkpoint" in by_message["torch.save"].fix  # the advice stands for torch.save


def test_the_scratch_directory_caveat_reaches_report_md():
    from preflight.core.model import CAVEAT, CheckResult
    from preflight.reporters import markdown
    from tests.conftest import make_report

    facts, params = fixture("pass_cpu")
    facts = {**facts, "dir_is_scratch": True}
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.PASS  # a caveat changes no status
    [caveat] = [f for f in outcome.findings if f.id.endswith(CAVEAT)]
    result = CheckResult("checkpoint.roundtrip", "vm", outcome.status, outcome.summary, findings=outcome.findings,
                         measurements=outcome.measurements)
    text = markdown.render(make_report([result]))
    assert "### Caveats" in text and "scratch directory" in text
    assert "checkpoint.roundtrip.dir" in text  # its fix names the setting


def test_read_figures_that_may_be_memory_speed_are_said_so():
    facts, params = fixture("pass_cpu")
    facts["fs_type"] = "tmpfs"
    facts["torch"]["formats"]["torch.save"]["cache_dropped"] = False
    outcome = judge(facts, passing_params(facts, params))
    assert outcome.status is Status.PASS
    assert any(d.startswith("torch.save: the page cache could not be dropped") for d in outcome.details)
    assert any("on tmpfs (memory)" in d for d in outcome.details)


def test_tensorflow_alone_is_judged_and_its_output_kept():
    facts, params = fixture("pass_cpu")
    facts["frameworks"]["torch"] = None
    del facts["torch"], facts["resume"]
    outcome = judge(facts, params)
    assert outcome.status is Status.PASS and "tensorflow checkpoint write" in {m.name for m in outcome.measurements}
    assert not any(m.name.startswith("torch") for m in outcome.measurements)
    facts["tensorflow"] = {"error": "the tensorflow worker exited with 1", "output_tail": "Traceback: boom"}
    outcome = judge(facts, params)
    assert kinds(outcome) == ["tensorflow-failed"] and "Traceback: boom" in outcome.details
