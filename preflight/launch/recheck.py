"""Never NO-GO on one all-node reading: when to measure the whole cluster again, and what the readings say. Pure.

A cluster check's all-node reading (collectives.cluster's bus bandwidth, net.bandwidth's ring,
scaling.multi_node's throughput) that falls below its floor starts the isolation pass. When the pass
confirms no component and no group of nodes reproduces the shortfall, the one reading is all the
evidence there is, and a healthy fleet with a run-to-run spread of 10% reads below a floor set one
deviation under its typical figure about one time in six (bench/error_rates.py). So the all-node
reading is taken again, RECHECKS more times:

- below its floor in every reading: the shortfall is confirmed, the check FAILs on it (it appears
  only with every node together: congestion, an oversubscribed uplink, the size of the job);
- below it in most readings (2 of 3), or far below it (under FAR_BELOW of it) in any: intermittent,
  not attributed: a FAIL that names every reading (a flapping link or node that the pass could not
  pin; its suspects are named as WARN), never a GO;
- met it in the others: a transient, a WARN that names every reading, never a NO-GO;
- not measured again (no time left, the launch failed): the first reading stands, and says so.

With RECHECKS = 2 a healthy fleet that reads below its floor with odds p per reading is called NO-GO
with odds of about 3p^2 after a first reading below it: 8% at p = 1/6, 0.03% at p = 1%. A fault the pass did name (a confirmed node, link or boundary) or
that every group reproduces (ambiguous) is never measured again: the groups already confirmed it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from preflight.core.model import Finding, Status

RECHECKS = 2

# How a recheck ended
CONFIRMED = "confirmed"  # below the floor in every reading
INTERMITTENT = "intermittent"  # below it in most readings, or far below it in one
TRANSIENT = "transient"  # met the floor in most later readings
FAR_BELOW = 0.5  # a reading under this share of its floor is no transient, whatever the others say
UNCONFIRMED = "unconfirmed"  # could not be measured again


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
    """The all-node readings of one run against its floor, the first one below it."""

    outcome: str  # CONFIRMED, TRANSIENT, UNCONFIRMED
    below: int  # readings below the floor, the first one included
    taken: int  # readings taken, the first one included
    why_not: str = ""  # why a recheck was not measured (UNCONFIRMED)
    far: bool = False  # a reading was under FAR_BELOW of its floor

    @property
    def text(self) -> str:
        if self.outcome == UNCONFIRMED:
            return f"not measured again ({self.why_not}): one reading"
        return (f"below its floor in {self.below} of {self.taken} all-node readings"
                + (f", one of them under {FAR_BELOW:.0%} of it" if self.far else ""))


def judge_readings(rechecks: list[bool | None], why_not: str = "", far: bool = False) -> Readings:
    """What a first reading below its floor and the `rechecks` after it say. Each recheck: True (met
    the floor), False (below it), None (not measured); `far`: a reading was under FAR_BELOW of it."""
    measured = [ok for ok in rechecks if ok is not None]
    taken = 1 + len(measured)
    below = 1 + sum(1 for ok in measured if not ok)
    if not measured:
        reason = why_not or ("no time was left" if not rechecks else "a recheck could not be measured")
        return Readings(UNCONFIRMED, below, taken, reason, far)
    if below == taken:
        return Readings(CONFIRMED, below, taken, far=far)
    if far or below * 2 > taken:
        return Readings(INTERMITTENT, below, taken, far=far)
    return Readings(TRANSIENT, below, taken)


NOT_RUN = "not_run"  # a recheck that was not measured holds only why

TRANSIENT_FIX = ("Nothing is acted on: the all-node reading fell below its floor, met it when measured again, and no group "
                 "of nodes reproduced the shortfall: other jobs' traffic on the fabric, or a transient. If it comes back "
                 "in later runs (`preflight history`), measure at a quiet time and read the switches' congestion and "
                 "error counters.")


INTERMITTENT_FIX = ("The all-node reading fell below its floor in most readings, or far below it once, and the isolation "
                    "pass confirmed no component: a fault that comes and goes (a flapping link or NIC, a port that "
                    "renegotiates). Nothing is acted on; read the suspects named beside it, the switches' and NICs' "
                    "error and link-flap counters, and run again to pin it (`preflight history` keeps each run).")


def take_rechecks(measure_once: Callable[[], dict[str, Any]], met: Callable[[dict[str, Any]], bool | None],
                  time_left: Callable[[], float], least_s: float) -> list[dict[str, Any]]:
    """RECHECKS more all-node readings, as the check stores them (raw): every one is taken, since a
    reading that meets the floor between two below it is no transient; fewer when less than `least_s`
    seconds are left. (`met`: True, False, None when it was not measured; kept for the callers.)"""
    out: list[dict[str, Any]] = []
    for _ in range(RECHECKS):
        if time_left() < least_s:
            out.append({NOT_RUN: f"less than {least_s:.0f} s of the check's time was left"})
            break
        out.append(measure_once())
    return out


def readings_of(rechecks: list[dict[str, Any]], met: Callable[[dict[str, Any]], bool | None],
                failed: Callable[[dict[str, Any]], str] = lambda r: str(r.get("error") or ""),
                far: Callable[[dict[str, Any]], bool] = lambda r: False, first_far: bool = False) -> Readings:
    """The readings of a run's stored rechecks (`met` as in take_rechecks; `failed`: why one was not
    measured; `far`: a recheck under FAR_BELOW of its floor; `first_far`: the first reading was)."""
    oks = [None if NOT_RUN in r else met(r) for r in rechecks]
    why = next((r[NOT_RUN] if NOT_RUN in r else failed(r) for r, ok in zip(rechecks, oks) if ok is None), "")
    far_any = first_far or any(far(r) for r, ok in zip(rechecks, oks) if ok is not None)
    return judge_readings(oks, why, far_any)


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
        elif readings.outcome == TRANSIENT:
            out.append(check.finding("transient", Status.WARN, f"{f.message}; {readings.text}"
                                     + (f" ({later})" if later else "") + ": a transient, not confirmed", node=f.node))
        elif readings.outcome == INTERMITTENT:
            out.append(check.finding("intermittent", Status.FAIL, f"{f.message}; {readings.text}"
                                     + (f" ({later})" if later else "") + ": intermittent, not attributed to one "
                                     "component (the suspects are named as WARN)", node=f.node))
        else:
            out.append(dataclasses.replace(f, message=f"{f.message} ({readings.text})"))
    return out
