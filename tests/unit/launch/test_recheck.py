"""Never NO-GO on one all-node reading: when the whole cluster is measured again, and what the readings say."""

from preflight.core.check import Check as BaseCheck
from preflight.core.model import Status
from preflight.launch.recheck import (
    AGAIN_FAILED, AGAIN_OF, CONFIRMED, DROP_OUT, FIRST_AGAIN, INTERMITTENT, INTERMITTENT_FIX, MARGINAL, MET, NOT_RUN,
    RECHECKS, SECOND_LOOK, TRANSIENT, UNCONFIRMED, WATCH, WATCHING, judge_readings, judged_by_readings, later_findings, measurements, readings_line, readings_of,
    lone_far, recheck_wanted, take_readings, TRANSIENT_FIX,
)


class Check(BaseCheck):
    id = "check"
    fixes = {"intermittent": INTERMITTENT_FIX, "transient": TRANSIENT_FIX, "shortfall": "Measure again."}


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


def test_below_the_floor_in_two_of_three_readings_dropped_out_once_or_far_below_beside_another_is_intermittent():
    # a flapping link: below, above, below; or below, below, above: NO-GO, not a transient
    assert judge_readings([True, False]).outcome == INTERMITTENT
    assert judge_readings([False, True]).outcome == INTERMITTENT
    # one reading far below the floor and no other below it: one burst of heavy-tailed noise, a transient
    alone = judge_readings([True, True], far=True)
    assert alone.outcome == TRANSIENT
    assert alone.text == "below its floor in 1 of 3 all-node readings, one of them under 50% of it, and no other " \
        "below it (one burst)"
    # far below beside another reading below it, or a watch reading below it: a part that fails reads bad again
    assert judge_readings([True, True, False]).outcome == TRANSIENT  # 2 of 4: the median met the floor
    assert judge_readings([True, True, False], far=True).outcome == INTERMITTENT
    beside_watch = judge_readings([True, True], far=True, watched=2, watch_below=1)
    assert beside_watch.outcome == INTERMITTENT and "2 more taken at once, 1 below it but none under 25%" \
        in beside_watch.text and "one burst" not in beside_watch.text
    # dropped out once (under a quarter of the floor), which no burst of noise nor slowdown gives: NO-GO
    dropped = judge_readings([True, True], far=True, dropped=True)
    assert dropped.outcome == INTERMITTENT and "one of them under 25% of it (a part dropped out)" in dropped.text
    rechecks = [{"value": 9}, {"value": 1}]
    met = lambda r: r["value"] > 5  # noqa: E731
    assert readings_of(rechecks, met).outcome == INTERMITTENT
    assert readings_of(rechecks[:1] * 2, met).outcome == TRANSIENT
    # the first reading is read by `far` and `out` as the others are
    far, out = (lambda r: r["value"] < 2.5), (lambda r: r["value"] < 1.25)
    assert readings_of(rechecks[:1] * 2, met, far=far, first={"value": 2}, out=out).outcome == TRANSIENT
    first_out = readings_of(rechecks[:1] * 2, met, far=far, first={"value": 1}, out=out)
    assert first_out.outcome == INTERMITTENT and first_out.dropped
    assert readings_of([{"value": 9}, {"value": 2}], met, far=far).far
    beside = [{"value": 9}, {"value": 9}, {"value": 2}]  # 2 of 4 below: far below beside the first
    assert readings_of(beside, met, far=far, first={"value": 4}).outcome == INTERMITTENT
    assert readings_of(beside, met, far=far, first={"value": 6}, first_below=False).outcome == TRANSIENT


def test_every_reading_is_taken_unless_time_runs_out():
    # a reading that meets the floor between two below it is no transient: none stops the readings
    fleet = Fleet([False, True, False])
    _, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"],
                             lambda: 100.0, 10.0)
    assert [r["met"] for r in later] == [True, False][:RECHECKS]
    fleet, left = Fleet([False, False]), iter([100.0, 5.0])
    _, short = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"],
                             lambda: next(left), 10.0)
    assert short[0] == {"met": False} and NOT_RUN in short[-1]
    assert readings_of(short, lambda r: r["met"]).outcome == CONFIRMED  # 2 of 2 below: more than one reading
    assert readings_of([{NOT_RUN: "no time"}], lambda r: True).outcome == UNCONFIRMED


class Fleet:
    """All-node readings in order (True: met the floor), and the passes run from them."""

    def __init__(self, readings: list[bool], pinned: bool = False) -> None:
        self.readings, self.pinned, self.passes = iter(readings), pinned, []

    def measure(self) -> dict:
        return {"met": next(self.readings)}

    def isolate(self, reading: dict) -> dict | None:
        if reading["met"]:
            return None
        self.passes.append(reading)
        return {"isolation": {"attributions": [attribution("node")] if self.pinned else []}}


def test_a_first_reading_that_meets_the_floor_is_not_go_until_a_second_one_does():
    fleet = Fleet([True, True])
    found, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"],
                                 lambda: 100.0, 10.0)
    assert found is None and later == [{"met": True}] and not fleet.passes
    readings = readings_of(later, lambda r: r["met"], first_below=False)
    assert readings.outcome == MET and readings_line(readings) == "met its floor in 2 of 2 all-node readings"
    assert later_findings(Check, readings) == []


class Drops(Fleet):
    """All-node figures in order, against a floor of 1.0: a drop-out is under DROP_OUT of it."""

    def measure(self) -> dict:
        value = next(self.readings)
        return {"met": value >= 1.0, "value": value}


def watch(fleet: Drops, left=lambda: 100.0, look: bool = False) -> tuple:
    first = fleet.measure()
    return take_readings(first, fleet.isolate, fleet.measure, lambda r: not r["met"], left, 10.0,
                         dropped_out=lambda r: r["value"] < DROP_OUT,
                         far_below=(lambda r: r["value"] < 0.5) if look else None)


def judge(later: list) -> object:
    return readings_of(later, lambda r: r["met"], far=lambda r: r["value"] < 0.5, first_below=False,
                       out=lambda r: r["value"] < DROP_OUT)


def test_after_two_readings_over_the_floor_two_watch_readings_count_only_when_a_part_drops_out():
    # a flapping link reads over the floor in both readings one run in four: two more at once, each
    # counted only under a quarter of the floor, which no slowdown gives
    fleet = Drops([1.2, 1.1, 1.15, 1.3])
    found, later = watch(fleet)
    assert found is None and len(later) == 1 + WATCH and [r.get(WATCHING) for r in later] == [None, True, True]
    readings = judge(later)
    assert readings.outcome == MET and (readings.below, readings.taken, readings.watched) == (0, 2, 2)
    assert readings_line(readings) == ("met its floor in 2 of 2 all-node readings; 2 more taken at once, none under "
                                       "25% of it (no part dropped out)")
    # a watch reading merely below the floor shares the second's slowdown: not counted, no pass
    fleet = Drops([1.2, 1.1, 0.7, 1.1])
    found, later = watch(fleet)
    assert found is None and not fleet.passes and judge(later).outcome == MET
    # one that drops out ends the watch, runs the pass from it, and the run is intermittent: NO-GO
    fleet = Drops([1.2, 1.1, 0.13, 1.1])
    found, later = watch(fleet)
    assert found is not None and len(fleet.passes) == 1 and len(later) == 2
    readings = judge(later)
    assert readings.outcome == INTERMITTENT and (readings.below, readings.taken, readings.dropped) == (1, 3, True)
    (finding,) = later_findings(Check, readings)
    assert finding.id == "check.intermittent" and finding.level is Status.FAIL
    # a watch reading that dropped out counts, though another part of it could not be measured (a ring
    # with a failed link besides the one that dropped out: met is None); one merely not measured does not
    partly = [later[0], {**later[1], "met": None}]
    assert readings_of(partly, lambda r: r["met"], first_below=False, out=lambda r: r["value"] < DROP_OUT).outcome \
        == INTERMITTENT
    failed = [later[0], {"met": None, "value": None, WATCHING: True}]
    readings = readings_of(failed, lambda r: r["met"], first_below=False, out=lambda r: False)
    assert readings.outcome == MET and readings.watched == 0


def test_no_watch_after_a_pass_from_a_first_reading_below_the_floor_nor_without_a_drop_out_test_or_time():
    # the first below the floor and the pass pinning nothing: two more readings spaced by the pass, no watch
    fleet = Drops([0.7, 1.1, 1.2])
    _, later = watch(fleet)
    assert len(later) == RECHECKS and not any(r.get(WATCHING) for r in later)
    # a check that gives no drop-out test takes none; nor is one taken when the time is up
    fleet = Drops([1.2, 1.1])
    _, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"], lambda: 100.0, 10.0)
    assert len(later) == 1
    left = iter([100.0, 100.0, 5.0])
    _, later = watch(Drops([1.2, 1.1, 1.3]), lambda: next(left))
    assert len(later) == 2 and later[1][WATCHING] and judge(later).watched == 1
    # a second reading below the floor, a pass from it, then the watch: 1 of 2 below stays a transient
    fleet = Drops([1.2, 0.7, 1.1, 1.1])
    found, later = watch(fleet)
    assert found is not None and len(later) == 3 and judge(later).outcome == TRANSIENT
    # far below it (not dropped out): a transient alone, intermittent with a watch reading below the floor
    assert judge(watch(Drops([1.2, 0.3, 1.1, 1.1]))[1]).outcome == TRANSIENT
    readings = judge(watch(Drops([1.2, 0.3, 0.7, 1.1]))[1])
    assert readings.outcome == INTERMITTENT and (readings.below, readings.watch_below) == (1, 1)


def test_one_reading_far_below_the_floor_alone_gets_a_second_look_until_another_is_below_it():
    # good, then far below (0.3: under half the floor, not dropped out), two watch readings over it: one
    # burst, or a flapping node's bad one. Up to two more at once, counted as watch readings are
    fleet = Drops([1.2, 0.3, 1.1, 1.1, 0.7, 1.2])
    found, later = watch(fleet, look=True)
    assert [r["value"] for r in later] == [0.3, 1.1, 1.1, 0.7] and all(r.get(WATCHING) for r in later[1:])
    readings = judge(later)  # the second look below the floor backs the far one: intermittent
    assert readings.outcome == INTERMITTENT and (readings.below, readings.taken, readings.watch_below) == (1, 2, 1)
    assert found is not None and len(fleet.passes) == 1  # the pass ran from the far one, not again
    fleet = Drops([1.2, 0.3, 1.1, 1.1, 1.2, 1.15])
    _, later = watch(fleet, look=True)
    readings = judge(later)  # both looks over the floor: one burst, a transient
    assert len(later) == 1 + WATCH + SECOND_LOOK and readings.outcome == TRANSIENT and readings.watched == 4
    assert "4 more taken at once, none under 25% of it" in readings.text
    # no second look without the test, nor where the far reading is backed or a reading dropped out
    assert len(watch(Drops([1.2, 0.3, 1.1, 1.1]))[1]) == 1 + WATCH
    assert len(watch(Drops([1.2, 0.3, 0.7, 1.1]), look=True)[1]) == 1 + WATCH
    assert len(watch(Drops([1.2, 0.3, 0.1]), look=True)[1]) == 2
    # the first far below, the pass from it, two more spaced by it, both over: a second look too
    fleet = Drops([0.3, 1.1, 1.2, 0.9])
    found, later = watch(fleet, look=True)
    assert [r["value"] for r in later] == [1.1, 1.2, 0.9] and later[-1][WATCHING]


def test_a_first_reading_measured_again_at_once_stands_as_one_reading_for_the_second_look():
    def lone(first: float, *later: dict) -> bool:
        return lone_far([{"value": first}, *later], lambda r: r["value"] < 1.0, lambda r: r["value"] is not None,
                        lambda r: r["value"] < 0.5, lambda r: r["value"] < DROP_OUT)

    good = {"value": 1.1}
    # just under the floor, then far under it measured again at once: one reading, alone below the floor
    assert lone(0.9, {"value": 0.3, FIRST_AGAIN: True}, good, good)
    # just under it, over it measured again at once, then one far below: alone too
    assert lone(0.9, {"value": 1.05, FIRST_AGAIN: True}, {"value": 0.3}, good)
    # a measurement again that failed leaves the first as taken: just under it, and not far, beside a far one
    assert not lone(0.9, {"value": None, FIRST_AGAIN: True}, {"value": 0.3}, good)
    # backed by another below the floor, a watch reading too, or dropped out: no second look
    assert not lone(1.1, {"value": 0.3}, {"value": 0.8, WATCHING: True})
    assert not lone(1.1, {"value": 0.2}, good)
    assert lone(1.1, {"value": 0.3}, {NOT_RUN: "no time"})  # a reading not taken is neither


def test_a_second_reading_below_the_floor_runs_the_pass_from_it_and_is_judged_with_the_first():
    # a flapping link: good, then dropped out: the pass runs from the second and pins nothing; NO-GO,
    # intermittent. No third reading: right after a short pass it would share the second's slowdown
    fleet = Fleet([True, False, False])
    found, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"],
                                 lambda: 100.0, 10.0)
    assert found is not None and len(fleet.passes) == 1 and [r["met"] for r in later] == [False]
    out = readings_of(later, lambda r: r["met"], far=lambda r: True, first_below=False, out=lambda r: True)
    assert out.outcome == INTERMITTENT and (out.below, out.taken) == (1, 2)
    # far below, but not dropped out, and no other reading below it: one burst, a transient WARN
    far = readings_of(later, lambda r: r["met"], far=lambda r: True, first_below=False)
    assert far.outcome == TRANSIENT and later_findings(Check, far)[0].id == "check.transient"
    (finding,) = later_findings(Check, out, "then 1.0")
    assert finding.id == "check.intermittent" and finding.level is Status.FAIL
    assert "met its floor first, then fell below it" in finding.message
    # below, not far: a transient, a WARN
    (warn,) = later_findings(Check, readings_of(later, lambda r: r["met"], first_below=False))
    assert warn.id == "check.transient" and warn.level is Status.WARN
    # the first below the floor and the pass pinning nothing: two more readings, the median decides
    fleet = Fleet([False, True, False])
    _, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"],
                             lambda: 100.0, 10.0)
    assert [r["met"] for r in later] == [True, False]
    assert readings_of(later, lambda r: r["met"]).outcome == INTERMITTENT


def test_a_pass_that_pins_the_fault_ends_the_readings_and_no_time_leaves_one_reading():
    fleet = Fleet([False], pinned=True)
    found, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"],
                                 lambda: 100.0, 10.0)
    assert found and later == []
    fleet = Fleet([True])
    _, later = take_readings(fleet.measure(), fleet.isolate, fleet.measure, lambda r: not r["met"], lambda: 5.0, 10.0)
    assert NOT_RUN in later[0]
    readings = readings_of(later, lambda r: r["met"], first_below=False)
    assert readings.outcome == MET and "one reading" in readings_line(readings)


def test_a_first_reading_that_failed_is_not_measured_again():
    # the run failed (a node never joined): not a GO, and a second launch would wait as long again
    fleet = Fleet([True])
    found, later = take_readings({"met": False, "failed": True}, lambda r: None, fleet.measure,
                                 lambda r: False, lambda: 100.0, 10.0, measured=lambda r: not r.get("failed"))
    assert found is None and later == []


class Figures(Fleet):
    """All-node readings as figures against a floor of 1.0 (under 0.85: deep below it)."""

    def __init__(self, figures: list[float]) -> None:
        super().__init__([])
        self.figures = iter(figures)

    def measure(self) -> dict:
        figure = next(self.figures)
        return {"met": figure >= 1.0, "figure": figure}


def readings_with(fleet: Figures, first: dict) -> tuple:
    return take_readings(first, fleet.isolate, fleet.measure, lambda r: not r["met"], lambda: 100.0, 10.0,
                         deep_below=lambda r: r["figure"] < MARGINAL)


def test_a_first_reading_just_under_its_floor_is_measured_again_at_once_and_no_pass_runs_when_that_meets_it():
    # one heavy-tailed burst 5% under the floor: measured again at once, over it; no pass, one more
    # reading at the end: a transient WARN, never a NO-GO and never a PASS that hides the dip
    fleet = Figures([1.05, 1.1])
    found, later = readings_with(fleet, {"met": False, "figure": 0.95})
    assert found is None and not fleet.passes
    assert [r["figure"] for r in later] == [1.05, 1.1] and later[0][FIRST_AGAIN] and measurements(later) == 2
    readings = readings_of(later, lambda r: r["met"])
    assert readings.outcome == MET and readings.again and not readings.first_below and readings.taken == 2
    shortfall = Check.finding("shortfall", Status.FAIL, "all-node figure 0.95, under its floor of 1.0")
    (warn,) = judged_by_readings(Check, [shortfall], ("shortfall",), readings)
    assert warn.id == "check.transient" and warn.level is Status.WARN
    assert "just under its floor and over it when measured again at once" in warn.message
    assert readings_line(readings) == "" and later_findings(Check, readings) == []
    # measured again and under the floor again: the first reading stands, the pass runs from it
    fleet = Figures([0.96, 1.1, 0.97, 0.99])
    found, later = readings_with(fleet, {"met": False, "figure": 0.95})
    assert found is not None and len(fleet.passes) == 1 and fleet.passes[0]["figure"] == 0.95
    assert measurements(later) == 3 + 1  # the second look, then two readings, the last measured again at once
    assert later[-1][AGAIN_OF]["figure"] == 0.97 and later[-1]["figure"] == 0.99
    assert readings_of(later, lambda r: r["met"]).outcome == INTERMITTENT  # under it in 2 of 3 readings


def test_a_reading_far_under_its_floor_is_not_measured_again_at_once():
    # 0.6 of the floor is no burst of noise: the pass runs from it at once
    fleet = Figures([1.1, 1.1])
    found, later = readings_with(fleet, {"met": False, "figure": 0.6})
    assert found is not None and [r["figure"] for r in later] == [1.1, 1.1]
    assert not any(FIRST_AGAIN in r or AGAIN_OF in r for r in later)
    # a later reading just under the floor, over it measured again at once: met
    fleet = Figures([0.95, 1.02])
    _, later = readings_with(fleet, {"met": True, "figure": 1.1})
    assert later == [{"met": True, "figure": 1.02, AGAIN_OF: {"met": False, "figure": 0.95}}]
    assert readings_of(later, lambda r: r["met"], first_below=False).outcome == MET
    # with no deep_below, nothing is measured again at once (the rule as it was)
    fleet = Figures([0.95])
    _, later = take_readings({"met": True, "figure": 1.1}, fleet.isolate, fleet.measure, lambda r: not r["met"],
                             lambda: 100.0, 10.0)
    assert later == [{"met": False, "figure": 0.95}]


def test_a_second_look_that_fails_leaves_the_reading_as_taken_and_is_kept():
    # the launch of the second look failed (a node went away): the reading stands, just under the
    # floor, and the failure is stored beside it, never dropped
    failed = {"met": False, "figure": None, "failed": True}
    looks = iter([failed, {"met": True, "figure": 1.1}, {"met": True, "figure": 1.1}])
    fleet = Fleet([])
    found, later = take_readings({"met": False, "figure": 0.95}, fleet.isolate, lambda: next(looks),
                                 lambda r: not r["met"] and r["figure"] is not None, lambda: 100.0, 10.0,
                                 measured=lambda r: not r.get("failed"), deep_below=lambda r: r["figure"] < MARGINAL)
    assert found is not None and fleet.passes[0]["figure"] == 0.95  # the pass ran from the first reading
    assert later[0] == {**failed, FIRST_AGAIN: True} and measurements(later) == 3
    readings = readings_of(later, lambda r: None if r.get("failed") else r["met"])
    assert readings.first_below and not readings.again and readings.taken == 3  # below in 1 of 3: a transient
    looks = iter([{"met": False, "figure": 0.95}, failed])
    _, later = take_readings({"met": True, "figure": 1.1}, fleet.isolate, lambda: next(looks),
                             lambda r: not r["met"] and r["figure"] is not None, lambda: 100.0, 10.0,
                             measured=lambda r: not r.get("failed"), deep_below=lambda r: r["figure"] < MARGINAL)
    assert later == [{"met": False, "figure": 0.95, AGAIN_FAILED: failed}] and measurements(later) == 2
