"""The data of adaptive fault isolation (preflight.launch.isolation): what a group measured, what a
search asks for, what came back, what was named, and the helpers that describe them. Pure."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GroupResult:
    """What one group's burst measured. `ok` None: it could not be measured (no verdict)."""

    ok: bool | None
    figure: float | None = None  # the group's figure (busbw, Gbit/s, ...), shown in the rounds
    times_s: dict[str, float] | None = None  # per node: the time its ranks took (the slowest of them)
    note: str = ""  # how it failed, or what the figure is

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "figure": self.figure, "note": self.note}


@dataclass(frozen=True)
class Probe:
    """A group a search wants measured: fixed members plus known-good partners the engine picks."""

    members: tuple[str, ...] = ()
    # One entry per known-good partner wanted: the topology group to draw it from (None: any).
    partners: tuple[str | None, ...] = ()
    strict: bool = False  # partners only from the topology groups named
    at_least: int | None = None  # fewest partners that will do (None: all of them)
    avoid: frozenset[str] = frozenset()  # never as partners
    # Instead of members: whatever of these nodes no live search holds and no fault was named on.
    pool: frozenset[str] | None = None
    purpose: str = ""
    search: bool = False  # still narrowing down (the clearance waits until no search is)
    optional: bool = False  # left out this round (not measured) when its nodes or partners are not free
    # Not measured when a member was confirmed at fault meanwhile (by another search, while this waited).
    unless_blamed: bool = False


@dataclass
class Outcome:
    """A probe as the engine ran it. `result` None: not run (`why_not`)."""

    round: int | None
    group: list[str]
    partners: list[str]
    result: GroupResult | None
    why_not: str = ""

    @property
    def bad(self) -> bool:
        return self.result is not None and self.result.ok is False

    @property
    def good(self) -> bool:
        return self.result is not None and self.result.ok is True

    @property
    def figure(self) -> float | None:
        return self.result.figure if self.result is not None else None


@dataclass
class Attribution:
    """One component named at fault, or a set the evidence could not narrow down (`ambiguous`).

    kind: node (members: the node), link (the two nodes), boundary (the two topology groups),
    straggler (the node; `figures` its time against its groups' medians), unexplained (the nodes
    among which the fault is; `candidates` what it could be).
    """

    kind: str
    members: list[str]
    evidence: list[str]
    rounds: list[int]
    confidence: str = "confirmed"  # "confirmed": reproduced against different known-good nodes
    ambiguous: bool = False
    candidates: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    # How it was confirmed: bad_in of `of` measurements, the partners, each measurement (pair_task).
    confirmation: dict[str, Any] = field(default_factory=dict)

    @property
    def sure(self) -> bool:
        """Confirmed, and of one component: what a blame rests on."""
        return self.confidence == "confirmed" and not self.ambiguous

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Trail = list[tuple[int | None, str]]  # (round, what it showed): how a search got where it is


def label(group: list[str] | tuple[str, ...]) -> str:
    group = list(group)
    if len(group) <= 4:
        return "{" + ", ".join(group) + "}"
    return f"{len(group)} nodes ({group[0]} .. {group[-1]})"


def state(outcome: Outcome) -> str:
    if outcome.result is None:
        return f"not run ({outcome.why_not})"
    if outcome.result.ok is None:
        return "not measured" + (f" ({outcome.result.note})" if outcome.result.note else "")
    text = "good" if outcome.result.ok else "bad"
    if outcome.result.figure is not None:
        text += f" ({outcome.result.figure:.3g})"
    if not outcome.result.ok and outcome.result.note:
        text += f": {outcome.result.note}"
    return text


def step(outcomes: list[Outcome], what: str = "") -> tuple[int | None, str]:
    rounds = [o.round for o in outcomes if o.round is not None]
    where = f"round {rounds[0]}" if rounds else "not run"
    parts = "; ".join(f"{label(o.group)} {state(o)}" for o in outcomes)
    return (rounds[0] if rounds else None, f"{where}: {what + ': ' if what else ''}{parts}")


def attribution(kind: str, members: list[str], trail: Trail, **kwargs: Any) -> Attribution:
    return Attribution(kind=kind, members=list(members), evidence=[text for _, text in trail],
                       rounds=sorted({r for r, _ in trail if r is not None}), **kwargs)


def split(nodes: list[str], arity: int) -> list[list[str]]:
    """`arity` parts of near-equal size, in order, each of two nodes where that is possible."""
    return split_at_most(nodes, max(2, min(arity, len(nodes) // 2)))


def split_at_most(nodes: list[str], count: int) -> list[list[str]]:
    """At most `count` parts of near-equal size, in order (single nodes allowed)."""
    count = max(1, min(count, len(nodes)))
    size, extra = divmod(len(nodes), count)
    parts, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        parts.append(nodes[start:end])
        start = end
    return parts


def pass_rounds(count: int) -> int:
    """The rounds a check gives its adaptive pass at `count` nodes unless told otherwise: 44 at 8 nodes
    and fewer, 4 more each time the cluster doubles (72 at 1,024). Above what the slowest fault type's
    passes took in 95 of 100 simulated runs under a real fabric's noise (bench/error_rates.py --model
    fabric: 36, 41, 47 and 50 rounds at 8, 64, 256 and 1,024 nodes; a boundary at 8 nodes needs the
    most); a pass cut short confirms nothing it had not measured again, and names suspects."""
    return 44 + 4 * max(0, math.ceil(math.log2(max(count, 1) / 8)))


@dataclass
class IsolationParams:
    arity: int = 8  # parts a bad group is split into, all measured in one round
    max_rounds: int | None = None  # None: a safety limit far above what any search needs
    clearance: bool = True  # what was bad, without the components named, measured again
    max_passes: int = 4  # how many times a clearance that is still bad starts the search again
    straggler_k: float = 5.0  # slow: above median + k * MAD of its group ...
    straggler_min_excess: float = 0.25  # ... and above median * (1 + this)
    straggler_min_group: int = 4  # nodes with times a group needs before its median means anything
    straggler_partners: int = 4  # known-good nodes a straggler is measured again among
    straggler_confirm: int = 3  # slow in at least this many observations (and most), the first slow one not counted
    # Blame only when confirmed (preflight.launch.isolation_plan.confirm): bad in at least confirm_bad
    # of at most confirm_of measurements, with confirm_partners different known-good partners at least.
    confirm_bad: int = 4
    confirm_of: int = 4
    confirm_partners: int = 2
    # What confirmed is measured again after the searches, until confirm_span rounds after its first bad
    # reading (preflight.launch.isolation_verify); a partner is trusted after trust_after good readings in
    # different groups; shared_at_least confirmed nodes (and shared_share) of one topology group name it.
    confirm_span: int = 6
    verify: bool = True
    trust_after: int = 2
    shared_at_least: int = 3
    shared_share: float = 0.25
    # One good reading with a known-good partner clears an end of a bad pair only when it reads at least
    # this many times the pair's figure; nearer, a second good reading is needed (a slow node now and then
    # just above the floor is not cleared by one lucky burst and then blamed as a link). None: one clears.
    clear_above: float | None = 1.25


LATER = 2  # readings at the end of a pass that must all be bad for a blame to stand
HOLDS = 0.7  # a part bad at over depth / HOLDS is too shallow to hold the fault of its whole


def holds(outcome: Outcome, depth: float | None) -> bool:
    """Whether a bad part can hold the fault that made its whole read `depth`: it reads about as low
    (not above depth / HOLDS). A link at 0.3 of the figure reads 0.3 in every group that holds it; a
    part that read 0.76 beside it is noise or another, shallower fault, and the rest is searched too. Pure."""
    return outcome.bad and (depth is None or depth <= 0 or outcome.figure is None or outcome.figure <= depth / HOLDS)
