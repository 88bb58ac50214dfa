from __future__ import annotations

import itertools
import math
import random

import pytest

from preflight.history import stats


def brute_force_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of U by enumerating every split of the pooled values."""
    pooled = a + b
    observed = stats.mann_whitney_u(a, b).statistic
    centre = len(a) * len(b) / 2
    extreme = total = 0
    for picked in itertools.combinations(range(len(pooled)), len(a)):
        xs = [pooled[i] for i in picked]
        ys = [pooled[i] for i in range(len(pooled)) if i not in picked]
        u = sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)
        total += 1
        extreme += abs(u - centre) >= abs(observed - centre) - 1e-9
    return extreme / total


@pytest.mark.parametrize("seed", range(6))
def test_exact_mann_whitney_matches_enumeration(seed):
    rng = random.Random(seed)
    a = [rng.gauss(0, 1) for _ in range(rng.randint(2, 6))]
    b = [rng.gauss(0.8, 1) for _ in range(rng.randint(2, 6))]
    result = stats.mann_whitney_u(a, b)
    assert result.method == "exact"
    assert math.isclose(result.p_value, brute_force_p(a, b), rel_tol=1e-9)


def test_normal_approximation_close_to_exact_for_larger_samples():
    rng = random.Random(7)
    a = [rng.gauss(0, 1) for _ in range(18)]
    b = [rng.gauss(0.7, 1) for _ in range(18)]
    exact = stats.mann_whitney_u(a, b)
    approx = stats.mann_whitney_u(a + [a[0]], b + [b[0]])  # a tie forces the approximation
    assert exact.method == "exact" and approx.method.startswith("normal")
    assert abs(math.log10(exact.p_value) - math.log10(approx.p_value)) < 0.5


def test_identical_samples_are_not_different():
    assert stats.mann_whitney_u([5.0] * 10, [5.0] * 12).p_value == 1.0


def test_separated_samples_reach_the_smallest_exact_p():
    result = stats.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert math.isclose(result.p_value, 2 / math.comb(10, 5))


def test_percentile_matches_numpy_linear_method():
    numpy = pytest.importorskip("numpy")
    rng = random.Random(3)
    values = [rng.uniform(0, 100) for _ in range(37)]
    for q in (0, 5, 25, 50, 95, 100):
        assert math.isclose(stats.percentile(values, q), float(numpy.percentile(values, q)))


def test_robust_sigma_falls_back_when_most_values_are_equal():
    values = [10.0] * 9 + [12.0]
    assert stats.mad(values) == 0
    assert stats.robust_sigma(values) > 0


def test_rank_of_counts_ties_half():
    assert stats.rank_of(2.0, [1.0, 2.0, 3.0, 4.0]) == 37.5
