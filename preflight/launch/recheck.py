"""Never GO or NO-GO on one all-node reading: when to measure the whole cluster again, and what the readings say. Pure.

A cluster check's all-node reading (collectives.cluster's bus bandwidth, net.bandwidth's ring,
scaling.multi_node's throughput) is one draw of a noisy figure: a healthy fleet reads below its floor
now and then, and a flapping link or node reads above it in its good bursts. So the check takes its
readings by one protocol (`take_readings`), the one the simulator runs too (preflight.launch.fault_corpus):

- the first reading; below its floor (or with another reason, such as one node's ranks far slower),
  the isolation pass runs from it; a pass that confirms a component ends the readings: its groups
  reproduced the fault;
- a second reading, at the end of the check, always (when the check has the time for it): one lucky
  reading never clears the cluster. When it falls below the floor and no pass has run yet, the pass
  runs from it;
- after a second reading that the first, met, left to decide (no pass from the first), WATCH more at
  once, each counted only when it drops out: under DROP_OUT of the floor, what a link or NIC that
  flaps gives in its bad bursts and no slowdown does (a neighbour's traffic slows a switch by 20-40%).
  Taken at once, they share the second's slowdown, so one merely below the floor says nothing and is
  not counted; a drop-out is far below the floor (intermittent, NO-GO), ends them, and the pass runs
  from it when none has run. Two readings miss a part bad in half its bursts one time in four;
  four, one time in sixteen;
- after every other reading, when one of them is far below the floor (under FAR_BELOW of it) and no
  other is below it, a second look: up to SECOND_LOOK more at once, counted as watch readings, until
  one is below the floor. One burst of heavy-tailed noise reads that low now and then and not again; a
  flapping node, bad in half its bursts, reads below the floor again one time in two;
- when the first reading fell below the floor and the pass from it pinned nothing, a third. A second
  reading below the floor after a first that met it is judged with it (1 of 2: a transient, unless far
  below it, or the pass from it pinned a component; its suspects are named): a third reading would
  follow it at once, or right after a short pass, and share whatever slowdown lasts that long (another
  job's traffic through one switch), so it would call a healthy fleet NO-GO on one slowdown.

A reading just under its floor (under it, but not under MARGINAL of it) is measured once more at
once, and is below the floor only when that measurement is too (`deep_below`; one that fails to be
measured leaves the reading as taken, and is kept beside it): heavy-tailed noise
puts one burst of a healthy fleet 5-15% under its mean now and then, and two in a row seldom; a fault
that matters reads deeper, or again. The second measurement stands for the reading (the first is kept
beside it, under AGAIN_OF); for the first reading it is stored as the first of the later ones, marked
FIRST_AGAIN, and the pass runs from the first reading only when that measurement is below too.

What the readings say (`judge_readings`, the median of the readings against the floor):
- below its floor in every reading: the shortfall is confirmed, the check FAILs on it (it appears
  only with every node together: congestion, an oversubscribed uplink, the size of the job, or a
  fleet that reads near its floor with no component standing out);
- below it in most readings (the median is below it), dropped out (under DROP_OUT of it) in any, or
  far below it (under FAR_BELOW of it) in one with another reading below it too (a watch reading
  counts for that): intermittent, not attributed: a FAIL that names every reading (a flapping link or
  node that the pass could not pin; its suspects are named as WARN), never a GO. One reading far below
  with none other below is one burst: heavy-tailed noise puts a healthy fleet's reading under half its
  floor now and then (6 of 1,000 healthy runs at 1,024 nodes under the fabric model of
  preflight.launch.isolation_sim, a reading at the pace of the slowest of 32 switches), and a part
  that fails reads bad again;
- met it in the others: a transient, a WARN that names every reading, never a NO-GO;
- met it in every reading: a PASS;
- not measured again (no time left, the launch failed): the first reading stands, and says so.

A healthy fleet that reads below its floor with odds p per reading is called NO-GO with odds of about
3p^2 (2 of 3); a fault that reads bad in half its bursts is missed when both readings are good (one
time in four, one in sixteen where the watch readings are taken and it drops out in its bad bursts),
or when only the second is below the floor, not dropped out, and the pass names nothing. The cost: three more
all-node readings in every run that met its floor (one where the check takes no watch), two when the
first fell below it, and up to two more where one reading far below the floor stands alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from preflight.core.model import Finding, Status

RECHECKS = 2
MARGINAL = 0.85  # a reading under its floor but not under this share of it is measured once more at once
AGAIN_OF = "again_of"  # a later reading measured again at once: the measurement just under the floor
FIRST_AGAIN = "first_again"  # the first reading measured again at once: this entry stands for it
AGAIN_FAILED = "again_failed"  # a later reading whose measurement again at once failed: it stands as taken

# How a recheck ended
CONFIRMED = "confirmed"  # below the floor in every reading
INTERMITTENT = "intermittent"  # below it in most readings, far below it in one and below in another, or dropped out
TRANSIENT = "transient"  # met the floor in most later readings
FAR_BELOW = 0.5  # a reading under this share of its floor is no transient when another reading is below it too
UNCONFIRMED = "unconfirmed"  # could not be measured again
WATCH = 2  # readings taken at once after the second of a run whose first met its floor, to catch a drop-out
DROP_OUT = 0.25  # under this share of its floor: a part dropping out, no slowdown; no transient, whatever the rest say
WATCHING = "watch"  # a watch reading: counted only when it dropped out (under DROP_OUT of the floor)
SECOND_LOOK = 2  # watch readings at once after one reading far below the floor that no other below it backs
MET = "met"  # met the floor in every reading (two at least)


def recheck_wanted(isolation: dict[str, Any] | None) -> bool:
    """Whether the all-node reading is to be taken again after this isolation pass's result (the
    `isolation` dict of Isolation.to_dict()): it ran to its end and blamed nothing (a straggler and a
    suspect blame nothing; an ambiguous fault is reproduced by groups, so it is real)."""
    if not isolation or isolation.get("stopped"):
        return False
    for found in isolation.get("attributions", []):
        if found.get("ambiguous"):
            return False
        if found.get("confidence", "confirmed") == "confirmed" and found.get("kind") != "straggler":
            return False
    return True


@dataclass(frozen=True)
class Readings:
    """The all-node readings of one run against its floor."""

    outcome: str  # CONFIRMED, INTERMITTENT, TRANSIENT, MET, UNCONFIRMED
    below: int  # readings below the floor, the first one included
    taken: int  # readings taken, the first one included
    why_not: str = ""  # why a reading was not measured (UNCONFIRMED, or a MET on one reading)
    far: bool = False  # a reading was under FAR_BELOW of its floor
    dropped: bool = False  # a reading was under DROP_OUT of it (a part dropped out)
    first_below: bool = True  # the first reading was below the floor
    again: bool = False  # the first reading was just under its floor and met it measured again at once
    watched: int = 0  # watch readings taken that did not drop out (not counted)
    watch_below: int = 0  # of those, below the floor (not counted, but a second reading below it beside a far one)

    @property
    def text(self) -> str:
        first = "the first just under its floor and over it when measured again at once; " if self.again else ""
        if self.taken == 1:
            return f"{first}not measured again ({self.why_not}): one reading" + self.watch_text
        return (f"{first}below its floor in {self.below} of {self.taken} all-node readings"
                + self.far_text + self.watch_text)

    @property
    def alone(self) -> bool:
        """A reading was far below the floor, none dropped out, and no other is below it, a watch reading
        included: one burst, unless a second look sees it again."""
        return self.far and not self.dropped and self.below + self.watch_below < 2

    @property
    def far_text(self) -> str:
        if self.dropped:
            return f", one of them under {DROP_OUT:.0%} of it (a part dropped out)"
        if not self.far:
            return ""
        return f", one of them under {FAR_BELOW:.0%} of it" + (", and no other below it (one burst)" if self.alone else "")

    @property
    def watch_text(self) -> str:
        below = f"{self.watch_below} below it but " if self.watch_below else ""
        return (f"; {self.watched} more taken at once, {below}none under {DROP_OUT:.0%} of it (no part dropped out)"
                if self.watched else "")


def judge_readings(rechecks: list[bool | None], why_not: str = "", far: bool = False,
                   first_below: bool = True, again: bool = False, watched: int = 0, dropped: bool = False,
                   watch_below: int = 0) -> Readings:
    """What a first reading (below its floor unless `first_below` is False) and the `rechecks` after
    it say. Each recheck: True (met the floor), False (below it), None (not measured); `far`: a reading
    was under FAR_BELOW of it; `dropped`: one was under DROP_OUT of it; `again`: the first reading was
    just under the floor and met it measured again at once (it counts as met); `watched`: watch readings
    that did not drop out (not counted, only told), `watch_below` of them below the floor. The median
    decides: below it in most readings is a shortfall; so is a drop-out in any, and a reading far below
    it with another below it (a watch reading too): heavy-tailed noise puts one burst of a healthy fleet
    under half its floor now and then, and a part that fails does it again."""
    measured = [ok for ok in rechecks if ok is not None]
    taken = 1 + len(measured)
    below = int(first_below) + sum(1 for ok in measured if not ok)
    if not measured:
        reason = why_not or ("no time was left" if not rechecks else "a recheck could not be measured")
        return Readings(UNCONFIRMED if first_below else MET, below, taken, reason, far, dropped, first_below, again,
                        watched, watch_below)
    told = {"far": far, "dropped": dropped, "first_below": first_below, "watched": watched, "watch_below": watch_below}
    if below == taken:
        return Readings(CONFIRMED, below, taken, **told)
    readings = Readings(TRANSIENT if below else MET, below, taken, again=again, **told)
    if dropped or far and not readings.alone or below * 2 > taken:
        return dataclasses.replace(readings, outcome=INTERMITTENT)
    return readings


NOT_RUN = "not_run"  # a recheck that was not measured holds only why

TRANSIENT_FIX = ("Nothing is acted on: the all-node reading fell below its floor, met it when measured again, and no group "
                 "of nodes reproduced the shortfall: other jobs' traffic on the fabric, or a transient. If it comes back "
                 "in later runs (`preflight history`), measure at a quiet time and read the switches' congestion and "
                 "error counters.")


INTERMITTENT_FIX = ("The all-node reading fell below its floor in most readings, far below it beside another reading "
                    "below it, or dropped out once, and the isolation pass confirmed no component: a fault that comes "
                    "and goes (a flapping link or NIC, a port that "
                    "renegotiates). Nothing is acted on; read the suspects named beside it, the switches' and NICs' "
                    "error and link-flap counters, and run again to pin it (`preflight history` keeps each run).")


def take_readings(first: Any, isolate: Callable[[Any], Any], measure_once: Callable[[], Any],
                  below: Callable[[Any], bool], time_left: Callable[[], float], least_s: float,
                  pinned: Callable[[Any], bool] | None = None, measured: Callable[[Any], bool] = lambda r: True,
                  deep_below: Callable[[Any], bool] | None = None, dropped_out: Callable[[Any], bool] | None = None,
                  far_below: Callable[[Any], bool] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """The readings protocol (see the module's text): (what the isolation pass gave, or None when none
    ran; the readings after the first, as the check stores them, a reading not taken as {NOT_RUN: why}).

    `isolate(reading)`: the pass run from a reading, None when the reading gives no reason for one;
    `below(reading)`: the reading was measured and is below the floor; `deep_below(reading)`: under
    MARGINAL of it (None: no reading is measured again at once); `dropped_out(reading)`: under DROP_OUT
    of it (None: no watch readings are taken, see the module's text); `far_below(reading)`: under
    FAR_BELOW of it (None: no second look at one such reading alone); `pinned(isolation)`: the pass
    confirmed what made it bad (default: not recheck_wanted of its `isolation` entry); fewer readings
    when less than `least_s` seconds are left, none after a first that was not `measured` (the run
    failed: not a GO, and a launch that failed once, on a node that never joined, fails as slowly again)."""
    def done(found: Any) -> bool:
        if found is None:
            return False
        return pinned(found) if pinned is not None else not recheck_wanted(found.get("isolation"))

    def again(reading: Any) -> Any:
        """`reading` measured once more at once when it is just under its floor (None when it is not)."""
        if deep_below is None or not below(reading) or deep_below(reading) or time_left() < least_s:
            return None
        return measure_once()

    later: list[dict[str, Any]] = []
    second = again(first) if measured(first) else None
    if second is not None:  # kept also when it failed: the first reading then stands as taken
        later.append({**second, FIRST_AGAIN: True})
    basis = second if second is not None and measured(second) and not below(second) else first
    found = isolate(basis)
    if done(found) or not measured(first):
        return found, later
    # A third reading only after a first below the floor and a pass from it, which spaces them.
    spaced = below(basis) and found is not None
    wanted = len(later) + (RECHECKS if spaced else 1)
    while len(later) < wanted:
        if time_left() < least_s:
            later.append({NOT_RUN: f"less than {least_s:.0f} s of the check's time was left"})
            break
        reading = measure_once()
        second = again(reading)
        if second is not None:
            reading = {**second, AGAIN_OF: reading} if measured(second) else {**reading, AGAIN_FAILED: second}
        later.append(reading)
        if found is None:  # no pass yet: this reading may give a reason for one
            found = isolate(reading)
            if done(found):
                return found, later

    def watch(count: int, ends: Callable[[Any], bool]) -> Any:
        """`count` watch readings at once until one `ends` the watch; the pass from that one when none ran."""
        for _ in range(count):
            if time_left() < least_s:
                break  # a watch reading not taken is not counted either way
            reading = {**measure_once(), WATCHING: True}
            later.append(reading)
            if measured(reading) and ends(reading):
                return isolate(reading) if found is None else found
        return found

    if dropped_out is not None and not spaced and NOT_RUN not in later[-1]:
        found = watch(WATCH, dropped_out)  # one that drops out is far below the floor: it ends the watch
    if far_below is not None and lone_far([first] + later, below, measured, far_below, dropped_out):
        found = watch(SECOND_LOOK, below)  # one below the floor backs the far one: intermittent
    return found, later


def lone_far(readings: list[Any], below: Callable[[Any], bool], measured: Callable[[Any], bool],
             far_below: Callable[[Any], bool], dropped_out: Callable[[Any], bool] | None) -> bool:
    """Of a run's readings (the first, then the later ones as take_readings stores them), one is far
    below the floor and no other is below it, a watch reading included, and none dropped out: what one
    burst of heavy-tailed noise gives, and a part bad in half its bursts now and then. A watch reading
    far below the floor counts here (its second look may run the pass), though readings_of counts it
    only when it drops out."""
    if len(readings) > 1 and readings[1].get(FIRST_AGAIN):  # the first measured again at once stands for it
        readings = readings[1:] if measured(readings[1]) else readings[:1] + readings[2:]
    taken = [r for r in readings if NOT_RUN not in r and measured(r)]
    return sum(map(below, taken)) == 1 and any(map(far_below, taken)) \
        and not (dropped_out is not None and any(map(dropped_out, taken)))


def measurements(later: list[dict[str, Any]]) -> int:
    """All-node measurements the later readings took (one measured again at once counts twice)."""
    return sum(1 + (AGAIN_OF in r or AGAIN_FAILED in r) for r in later if NOT_RUN not in r)


def readings_of(rechecks: list[dict[str, Any]], met: Callable[[dict[str, Any]], bool | None],
                failed: Callable[[dict[str, Any]], str] = lambda r: str(r.get("error") or ""),
                far: Callable[[dict[str, Any]], bool] = lambda r: False, first: Any = None,
                first_below: bool = True, out: Callable[[dict[str, Any]], bool] = lambda r: False) -> Readings:
    """The readings of a run's stored rechecks (`met`: True when one met the floor, False below it, None
    when it was not measured; `failed`: why one was not measured; `far`: a reading under FAR_BELOW of its
    floor; `first`: the first reading, in the rechecks' shape, read by `far` and `out` (None: neither);
    `first_below`: the first reading was below its floor; `out`: a reading under DROP_OUT of it: a watch
    reading counts only then, below the floor and far below it, and is not counted otherwise)."""
    dropped, kept, rechecks = _watches(rechecks, met, out)
    firsts, again = [first] if first is not None else [], False
    if rechecks and rechecks[0].get(FIRST_AGAIN):  # the first reading, measured again at once
        firsts += [rechecks[0]] if met(rechecks[0]) is not None else []
        again = first_below and met(rechecks[0]) is True
        first_below, rechecks = first_below and not again, rechecks[1:]
    oks = [None if NOT_RUN in r else False if r.get(WATCHING) else met(r) for r in rechecks]
    why = next((r[NOT_RUN] if NOT_RUN in r else failed(r) for r, ok in zip(rechecks, oks) if ok is None), "")
    read = firsts + [r for r, ok in zip(rechecks, oks) if ok is not None and not r.get(WATCHING)]
    return judge_readings(oks, why, bool(dropped) or any(map(far, read)), first_below, again, len(kept),
                          bool(dropped) or any(map(out, read)), sum(1 for r in kept if met(r) is False))


Reading = dict[str, Any]


def _watches(rechecks: list[Reading], met: Callable[[Reading], bool | None],
             out: Callable[[Reading], bool]) -> tuple[list[Reading], list[Reading], list[Reading]]:
    """The watch readings that dropped out (below the floor, whatever else such a reading could not
    measure), those measured that did not (not counted), and the rechecks counted: all but those."""
    watches = [r for r in rechecks if r.get(WATCHING) and NOT_RUN not in r]
    dropped = [r for r in watches if out(r)]
    kept = [r for r in watches if not out(r) and met(r) is not None]
    return dropped, kept, [r for r in rechecks if not r.get(WATCHING) or any(r is d for d in dropped)]


def judged_by_readings(check: Any, findings: list[Finding], kinds: tuple[str, ...], readings: Readings,
                       later: str = "") -> list[Finding]:
    """`findings` with the all-node shortfalls (`kinds` of `check`, at FAIL) judged by every reading:
    a transient becomes one WARN `transient` per shortfall; a confirmed or unconfirmed one stays a FAIL
    that says how many readings it rests on. `later`: the later readings' figures, in words."""
    ids = {f"{check.id}.{kind}" for kind in kinds}
    out = []
    for f in findings:
        if f.id not in ids or f.level is not Status.FAIL:
            out.append(f)
        elif readings.outcome == TRANSIENT or readings.again and readings.outcome in (MET, UNCONFIRMED):
            out.append(check.finding("transient", Status.WARN, f"{f.message}; {readings.text}"
                                     + (f" ({later})" if later else "") + ": a transient, not confirmed", node=f.node))
        elif readings.outcome == INTERMITTENT:
            out.append(check.finding("intermittent", Status.FAIL, f"{f.message}; {readings.text}"
                                     + (f" ({later})" if later else "") + ": intermittent, not attributed to one "
                                     "component (the suspects are named as WARN)", node=f.node))
        else:
            out.append(dataclasses.replace(f, message=f"{f.message} ({readings.text})"))
    return out


def later_findings(check: Any, readings: Readings, later: str = "") -> list[Finding]:
    """The findings of readings whose first met its floor (which gave no shortfall finding of its own):
    an `intermittent` FAIL or a `transient` WARN when a later reading fell below it; none when every
    reading met it."""
    if readings.first_below or readings.again or readings.outcome in (MET, UNCONFIRMED):
        return []  # a first reading below its floor has findings of its own, judged by judged_by_readings
    said = (f"the all-node reading met its floor first, then fell below it: {readings.text}"
            + (f" ({later})" if later else ""))
    if readings.outcome == TRANSIENT:
        return [check.finding("transient", Status.WARN, f"{said}: a transient, not confirmed")]
    return [check.finding("intermittent", Status.FAIL, f"{said}: intermittent, not attributed to one component "
                          "(the suspects are named as WARN)")]


def readings_line(readings: Readings) -> str:
    """The detail line of readings that met the floor: on how many readings a PASS rests."""
    if readings.first_below or readings.again or readings.outcome not in (MET, UNCONFIRMED):
        return ""
    return f"met its floor in {readings.taken} of {readings.taken} all-node readings{readings.watch_text}" \
        if readings.taken > 1 else f"the all-node reading met its floor; {readings.text}"


def judged(check: Any, findings: list[Finding], kinds: tuple[str, ...], readings: Readings,
           later: str = "") -> tuple[list[Finding], list[str]]:
    """What every all-node reading says, for a check: `findings` judged by them (judged_by_readings),
    the findings of a later reading below the floor (later_findings), and the detail lines."""
    line = readings_line(readings)
    return (judged_by_readings(check, findings, kinds, readings, later) + later_findings(check, readings, later),
            [line] if line else [])
