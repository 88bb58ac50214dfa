"""net.bandwidth's judging: each link of the facts against the floor, the slow links, the isolation
pass's findings, and whether the ring (the all-node reading) met its floor, first and when measured
again (preflight.launch.recheck). Pure."""

from __future__ import annotations

import statistics
from typing import Any

from preflight.core.check import measure
from preflight.core.model import COMPONENT_LINK, FIGURE_LINK, Component, Finding, Measurement, Status
from preflight.launch.isolation_findings import isolation_findings
from preflight.launch.recheck import AGAIN_OF, DROP_OUT, FAR_BELOW, MARGINAL, WATCHING

SHORTFALL_KINDS = ("slow-link",)  # what one ring below its floor FAILs on


def link_values(link: dict[str, Any]) -> list[float]:
    return [s["gbps"] for s in link.get("samples", []) if "gbps" in s]


def local_reason(link: dict[str, Any]) -> str | None:
    """Why the link's route is local to its sender (its figure would be memory bandwidth), or None."""
    local_why = link.get("why_local") if link.get("local") else None
    for sample in link.get("samples", []):
        for local_host, remote_host in sample.get("connected", []):
            if local_host and local_host == remote_host:
                local_why = local_why or f"iperf3 connected {local_host} to itself"
    return local_why


def judge_link(check: Any, link: dict[str, Any], min_gbps: float) -> tuple[Finding | None, Measurement, str | None]:
    """One link of the facts: its finding (a local route, not measured) or None, its measurement, and
    its detail line when it was measured."""
    label = f"{link['src']} -> {link['dst']}"

    def figure(value: float | None, samples: list[float] | None = None) -> Measurement:
        return measure(label, value, "Gbit/s", at_least=min_gbps, samples=samples, node=label,
                       figure=FIGURE_LINK, at=label, better="higher", param="min_gbps")

    local_why = local_reason(link)
    if local_why:
        return (check.finding("local-route", Status.ERROR, f"{label}: the route is local to {link['src']} ({local_why}); "
                              "a figure over it would be memory bandwidth, not the network"), figure(None), None)
    values = link_values(link)
    errors = [s["error"] for s in link.get("samples", []) if "error" in s] + ([link["error"]] if link.get("error") else [])
    if not values:
        return (check.finding("not-measured", Status.ERROR,
                              f"{label}: not measured: {errors[0] if errors else 'no samples'}"), figure(None), None)
    median = round(statistics.median(values), 3)
    text = f"{label}: {median:.2f} Gbit/s (samples {', '.join(f'{v:.2f}' for v in values)})"
    if errors:
        text += f"; {len(errors)} failed attempt(s): {errors[0]}"
    return None, figure(median, values), text


def slow_finding(check: Any, slow: list[tuple[float, str]], measured: int, min_gbps: float) -> Finding:
    """The FAIL naming the links below the floor, slowest first."""
    slow = sorted(slow)
    listed = ", ".join(f"{label} {value:.2f}" for value, label in slow[:6])
    more = f" and {len(slow) - 6} more" if len(slow) > 6 else ""
    return check.finding("slow-link", Status.FAIL, f"{len(slow)} of {measured} links below {min_gbps:g} Gbit/s: "
                         f"{listed}{more} Gbit/s; slowest {slow[0][1]}")


def isolation_part(check: Any, isolation: dict[str, Any] | None, min_gbps: float,
                   ring_bad: bool) -> tuple[list[Finding], list[str]]:
    """The isolation pass's findings and details; none reported when the ring, judged against
    `min_gbps`, has no slow or failed link (`ring_bad`)."""
    if not isolation:
        return [], []
    floor = (isolation.get("thresholds") or {}).get("min_gbps")
    if not ring_bad:
        return [], [(f"an isolation pass ran against {floor} Gbit/s; judged against {min_gbps:g} no ring link is "
                     "slow or failed, so what it named is not reported")]
    isolated, more = isolation_findings(
        check, isolation, Status.FAIL, floor=f"{floor:g} Gbit/s" if floor is not None else "",
        not_reproduced=("no group of nodes reproduced the slow or failed link: it was transient, or it "
                        "shows only while every link of the ring carries traffic"))
    if floor is not None and floor != min_gbps:
        more.append(f"the isolation pass judged its groups against {floor:g} Gbit/s, not {min_gbps:g}")
    return isolated, more


# -- the ring as the all-node reading (preflight.launch.recheck) ----------------------------------------


def _measurable(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Links a reading measures: a local route or an unresolved address is configuration, never rechecked."""
    return [link for link in links if not local_reason(link) and not link.get("error")]


def below_floor(links: list[dict[str, Any]], min_gbps: float) -> bool:
    """A link of the ring was measured below the floor (a slow link; a failed one is not a shortfall)."""
    return any(values and statistics.median(values) < min_gbps for values in map(link_values, _measurable(links)))


def deep_below(reading: dict[str, Any], min_gbps: float) -> bool:
    """A ring with a link under MARGINAL of the floor: no burst of noise, not measured again at once."""
    return below_floor(reading.get("links", []), MARGINAL * min_gbps)


def far_below(reading: dict[str, Any], min_gbps: float) -> bool:
    """A ring with a link under FAR_BELOW of the floor: intermittent beside another ring below the floor
    (one alone is looked at again, preflight.launch.recheck)."""
    return below_floor(reading.get("links", []), FAR_BELOW * min_gbps)


def dropped_out(reading: dict[str, Any], min_gbps: float) -> bool:
    """A ring with a link under DROP_OUT of the floor: a link dropping out, which no slowdown gives (a
    watch ring counts only then)."""
    return below_floor(reading.get("links", []), DROP_OUT * min_gbps)


def rings_of(facts: dict[str, Any], min_gbps: float) -> list[list[dict[str, Any]]]:
    """Every ring the check counted, in order: the first, each one measured again (a ring just under the
    floor before its second look, then that look), and a watch ring only when it dropped out. A watch
    ring that did not is no reading, and two of them would give the flapping-link rule more chances at a
    healthy link's rare drop in single measurements. Pure."""
    later = [r for r in facts.get("rechecks", []) if not r.get(WATCHING) or dropped_out(r, min_gbps)]
    return [facts.get("links", [])] + [x.get("links", []) for r in later for x in (r.get(AGAIN_OF), r) if x]


def met_floor(recheck: dict[str, Any], min_gbps: float) -> bool | None:
    """A ring measured again: True when every link met the floor, False when one is below it, None
    when a link (or the ring) could not be measured."""
    links = _measurable(recheck.get("links", []))
    medians = [statistics.median(values) if values else None for values in map(link_values, links)]
    if not medians or None in medians:
        return None
    return all(m >= min_gbps for m in medians)


def recheck_failure(recheck: dict[str, Any]) -> str:
    """Why a ring measured again has no reading: its first failed link."""
    for link in _measurable(recheck.get("links", [])):
        if not link_values(link):
            errors = [s["error"] for s in link.get("samples", []) if "error" in s]
            return f"{link['src']} -> {link['dst']} {errors[0] if errors else 'was not measured'}"
    return str(recheck.get("error") or "no link was measured")


def recheck_text(rechecks: list[dict[str, Any]], min_gbps: float) -> str:
    """'then slowest 9.41 Gbit/s': each later ring's slowest link, in order."""
    seen = []
    for recheck in rechecks:
        if met_floor(recheck, min_gbps) is not None:
            seen.append(f"{min(statistics.median(link_values(link)) for link in _measurable(recheck['links'])):.2f}")
    return f"then slowest {', '.join(seen)} Gbit/s" if seen else ""


# -- a link that drops out in single samples (a flapping link the medians hide) --------------------------

# A sample under this share of the floor is a drop: a link out, not a slow one. Deeper than the readings'
# FAR_BELOW because it is judged per sample, and a large ring takes thousands: heavy-tailed noise puts a
# healthy sample under half its floor about once in a thousand (Student-t, 3 degrees of freedom, 5% scale),
# under a quarter of it about once in three to four thousand.
DROP_BELOW = 0.25
DROPS_TO_FAIL = 2  # all-node readings a link must drop in: one drop is any link's bad second, not a flap

FLAPPING_FIX = ("A link that drops out in single measurements while the median of its measurements passes: read "
                "the error and link-flap counters at both ends (ethtool -S <iface>; ip -s link show <iface>) and at "
                "the switch port between them, then reseat or replace the cable or transceiver, and run again. "
                "Nothing is acted on for a link.")


def flapping_links(rings: list[list[dict[str, Any]]], drop_gbps: float, min_gbps: float) -> list[dict[str, Any]]:
    """Links whose median met `min_gbps` in every ring that measured them, yet with a sample under
    `drop_gbps` in one ring or more: a link that comes and goes, which the median of its repeats hides.
    Each: its ends, the rings that measured it, those it dropped in, and its low samples."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for index, links in enumerate(rings):
        for link in _measurable(links):
            values = link_values(link)
            if not values:
                continue
            entry = seen.setdefault((link["src"], link["dst"]), {
                "ends": [link["src"], link["dst"]], "rings": 0, "dropped": [], "low": [], "met": True})
            entry["rings"] += 1
            entry["met"] = entry["met"] and statistics.median(values) >= min_gbps
            low = [v for v in values if v < drop_gbps]
            if low:
                entry["dropped"].append(index + 1)
                entry["low"] += low
    return [e for e in seen.values() if e["met"] and e["dropped"]]


def flapping_part(check: Any, rings: list[list[dict[str, Any]]], min_gbps: float) -> tuple[list[Finding], list[str]]:
    """A FAIL for each link that dropped in DROPS_TO_FAIL rings or more (nobody's own: a link is never
    drained or cordoned for), and a detail line for each that dropped in one."""
    drop_gbps = DROP_BELOW * min_gbps
    findings, details = [], []
    for flap in flapping_links(rings, drop_gbps, min_gbps):
        label = " -> ".join(flap["ends"])
        low = ", ".join(f"{v:.2f}" for v in flap["low"])
        readings = f"{len(flap['dropped'])} of the {flap['rings']} all-node readings that measured it"
        if len(flap["dropped"]) < DROPS_TO_FAIL:
            details.append(f"{label} dropped under {drop_gbps:g} Gbit/s once ({low} Gbit/s, in {readings}) "
                           "while its median met the floor: one drop is not judged; two would be a flapping link")
            continue
        finding = check.finding("flapping-link", Status.FAIL, (
            f"the link {label} is flapping: it dropped under {drop_gbps:g} Gbit/s in {readings} (samples "
            f"{low} Gbit/s) while its median met {min_gbps:g} Gbit/s in each; nothing is acted on"))
        finding.component = Component(COMPONENT_LINK, list(flap["ends"]), confirmed=False,
                                      confirmation={"bad_in": len(flap["dropped"]), "of": flap["rings"]})
        findings.append(finding)
    return findings, details
