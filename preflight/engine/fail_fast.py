"""When `--fail-fast` judges the verdict again: often, but never at a cost that grows with the run.

Judging the verdict reads every result so far (0.3 s for 7,000 results on 1,000 nodes), so judging it
after every result is quadratic: twenty minutes of the coordinator's time for a 1,000-node run.
`Pacer` keeps the judging to a share of the run's time: after a judging that took d seconds, the
next one waits until (1 - share) / share * d seconds have passed (9 d at the default 10%). A small
run judges after every result, as before; a 1,000-node run stops within a few seconds of the
result that made it NO-GO. The verdict itself is judged once more at the end of every run, so a
result that arrives while the pacer waits is never missed, only acted on a little later.
"""

from __future__ import annotations

import time
from typing import Callable


class Pacer:
    def __init__(self, share: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], not {share}")
        self.share, self.clock = share, clock
        self.next_at = float("-inf")
        self.judged = 0

    def due(self) -> bool:
        return self.clock() >= self.next_at

    def done(self, started: float) -> None:
        """A judging that began at `started` (this pacer's clock) has ended."""
        ended = self.clock()
        self.judged += 1
        self.next_at = ended + (ended - started) * (1 - self.share) / self.share
