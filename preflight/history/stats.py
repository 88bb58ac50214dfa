"""Small, dependency-free statistics: order statistics, robust spread, and the Mann-Whitney U test.

Written out here rather than taken from scipy, which preflight does not depend on. Every function
takes plain sequences of finite floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

# Scale of the median absolute deviation to the standard deviation of a normal distribution.
MAD_TO_SIGMA = 1.4826
# Iglewicz and Hoaglin's modified z-score: 0.6745 (x - median) / MAD; the same as (x - median) / (1.4826 MAD).
# Fallback when MAD is 0 (more than half the values equal): the mean absolute deviation, scaled.
MEAN_AD_TO_SIGMA = 1.253314


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: Sequence[float], q: float, *, ordered: bool = False) -> float:
    """The q-th percentile (0-100), linear between order statistics (numpy's default method)."""
    data = list(values) if ordered else sorted(values)
    if not data:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0-100, not {q}")
    pos = (len(data) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def mad(values: Sequence[float], centre: float | None = None) -> float:
    """Median absolute deviation from the median (unscaled)."""
    centre = median(values) if centre is None else centre
    return median([abs(v - centre) for v in values])


def robust_sigma(values: Sequence[float], centre: float | None = None) -> float:
    """A standard-deviation-like spread that a few outliers do not move: 1.4826 MAD, or 1.2533 mean
    absolute deviation when MAD is 0 (Iglewicz & Hoaglin); 0 when every value is the centre."""
    centre = median(values) if centre is None else centre
    spread = MAD_TO_SIGMA * mad(values, centre)
    if spread == 0:
        spread = MEAN_AD_TO_SIGMA * sum(abs(v - centre) for v in values) / len(values)
    return spread


def rank_of(value: float, population: Sequence[float]) -> float:
    """Percentile rank (0-100) of value within population: the share below plus half the ties."""
    if not population:
        raise ValueError("rank within no values")
    below = sum(1 for v in population if v < value)
    equal = sum(1 for v in population if v == value)
    return 100.0 * (below + 0.5 * equal) / len(population)


def relative_spread(samples: Sequence[float]) -> float | None:
    """(max - min) / |median| of repeated samples, as Measurement.spread has it; None with fewer than two."""
    if len(samples) < 2:
        return None
    ordered = sorted(samples)
    mid = ordered[len(ordered) // 2]
    if not mid:
        return None
    return (ordered[-1] - ordered[0]) / abs(mid)


@dataclass(frozen=True)
class TestResult:
    test: str  # the test's name, as reports show it
    statistic: float
    p_value: float
    method: str  # "exact" or "normal approximation (tie-corrected)"


MANN_WHITNEY = "Mann-Whitney U"
EXACT_LIMIT = 20  # both samples at most this large and no ties: the exact distribution of U


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Two-sided Mann-Whitney U test of whether a and b come from the same distribution.

    U is the count of pairs (x from a, y from b) with x > y, ties counting one half. Small samples
    without ties get the exact p-value; others the normal approximation with tie correction and
    continuity correction.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs values on both sides")
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(pooled)
    ties: list[int] = []
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        average = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = average
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    rank_sum_a = sum(r for r, (_, side) in zip(ranks, pooled) if side == 0)
    u1 = rank_sum_a - n1 * (n1 + 1) / 2
    u_min = min(u1, n1 * n2 - u1)
    if not ties and n1 <= EXACT_LIMIT and n2 <= EXACT_LIMIT:
        counts = _u_distribution(n1, n2)
        total = sum(counts)
        tail = sum(counts[: int(math.floor(u_min)) + 1]) / total
        return TestResult(MANN_WHITNEY, u1, min(1.0, 2 * tail), "exact")
    n = n1 + n2
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return TestResult(MANN_WHITNEY, u1, 1.0, "normal approximation (tie-corrected)")
    z = max(abs(u1 - n1 * n2 / 2) - 0.5, 0.0) / math.sqrt(variance)
    return TestResult(MANN_WHITNEY, u1, math.erfc(z / math.sqrt(2)), "normal approximation (tie-corrected)")


def _u_distribution(n1: int, n2: int) -> list[int]:
    """How many orderings of n1 + n2 distinct values give each U from 0 to n1 n2."""
    # f[i][j] is the distribution for sizes i and j, built from f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u).
    table: dict[tuple[int, int], list[int]] = {}
    for i in range(n1 + 1):
        for j in range(n2 + 1):
            if i == 0 or j == 0:
                table[(i, j)] = [1]
                continue
            size = i * j + 1
            dist = [0] * size
            for u, c in enumerate(table[(i - 1, j)]):
                dist[u + j] += c
            for u, c in enumerate(table[(i, j - 1)]):
                dist[u] += c
            table[(i, j)] = dist
    return table[(n1, n2)]


BOOTSTRAP_RESAMPLES = 1000


@lru_cache(maxsize=16)
def _resample_indices(n: int, resamples: int, seed: int) -> Any:
    """The resampling of n observations, drawn once per size and seed and shared by every figure."""
    import numpy

    return numpy.random.default_rng((seed, n)).integers(0, n, size=(resamples, n))
BOOTSTRAP_MAX_EACH = 100  # observations resampled on each side: the ones nearest the change


def bootstrap_change(a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                     confidence: float = 0.95, seed: int = 0,
                     max_each: int = BOOTSTRAP_MAX_EACH) -> tuple[float | None, float | None]:
    """The `confidence` interval of the relative change of the median, (median(b) - median(a)) / |median(a)|,
    by the percentile bootstrap: each side resampled with replacement (numpy, vectorised), the same
    seed giving the same interval. At most `max_each` observations on each side take part: the last of
    `a` and the first of `b` (in the order given: oldest first, the ones nearest a change). (None,
    None) with fewer than two observations on a side, or where the resampled medians of `a` are
    mostly zero; a figure that never varied has the change itself for both ends."""
    import numpy

    if len(a) < 2 or len(b) < 2:
        return None, None
    a, b = list(a)[-max_each:], list(b)[:max_each]
    if len(set(a)) == 1 and len(set(b)) == 1:
        change = (b[0] - a[0]) / abs(a[0]) if a[0] else None
        return change, change
    side_a, side_b = numpy.asarray(a, dtype=float), numpy.asarray(b, dtype=float)
    ma = numpy.median(side_a[_resample_indices(len(a), resamples, seed)], axis=1)
    mb = numpy.median(side_b[_resample_indices(len(b), resamples, seed + 1)], axis=1)
    usable = ma != 0
    if usable.sum() < resamples // 2:
        return None, None
    changes = (mb[usable] - ma[usable]) / numpy.abs(ma[usable])
    tail = (1 - confidence) / 2 * 100
    low, high = numpy.percentile(changes, [tail, 100 - tail])
    return float(low), float(high)
