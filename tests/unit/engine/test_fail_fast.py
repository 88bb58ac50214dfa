"""--fail-fast's pacing: judging the verdict stays a share of the run's time, whatever the run's size."""

import pytest

from preflight.engine.fail_fast import Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_result_is_judged_at_once():
    assert Pacer(clock=Clock()).due()


def test_after_a_judging_of_d_seconds_the_next_waits_nine_d_at_a_tenth():
    clock = Clock()
    pacer = Pacer(share=0.1, clock=clock)
    started = clock.now
    clock.now += 0.3  # judging 7,000 results takes about this long
    pacer.done(started)
    clock.now += 2.6
    assert not pacer.due()
    clock.now += 0.11
    assert pacer.due() and pacer.judged == 1


def test_judging_time_is_a_bounded_share_of_any_run():
    """10,000 results arriving 1 ms apart, each judging costing 1 ms per 100 results so far: the
    pacer judges a few hundred times, and judging takes about a tenth of the run's time, where judging
    after every result would take 500 s."""
    clock = Clock()
    pacer = Pacer(share=0.1, clock=clock)
    spent = 0.0
    begun = clock.now
    for count in range(1, 10_001):
        clock.now += 0.001
        if pacer.due():
            started = clock.now
            cost = count / 100 * 0.001
            clock.now += cost
            spent += cost
            pacer.done(started)
    assert spent / (clock.now - begun) <= 0.11
    assert 10 < pacer.judged < 2_000


@pytest.mark.parametrize("share", [0, -0.5, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(ValueError):
        Pacer(share=share)
