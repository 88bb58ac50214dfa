"""Never NO-GO on one all-node reading: when the whole cluster is measured again, and what the readings say."""

from preflight.launch.recheck import (
    CONFIRMED, INTERMITTENT, NOT_RUN, RECHECKS, TRANSIENT, UNCONFIRMED, judge_readings, readings_of, recheck_wanted,
    take_rechecks,
)


def attribution(kind: str, confidence: str = "confirmed", ambiguous: bool = False) -> dict:
    return {"kind": kind, "members": ["n1"], "confidence": confidence, "ambiguous": ambiguous}


def test_only_a_pass_that_ran_to_its_end_and_blamed_nothing_asks_for_another_reading():
    assert recheck_wanted({"attributions": [], "round_count": 3})
    assert recheck_wanted({"attributions": [attribution("node", "unconfirmed")]})  # a suspect blames nothing
    assert recheck_wanted({"attributions": [attribution("straggler")]})  # slow, but not what missed the floor
    assert not recheck_wanted({"attributions": [attribution("node")]})  # confirmed: the groups reproduced it
    assert not recheck_wanted({"attributions": [attribution("unexplained", "unconfirmed", ambiguous=True)]})
    assert not recheck_wanted({"attributions": [], "stopped": "the time is up"})
    assert not recheck_wanted(None) and not recheck_wanted({})


def test_every_reading_below_confirms_most_above_makes_it_a_transient_none_leaves_one_reading():
    assert judge_readings([False] * RECHECKS).outcome == CONFIRMED
    assert judge_readings([False] * RECHECKS).text == f"below its floor in {RECHECKS + 1} of {RECHECKS + 1} all-node readings"
    transient = judge_readings([True])
    assert transient.outcome == TRANSIENT and (transient.below, transient.taken) == (1, 2)
    assert judge_readings([True, True]).outcome == TRANSIENT
    unconfirmed = judge_readings([None], "the launch failed")
    assert unconfirmed.outcome == UNCONFIRMED and "the launch failed" in unconfirmed.text
    assert judge_readings([]).outcome == UNCONFIRMED


def test_below_the_floor_in_two_of_three_readings_or_far_below_it_once_is_intermittent_not_go():
    # a flapping link: below, above, below; or below, below, above: NO-GO, not a transient
    assert judge_readings([True, False]).outcome == INTERMITTENT
    assert judge_readings([False, True]).outcome == INTERMITTENT
    far = judge_readings([True, True], far=True)
    assert far.outcome == INTERMITTENT and "under 50% of it" in far.text
    rechecks = [{"value": 9}, {"value": 1}]
    assert readings_of(rechecks, lambda r: r["value"] > 5).outcome == INTERMITTENT
    assert readings_of(rechecks[:1] * 2, lambda r: r["value"] > 5).outcome == TRANSIENT
    assert readings_of(rechecks[:1] * 2, lambda r: r["value"] > 5, first_far=True).outcome == INTERMITTENT
    assert readings_of([{"value": 9}, {"value": 2}], lambda r: r["value"] > 5,
                       far=lambda r: r["value"] < 2.5).far


def test_every_recheck_is_taken_unless_time_runs_out():
    # a reading that meets the floor between two below it is no transient: none stops the rechecks
    readings = iter([{"value": 9}, {"value": 1}, {"value": 9}])
    taken = take_rechecks(lambda: next(readings), lambda r: r["value"] > 5, lambda: 100.0, 10.0)
    assert [r["value"] for r in taken] == [9, 1, 9][:RECHECKS]
    left = iter([100.0, 5.0])
    short = take_rechecks(lambda: {"value": 1}, lambda r: r["value"] > 5, lambda: next(left), 10.0)
    assert short[0] == {"value": 1} and NOT_RUN in short[-1]
    assert readings_of(short, lambda r: r["value"] > 5).outcome == CONFIRMED  # 2 of 2 below: more than one reading
    assert readings_of([{NOT_RUN: "no time"}], lambda r: True).outcome == UNCONFIRMED
