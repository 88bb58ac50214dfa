"""The straggler search of the isolation pass (preflight.launch.isolation): a node whose time was far
above its group's median once is measured again among known-good nodes, and named when it was slow in
at least `straggler_confirm` (3) observations and most of them, the one that made it a suspect not
counted (evidence()); slow in half of them, it is read again, up to twice `straggler_confirm` times,
and named a suspect if that does not settle it.
"""

from __future__ import annotations

from typing import Any, Iterator

from preflight.launch.isolation_types import Attribution, Probe


def straggler_task(e: Any, node: str) -> Iterator[list[Probe]]:
    """`node` was far slower than its group's median once: measure it again among known-good nodes."""
    p = e.params
    probes = 0
    while True:
        observed, seen, slow = tally(e, node)
        if len(slow) >= p.straggler_confirm and len(slow) * 2 > len(seen):
            e.blame(straggler(node, observed, seen, slow))
            return
        if len(seen) - len(slow) >= 2 and len(seen) - len(slow) > len(slow):
            e.note(f"{node} was slow in {len(slow)} of {len(seen)} observations: not a straggler")
            return
        if e.is_blamed(node):  # at fault: its own fault says more (a straggler named too goes at the end)
            return
        if probes >= 2 * p.straggler_confirm:  # slow in half of them: still a suspect
            break
        if len(e.good - {node}) < p.straggler_min_group - 1 and e.searching():
            yield []  # slow in the screen, before any node is known good: wait for the searches to find some
            continue
        probes += 1
        (outcome,) = yield [Probe((node,), partners=(e.topo(node),) * p.straggler_partners,
                                  at_least=p.straggler_min_group - 1,
                                  purpose=f"{node} again among known-good nodes (slow once)")]
        if outcome.result is None:
            break
    observed, seen, slow = tally(e, node, chosen_alone=True)
    if slow:
        found = straggler(node, observed, seen, slow)
        found.ambiguous, found.confidence = True, "unconfirmed"
        e.blame(found)


def tally(e: Any, node: str, chosen_alone: bool = False) -> tuple[list[dict[str, Any]], ...]:
    """A node's observations, those that count (evidence()), and the slow ones among those; with
    `chosen_alone`, a node slow only where it was chosen counts that one (named a suspect on it)."""
    observed = e.observations(node)
    seen = evidence(observed)
    if chosen_alone and not any(o["slow"] for o in seen):
        seen = observed
    return observed, seen, [o for o in seen if o["slow"]]


def evidence(observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A node's observations that count for or against it as a straggler: all but the first slow one.
    That one chose the node out of every node timed, so it is the node's highest draw of many, not a
    measurement of it: at 1,024 nodes with heavy-tailed times a few healthy nodes read 25-50% slow in
    any round, and counting that reading left two more lucky draws to name one of them."""
    first = next((i for i, o in enumerate(observed) if o["slow"]), None)
    return observed if first is None else observed[:first] + observed[first + 1:]


def straggler(node: str, observed: list[dict[str, Any]], seen: list[dict[str, Any]],
              slow: list[dict[str, Any]]) -> Attribution:
    """The straggler attribution: every observation of the node in its evidence text; its figures from
    `seen`, the observations it is judged on (evidence()), and the `slow` ones among them."""
    ratios = sorted(o["time_s"] / o["median_s"] for o in slow if o["median_s"] > 0)
    mid = slow[len(slow) // 2]
    chose = None if len(seen) == len(observed) else next(o for o in observed if o["slow"])
    text = [f"round {o['round']}: {node} {o['time_s']:.4g} s against its group's median {o['median_s']:.4g} s "
            f"(MAD {o['mad_s']:.3g} s, {o['size']} nodes){'' if o['slow'] else ': not slow'}"
            + (": the reading that made it a suspect, not counted" if o is chose else "") for o in observed]
    return Attribution("straggler", [node], text, sorted({o["round"] for o in observed}),
                       figures={"time_s": mid["time_s"], "median_s": mid["median_s"],
                                "ratio": round(ratios[len(ratios) // 2], 3) if ratios else None,
                                "slow_in": len(slow), "observed": len(seen)})
