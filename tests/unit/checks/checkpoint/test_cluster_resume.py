"""checkpoint.cluster_resume judged from facts recorded on the namespace test bed
(tests/cluster/record_resume_data.py), and from those facts changed the way each fault changes them."""

from __future__ import annotations

import copy
import json

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.checkpoint.cluster_resume import CheckpointClusterResume, victim
from preflight_checks.checkpoint.cluster_params import Params
from preflight_checks.checkpoint.interval import DEFAULT_FAILURES_PER_NODE_DAY, plan, sentence
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "checkpoint_cluster_resume"
check = CheckpointClusterResume()
PREFIX = "checkpoint.cluster_resume."


def recorded(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def judge(facts: dict, **params):
    return check.evaluate(facts, Params(dir=facts.get("dir"), **params), Expect())


def kinds(outcome) -> list[str]:
    return [i.removeprefix(PREFIX) for i in finding_ids(outcome)]


def figures(outcome) -> dict:
    return {m.name: m.value for m in outcome.measurements}


def test_a_lost_node_that_resumes_exactly_passes_with_its_figures():
    outcome = judge(recorded("lost-n2"))
    assert outcome.status is Status.PASS, outcome.summary
    seen = figures(outcome)
    assert seen["final weights equal an uninterrupted run"] == "yes"
    assert seen["steps lost"] == 5
    assert 0 < seen["failure noticed after"] < seen["resume after failure"]
    assert seen["checkpoint save across nodes"] > 0 and seen["checkpoint load across nodes"] > 0
    assert "checkpoint every" in outcome.summary and "interruptions expected" in outcome.summary


def test_no_elastic_restart_is_its_own_finding():
    assert kinds(judge(recorded("no-restart"))) == ["no-restart"]


def test_a_save_cut_short_and_loaded_is_a_torn_checkpoint():
    outcome = judge(recorded("torn"))
    assert "torn-checkpoint" in kinds(outcome) and outcome.status is Status.FAIL


def test_a_directory_each_node_sees_on_its_own_is_named():
    found = kinds(judge(recorded("not-shared")))
    assert "not-shared" in found and "resume-step-differs" in found


def test_a_job_still_waiting_at_the_deadline_never_noticed():
    facts = recorded("no-restart")
    for agent in facts["agents"].values():
        agent.update(killed=True, returncode=None)
    facts["events"] = [e for e in facts["events"] if e.get("ok") is not False]
    assert kinds(judge(facts)) == ["never-noticed"]


def test_final_weights_that_differ_fail():
    facts = recorded("lost-n2")
    result = next(e for e in facts["events"] if e.get("ok") is True)
    result["reference_digest"] = "0" * 64
    assert kinds(judge(facts)) == ["weights-differ"]


def test_a_restart_that_trains_again_from_zero_fails():
    facts = recorded("lost-n2")
    kill_t = next(e["t"] for e in facts["events"] if e.get("event") == "kill")
    for e in facts["events"]:
        if e.get("event") in ("resume", "resumed") and e["t"] > kill_t:
            e.update(step=0, complete=False, path="")
    assert "from-zero" in kinds(judge(facts))


def test_ranks_that_resume_from_different_steps_fail():
    facts = recorded("lost-n2")
    kill_t = next(e["t"] for e in facts["events"] if e.get("event") == "kill")
    last = [e for e in facts["events"] if e.get("event") == "resume" and e["t"] > kill_t][-1]
    last.update(step=0, complete=False, path="")
    assert "resume-step-differs" in kinds(judge(facts))


def test_a_resume_slower_than_its_budget_warns_and_judged_again_passes():
    facts = recorded("lost-n2")
    resume_s = figures(judge(facts))["resume after failure"]
    assert kinds(judge(facts, max_resume_s=resume_s / 2)) == ["slow-resume"]
    assert judge(facts, max_resume_s=resume_s * 2).status is Status.PASS


def test_a_kill_never_reached_is_error():
    facts = recorded("lost-n2")
    facts["events"] = [e for e in facts["events"] if e.get("event") == "start"]
    assert kinds(judge(facts)) == ["kill-not-reached"]


def test_a_restart_that_does_not_finish_fails():
    facts = recorded("lost-n2")
    facts["events"] = [e for e in facts["events"] if e.get("ok") is not True]
    assert kinds(judge(facts)) == ["resume-failed"]


def test_without_a_directory_it_skips_and_one_node_skips():
    assert kinds(judge({"nodes": ["a", "b"], "dir": None})) == ["no-dir"]
    assert kinds(judge({"nodes": ["a"], "unreachable": [], "dir": "/ckpt"})) == ["one-node"]


def test_the_node_to_lose():
    assert victim(["a", "b", "c"], "first") == "a" and victim(["a", "b", "c"], "last") == "c"
    assert victim(["a", "b"], "b") == "b" and victim(["a", "b"], "z") is None


def test_the_young_daly_interval_and_the_losses_of_a_planned_job():
    # 128 nodes at Llama 3's rate: one interruption every ~49 h; a 60 s save gives sqrt(2 x 60 x MTBF) - 60.
    p = plan(save_s=60.0, restart_s=300.0, failures_per_node_day=DEFAULT_FAILURES_PER_NODE_DAY, nodes=128, days=30)
    mtbf_s = 86400 / (DEFAULT_FAILURES_PER_NODE_DAY * 128)
    assert p["interval_min"] == pytest.approx(((2 * 60 * mtbf_s) ** 0.5 - 60) / 60)
    assert p["interruptions"] == pytest.approx(DEFAULT_FAILURES_PER_NODE_DAY * 128 * 30)
    text = sentence(p)
    assert text.startswith("a 30-day job on 128 nodes: about 15 interruptions expected; checkpoint every 76 min")
    # A longer save makes a longer interval and a larger loss.
    longer = plan(save_s=240.0, restart_s=300.0, failures_per_node_day=DEFAULT_FAILURES_PER_NODE_DAY, nodes=128,
                  days=30)
    assert longer["interval_min"] > p["interval_min"] and longer["lost_fraction"] > p["lost_fraction"]


def test_the_job_settings_reach_the_plan():
    facts = recorded("lost-n2")
    outcome = judge(facts, job_nodes=1024, job_days=60, job_checkpoint_gb=500.0)
    assert "a 60-day job on 1024 nodes" in outcome.summary
    assert figures(outcome)["interruptions expected"] == pytest.approx(DEFAULT_FAILURES_PER_NODE_DAY * 1024 * 60,
                                                                      rel=1e-2)


def test_the_level_declarations():
    assert "skip" in check.levels["quick"] and "standard" not in check.levels


def test_recorded_facts_are_not_changed_by_judging():
    facts = recorded("lost-n2")
    before = copy.deepcopy(facts)
    judge(facts)
    assert facts == before


def tf_starts(facts: dict) -> tuple[list, list]:
    first, second = facts["tensorflow"]["starts"]
    return first["events"], second["events"]


def test_tensorflow_resumes_from_backup_and_restore_and_ends_equal():
    facts = recorded("tensorflow")
    outcome = judge(facts)
    assert outcome.status is Status.PASS, outcome.summary
    seen = figures(outcome)
    assert seen["TensorFlow final weights equal an uninterrupted run"] == "yes"
    assert seen["TensorFlow failure noticed after"] > 0


def test_tensorflow_findings_from_the_recorded_run_changed():
    facts = recorded("tensorflow")
    _, second = tf_starts(facts)
    next(e for e in second if e.get("ok") is True)["reference_digest"] = "0" * 64
    assert kinds(judge(facts)) == ["tensorflow-weights-differ"]
    facts = recorded("tensorflow")
    _, second = tf_starts(facts)
    for e in second:
        if e.get("event") == "epoch-begin":
            e["epoch"] -= 3  # the restart began at epoch 0: nothing was restored
    assert "tensorflow-from-zero" in kinds(judge(facts))
    facts = recorded("tensorflow")
    for agent in facts["tensorflow"]["starts"][0]["agents"].values():
        agent["killed"] = True
    assert kinds(judge(facts)) == ["tensorflow-never-noticed"]
    facts = recorded("tensorflow")
    facts["tensorflow"]["starts"][1]["events"] = [e for e in tf_starts(facts)[1] if e.get("ok") is not True]
    assert kinds(judge(facts)) == ["tensorflow-failed"]


def test_without_tf_keras_the_tensorflow_part_says_why_and_blocks_nothing():
    facts = recorded("lost-n2")
    reason = "Keras 3 (tf.keras in TensorFlow 2.16 and later) does not run model.fit under MultiWorkerMirroredStrategy"
    facts["tensorflow"] = {"starts": [{"events": [{"skip": reason, "from": "n1"}], "agents": {}}]}
    outcome = judge(facts)
    assert outcome.status is Status.PASS
    assert any(reason in d for d in outcome.details)


def test_tensorflow_that_could_not_start_or_never_reached_the_loss_is_error():
    facts = recorded("tensorflow")
    facts["tensorflow"] = {"error": "no free port for a TensorFlow worker on n1"}
    outcome = judge(facts)
    assert kinds(outcome) == ["tensorflow-failed"]
    assert outcome.status is Status.ERROR
    facts = recorded("tensorflow")
    first = facts["tensorflow"]["starts"][0]
    first["events"] = [e for e in first["events"] if e.get("event") != "kill"]
    outcome = judge(facts)
    assert kinds(outcome) == ["tensorflow-failed"]
    assert outcome.status is Status.ERROR


def test_tensorflow_without_a_noticed_failure_or_epoch_begins_still_judges_the_digest():
    facts = recorded("tensorflow")
    first, second = facts["tensorflow"]["starts"]
    first["events"] = [e for e in first["events"] if e.get("ok") is not False]
    second["events"] = [e for e in second["events"] if e.get("event") != "epoch-begin"]
    outcome = judge(facts)
    seen = figures(outcome)
    assert "TensorFlow failure noticed after" not in seen
    assert seen["TensorFlow final weights equal an uninterrupted run"] == "yes"
    assert not any("resumed at epoch" in d for d in outcome.details)


def test_a_resume_without_notice_or_resumed_events_still_judges_the_result():
    facts = recorded("lost-n2")
    kill_t = min(e["t"] for e in facts["events"] if e.get("event") == "kill")
    # Drop every sign of the failure being noticed but the restart itself, and every "resumed" event.
    facts["events"] = [e for e in facts["events"]
                       if not (e.get("t", 0) > kill_t and e.get("ok") is False) and e.get("event") != "resumed"]
    starts = [e for e in facts["events"] if e.get("event") == "start" and e["t"] > kill_t]
    assert starts
    outcome = judge(facts)
    seen = figures(outcome)
    assert "resume after failure" not in seen and "steps lost" not in seen
    assert seen["final weights equal an uninterrupted run"] == "yes"


def test_without_saved_events_there_is_no_save_figure_and_no_interval():
    facts = recorded("lost-n2")
    facts["events"] = [e for e in facts["events"] if e.get("event") != "saved"]
    outcome = judge(facts)
    seen = figures(outcome)
    assert "checkpoint save across nodes" not in seen and "checkpoint interval (Young/Daly)" not in seen
    assert "final weights equal an uninterrupted run" in seen
