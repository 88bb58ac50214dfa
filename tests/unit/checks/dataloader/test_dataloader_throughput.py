"""dataloader.throughput judged from recorded facts, and its pure helpers."""

from __future__ import annotations

import copy
import json
import statistics

import pytest

from preflight.core.check import CannotMeasure, Expect
from preflight.core.model import Finding, Status
from preflight.workers.dataloader_files import percentile, size_distribution
from preflight_checks.dataloader.throughput import (
    SCALING_CHECK,
    DataloaderThroughput,
    Params,
    demand_from,
    load_factory,
    scaling_facts,
)
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "dataloader"
CHECK = DataloaderThroughput()


def fixture(name: str) -> tuple[dict, Params]:
    recorded = json.loads((DATA / f"{name}.json").read_text())
    return recorded["facts"], CHECK.params_from(recorded["params"])


def judge(facts: dict, params: Params, expect: Expect | None = None):
    return CHECK.evaluate(facts, params, expect or Expect())


def best_rate(facts: dict) -> float:
    return max(facts[name]["samples_per_s"] for name in ("torch", "tensorflow")
               if facts.get(name) and facts[name].get("samples_per_s"))


def with_demand(facts: dict, samples_per_s: float, source: str = "dataloader.required_samples_per_s") -> dict:
    facts = copy.deepcopy(facts)
    facts["demand"] = {"samples_per_s": samples_per_s, "source": source}
    return facts


def no_demand(outcome) -> Finding:
    """A loader measured against nothing is no PASS: a WARN whose fix is the exact setting to add."""
    assert outcome.status is Status.WARN, outcome.summary
    found = [f for f in outcome.findings if f.id == "dataloader.throughput.no-demand"]
    assert len(found) == 1 and found[0].level is Status.WARN
    assert "--set dataloader.throughput.required_samples_per_s=" in found[0].fix
    return found[0]


def test_synthetic_run_without_demand_warns_with_the_setting_to_add():
    facts, params = fixture("synthetic")
    outcome = judge(facts, params)
    no_demand(outcome)
    assert any(d.startswith("synthetic dataset") for d in outcome.details)
    rate = next(m for m in outcome.measurements if m.name == "torch DataLoader samples/s")
    assert rate.value == round(facts["torch"]["samples_per_s"], 1)
    assert rate.samples == [round(v, 1) for v in facts["torch"]["samples_per_s_samples"]]
    assert rate.value == round(statistics.median(facts["torch"]["samples_per_s_samples"]), 1)
    assert any(m.name == "tf.data MB/s" for m in outcome.measurements)


def test_small_files_pattern_is_warn_with_the_remedy():
    facts, params = fixture("small_files")
    outcome = judge(facts, params)
    assert outcome.status is Status.WARN and finding_ids(outcome) == ["dataloader.throughput.small-files", "dataloader.throughput.no-demand"]
    assert "WebDataset" in outcome.remediation[0] and "TFRecord" in outcome.remediation[0]  # the remedy is its fix
    text = next(d for d in outcome.details if d.startswith("files:"))
    assert "p10" in text and "p90" in text


def test_small_files_thresholds_are_parameters():
    facts, params = fixture("small_files")
    params.small_files_count = facts["files"]["count"]  # "more than", so exactly this many is fine
    assert "dataloader.throughput.small-files" not in fired(judge(facts, params))
    assert "dataloader.throughput.small-files" in fired(judge(facts, CHECK.params_from({})))
    params = CHECK.params_from({})
    params.small_files_median_bytes = facts["files"]["median_bytes"]
    assert "dataloader.throughput.small-files" not in fired(judge(facts, params))


def fired(outcome) -> list[str]:
    return [f.id for f in outcome.findings if f.level is not Status.PASS]


def test_demand_met_with_margin_is_pass_and_states_the_percentage():
    facts, params = fixture("synthetic")
    supply = best_rate(facts)
    need = supply / (params.margin * 1.5)
    outcome = judge(with_demand(facts, need), params)
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    verdict = next(m for m in outcome.measurements if m.name.endswith("vs GPU demand"))
    assert verdict.unit == "%" and verdict.threshold == round(params.margin * 100, 1) and verdict.ok
    assert verdict.value == round(supply / need * 100, 1)


def test_demand_met_without_margin_is_warn():
    facts, params = fixture("synthetic")
    supply = best_rate(facts)
    outcome = judge(with_demand(facts, supply / ((1 + params.margin) / 2)), params)
    assert outcome.status is Status.WARN and finding_ids(outcome) == ["dataloader.throughput.below-margin"]


def test_demand_not_met_is_fail():
    facts, params = fixture("demand_from_scaling")
    outcome = judge(facts, params)
    supply, need = best_rate(facts), facts["scaling"]["training_samples_per_s"]
    assert supply < need
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["dataloader.throughput.below-demand"]
    verdict = next(m for m in outcome.measurements if m.name.endswith("vs GPU demand"))
    assert verdict.value == round(supply / need * 100, 1) and verdict.ok is False
    assert any(SCALING_CHECK in d for d in outcome.details)  # where the demand figure came from


def test_frameworks_the_team_uses_decide_which_loader_is_judged():
    facts, params = fixture("synthetic")
    torch_rate = facts["torch"]["samples_per_s"]
    tf_rate = facts["tensorflow"]["samples_per_s"]
    slow, fast = sorted([torch_rate, tf_rate])
    params.margin = 1.0
    demanded = with_demand(facts, (slow + fast) / 2)  # the faster loader keeps up, the slower does not
    slow_framework = "torch" if torch_rate < tf_rate else "tensorflow"
    fast_framework = "tensorflow" if slow_framework == "torch" else "torch"
    assert judge(demanded, params, Expect(frameworks=[fast_framework])).status is Status.PASS
    assert judge(demanded, params, Expect(frameworks=[slow_framework])).status is Status.FAIL
    assert judge(demanded, params).status is Status.PASS  # unspecified: the faster loader


def test_factory_dataset_has_no_file_facts_and_no_tf():
    facts, params = fixture("factory")
    outcome = judge(facts, params)
    assert fired(outcome) == ["dataloader.throughput.no-demand"]
    assert facts["files"] is None and facts["torch"]["mb_per_s"] is None
    assert any("tiny_dataset:make" in d for d in outcome.details)
    assert not any(m.name.startswith("tf.data") for m in outcome.measurements)


def test_tf_failure_is_warn_and_torch_still_judged():
    facts, params = fixture("synthetic")
    facts = copy.deepcopy(facts)
    facts["tensorflow"] = {"error": "the tf.data worker exited with -11 without a result"}
    outcome = judge(facts, params)
    assert outcome.status is Status.WARN and finding_ids(outcome) == ["dataloader.throughput.loader-failed", "dataloader.throughput.no-demand"]
    assert any(m.name == "torch DataLoader samples/s" for m in outcome.measurements)


def test_no_framework_is_skip_but_small_files_still_warn():
    facts, params = fixture("small_files")
    facts = copy.deepcopy(facts)
    facts["frameworks"] = {"torch": False, "tensorflow": False}
    facts["torch"] = facts["tensorflow"] = None
    assert judge(facts, params).status is Status.WARN
    facts["files"]["count"] = 10
    outcome = judge(facts, params)
    assert outcome.status is Status.SKIP and finding_ids(outcome) == ["dataloader.throughput.no-framework"]


def test_demand_sources_in_order():
    params = Params()
    earlier = {SCALING_CHECK: {"training_samples_per_s": 8000.0, "model": {"workload": "team.model:make"}}}
    assert demand_from(scaling_facts({}), params) is None
    assert demand_from(scaling_facts(earlier), params)["samples_per_s"] == 8000.0
    assert SCALING_CHECK in demand_from(scaling_facts(earlier), params)["source"]
    earlier[SCALING_CHECK]["training_devices"] = 8
    assert "on 8 devices" in demand_from(scaling_facts(earlier), params)["source"]
    assert demand_from({"training_samples_per_s": None}, params) is None
    cpu_only = {"training_samples_per_s": 8000.0, "device_kind": "cpu", "training_devices": 2}
    ignored = demand_from(cpu_only, params)
    assert ignored["samples_per_s"] is None and "CPU processes, not GPUs" in ignored["ignored"]
    params.required_samples_per_s_per_gpu = 400.0
    assert demand_from(scaling_facts(earlier), params, gpus=8)["samples_per_s"] == 3200.0
    assert demand_from(None, params)["samples_per_s"] is None  # per GPU, but no GPU count
    params.required_samples_per_s = 1234.0
    explicit = demand_from(scaling_facts(earlier), params)
    assert explicit == {"samples_per_s": 1234.0, "source": "dataloader.required_samples_per_s"}


def test_reference_model_rate_is_never_gpu_demand():
    # scaling.multi_gpu's reference model on the healthy 8x H100 fixture: ~2.1 million samples/s of a
    # 4096-float vector. As demand it would fail every loader on every GPU node ("feeds ~1%").
    scaling = json.loads((DATA.parent / "scaling" / "gpu_8x_h100_healthy_built.json").read_text())
    recorded = scaling.get("facts", scaling)
    assert recorded["training_samples_per_s"] > 1e6 and not (recorded.get("model") or {}).get("workload")
    facts, params = fixture("synthetic")
    facts = copy.deepcopy(facts)
    facts["scaling"] = scaling_facts({SCALING_CHECK: recorded})
    facts["gpu_count"] = 8
    outcome = judge(facts, params, Expect(gpus_per_node=8))
    no_demand(outcome)
    assert any("reference model" in d for d in outcome.details)
    # Stated per GPU in the loader's own samples, the same facts are judged.
    params.required_samples_per_s_per_gpu = best_rate(facts)  # x 8 GPUs: far more than the loader gives
    judged = judge(facts, params)
    assert judged.status is Status.FAIL and "dataloader.throughput.below-demand" in {f.id for f in judged.findings}
    supply = [m for m in judged.measurements if m.figure == "rate"]
    assert {(m.series, m.at) for m in supply} >= {("supply", "torch DataLoader"), ("demand", "torch DataLoader"),
                                                  ("supply", "tf.data"), ("demand", "tf.data")}


def test_facts_of_older_runs_with_a_reference_model_demand_are_not_judged_by_it():
    facts, params = fixture("synthetic")
    facts = copy.deepcopy(facts)
    facts["demand"] = {"samples_per_s": 2126046.0, "source": f"{SCALING_CHECK} (training throughput measured on this node)"}
    assert fired(judge(facts, params)) == ["dataloader.throughput.no-demand"]  # not below-demand


def test_tf_data_worker_runs_with_the_gpus_hidden(tmp_path):
    # tensorflow reserves nearly all memory of every GPU it sees; the loader's worker must see none.
    import subprocess

    from preflight_checks.dataloader.throughput import measure_tensorflow

    class Ctx:
        def time_left(self):
            return 100.0

        def run(self, argv, timeout, env=None):
            self.env = env
            stdout = json.dumps({"tensorflow": "2.21.0", "gpus_hidden": True,
                                 "passes": [{"pass": 0, "samples": 64, "bytes": 640, "seconds": 0.5}]})
            return subprocess.CompletedProcess(argv, 0, stdout + "\n", "")

    ctx = Ctx()
    result = measure_tensorflow(ctx, ["a", "b"], Params(), False, tmp_path)
    assert ctx.env["CUDA_VISIBLE_DEVICES"] == "" and result["gpus_hidden"] is True
    assert result["samples_per_s"] == 128.0


def test_tf_data_worker_hides_the_gpus_itself():
    pytest.importorskip("tensorflow")
    import os
    import subprocess
    import sys

    code = "import tensorflow as tf; from preflight.workers.dataloader_tf import hide_gpus; print(hide_gpus(tf))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"


def test_percentiles_and_distribution():
    assert percentile([], 0.5) is None
    assert percentile([5], 0.1) == 5
    values = list(range(1, 11))
    assert percentile(values, 0.5) == 5 and percentile(values, 0.1) == 1 and percentile(values, 0.9) == 9
    dist = size_distribution([30, 10, 20])
    assert dist == {"count": 3, "total_bytes": 60, "median_bytes": 20, "p10_bytes": 10, "p90_bytes": 30}


@pytest.mark.parametrize("spec, words", [
    ("no_colon_here", "is not of the form"),
    ("module_that_does_not_exist_xyz:make", "cannot import module 'module_that_does_not_exist_xyz'"),
    ("tiny_dataset:nothing", "has no attribute 'nothing'"),
    ("tiny_dataset:NOT_CALLABLE", "is not callable"),
    ("tiny_dataset:broken", "the factory raised RuntimeError: the dataset index file is missing"),
])
def test_bad_factories_are_explained(monkeypatch, spec, words):
    monkeypatch.syspath_prepend(str(DATA))
    with pytest.raises(CannotMeasure) as raised:
        load_factory(spec, None)
    assert words in str(raised.value)


def test_factory_returning_something_else_is_explained(monkeypatch):
    monkeypatch.syspath_prepend(str(DATA))
    with pytest.raises(CannotMeasure, match="not a map-style Dataset"):
        load_factory("builtins:object", None)
    with pytest.raises(CannotMeasure, match="empty dataset"):
        load_factory("tiny_dataset:make", {"count": 0})
    assert len(load_factory("tiny_dataset:make", {"count": 5})) == 5


def test_cpu_only_scaling_figure_is_not_taken_as_gpu_demand():
    facts, params = fixture("synthetic")
    facts = copy.deepcopy(facts)
    facts["scaling"] = {"training_samples_per_s": 1e9, "device_kind": "cpu"}
    outcome = judge(facts, params)
    no_demand(outcome)
    assert any("timed CPU processes, not GPUs" in d for d in outcome.details)


def test_without_any_framework_collect_writes_nothing_and_the_check_skips(tmp_path, monkeypatch):
    """A machine with neither torch nor tensorflow (nor numpy): SKIP with the reason, never a crash."""
    import sys

    from preflight.core.check import Expect
    from preflight.engine.context import NodeContext
    from preflight.core.model import Status
    from preflight_checks.dataloader.throughput import DataloaderThroughput, Params

    from preflight_checks.dataloader import throughput

    monkeypatch.setattr(throughput, "installed", lambda name: name not in ("torch", "tensorflow"))
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` now raises ImportError
    ctx = NodeContext(node="n1", output_dir=tmp_path, scratch_dir=tmp_path / "scratch", expect=Expect(), timeout_s=60)
    check = DataloaderThroughput()
    facts = check.collect(ctx, Params())
    outcome = check.evaluate(facts, Params(), Expect())
    assert outcome.status is Status.SKIP and finding_ids(outcome) == ["dataloader.throughput.no-framework"]
    assert not (tmp_path / "scratch").exists() or not any((tmp_path / "scratch").rglob("*"))


def test_a_skipped_check_describes_no_dataset_it_never_wrote(tmp_path, monkeypatch):
    """No framework, so no synthetic dataset was written: no 'None files of None' line in the details."""
    import sys

    from preflight.core.check import Expect
    from preflight.engine.context import NodeContext
    from preflight_checks.dataloader.throughput import DataloaderThroughput, Params

    from preflight_checks.dataloader import throughput

    monkeypatch.setattr(throughput, "installed", lambda name: name not in ("torch", "tensorflow"))
    monkeypatch.setitem(sys.modules, "numpy", None)
    ctx = NodeContext(node="n1", output_dir=tmp_path, scratch_dir=tmp_path / "scratch", expect=Expect(), timeout_s=60)
    check = DataloaderThroughput()
    outcome = check.evaluate(check.collect(ctx, Params()), Params(), Expect())
    assert not any("None" in line for line in [outcome.summary, *outcome.details])
