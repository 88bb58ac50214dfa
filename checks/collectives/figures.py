"""Judging one all-reduce run's figures: shared by collectives.local and collectives.cluster. Pure.

The figures come from `preflight.workers.allreduce` (one JSON result from rank 0): per message size
the known-sum errors by rank, the median time, algbw and busbw as nccl-tests define them
(busbw = algbw x 2(n-1)/n), and a random-data check against a reference.
"""

from __future__ import annotations

from typing import Any, Callable

from preflight.core.check import Check, measure
from preflight.launch.recheck import FAR_BELOW
from preflight.core.model import FIGURE_SIZE, Finding, Measurement, Status

MIB = 1 << 20


def human_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def allreduce_findings(result: dict[str, Any], label: str, check: type[Check], *, min_busbw_gbps: float | None,
                       max_latency_us: float | None, rank_name: Callable[[int], str] = lambda r: f"rank {r}",
                       series: str | None = None) -> tuple[list[Finding], list[Measurement]]:
    """Findings and measurements of a completed run: exact sums, small-message latency, busbw.

    Latency is judged at the smallest size, busbw at the largest (the others are reported); a None
    threshold means the figure is reported, not judged. Findings of `check`, which declares their
    fixes: `wrong-sums`, `slow-latency`, `slow-busbw`. busbw figures are declared as a size sweep of
    `series` (the backend).
    """
    findings: list[Finding] = []
    measurements: list[Measurement] = []

    def found(kind: str, message: str) -> None:
        findings.append(check.finding(kind, Status.FAIL, message))

    sizes = sorted(result["sizes"], key=lambda s: s["bytes"])
    wrong_total = 0
    for entry in sizes:
        bad = {rank: n for rank, n in enumerate(entry["known_sum_wrong_by_rank"]) if n}
        if bad:
            wrong_total += sum(bad.values())
            found("wrong-sums", f"{label}: wrong known sums at {human_bytes(entry['bytes'])} on "
                  + ", ".join(f"{rank_name(r)}: {n} elements" for r, n in bad.items()))
    random_bad = {rank: n for rank, n in enumerate(result["random_check"]["wrong_by_rank"]) if n}
    if random_bad:
        wrong_total += sum(random_bad.values())
        found("wrong-sums", f"{label}: random-data sums differ from the reference on "
              + ", ".join(f"{rank_name(r)}: {n} elements" for r, n in random_bad.items()))
    measurements.append(measure(f"{label}: wrong elements (known sums, random data)", wrong_total, "", at_most=0))

    small = sizes[0]
    latency_us = small["time_s"] * 1e6
    m = measure(f"{label}: latency at {human_bytes(small['bytes'])}", round(latency_us, 1), "us",
                at_most=max_latency_us, param="max_latency_us", samples=[round(t * 1e6, 2) for t in small["time_samples_s"]])
    measurements.append(m)
    if m.ok is False:
        found("slow-latency", f"{label}: latency {latency_us:.1f} us above {max_latency_us:g} us")

    largest = sizes[-1]
    # With one size only, that size gives both figures.
    for entry in sizes[1:] or sizes:
        m = measure(f"{label}: busbw at {human_bytes(entry['bytes'])}", round(entry["busbw_gbps"], 3), "GB/s",
                    at_least=min_busbw_gbps if entry is largest else None, param="min_busbw_gbps",
                    samples=[round(v, 3) for v in entry["busbw_samples_gbps"]],
                    figure=FIGURE_SIZE if series else None, series=series, at=entry["bytes"] if series else None,
                    better="higher" if series else None)
        measurements.append(m)
        if m.ok is False:
            found("slow-busbw", f"{label}: busbw {entry['busbw_gbps']:.2f} GB/s at "
                                f"{human_bytes(entry['bytes'])}, below {min_busbw_gbps:g} GB/s")
    measurements.append(measure(f"{label}: algbw at {human_bytes(largest['bytes'])}", round(largest["algbw_gbps"], 3),
                                "GB/s", samples=[round(v, 3) for v in largest["algbw_samples_gbps"]]))
    return findings, measurements


def no_floor(result: dict[str, Any], label: str, check_id: str, min_busbw_gbps: float | None) -> list[Finding]:
    """`<check_id>.no-floor` (WARN) when no busbw floor judged the run: only its sums were compared."""
    sizes = sorted(result.get("sizes") or [], key=lambda s: s["bytes"])
    if min_busbw_gbps is not None or not sizes:
        return []
    largest = sizes[-1]
    return [Finding(f"{check_id}.no-floor", Status.WARN,
                    f"{label}: busbw {largest['busbw_gbps']:.2f} GB/s at {human_bytes(largest['bytes'])} is reported, "
                    "not judged: no min_busbw_gbps says what the cluster must reach (only the sums were checked)",
                    f"State the bus bandwidth the cluster must reach: `--set {check_id}.min_busbw_gbps=N` (GB/s, at "
                    "the largest message size), from the fabric's nccl-tests figure.")]


def far_below(result: dict[str, Any], params: Any, share: float = FAR_BELOW) -> bool:
    """An all-node reading (the worker's result) under `share` of its bus-bandwidth floor (the largest
    size), or its latency (the smallest) over the ceiling by as much: under DROP_OUT, no transient,
    whatever the other readings say; under FAR_BELOW, none with another reading below the floor; under
    MARGINAL, not measured again at once. Pure."""
    sizes = sorted(result.get("sizes", []) if result else [], key=lambda s: s["bytes"])
    if not sizes:
        return False
    busbw, latency = sizes[-1].get("busbw_gbps"), sizes[0]["time_s"] * 1e6
    return (params.min_busbw_gbps is not None and busbw is not None and busbw < share * params.min_busbw_gbps) \
        or (params.max_latency_us is not None and latency * share > params.max_latency_us)


def recheck_text(rechecks: list[dict[str, Any]]) -> str:
    """'then 310.2 GB/s': the later all-node readings' bus bandwidth (the largest size), in order. Pure."""
    seen = [f"{max(r['result']['sizes'], key=lambda s: s['bytes'])['busbw_gbps']:.1f} GB/s"
            for r in rechecks if r.get("ok") and (r.get("result") or {}).get("sizes")]
    return ("then " + ", ".join(seen)) if seen else ""
