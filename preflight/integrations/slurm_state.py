"""What Slurm says of a node, as every reader of Slurm's answers (scontrol and sinfo, their text and
JSON forms: preflight.integrations.slurm, slurm_json, slurm_tables) returns it."""

from __future__ import annotations

from dataclasses import dataclass, field

REASON_PREFIX = "preflight:"


class SlurmError(Exception):
    """Slurm could not be asked (no allocation, no scontrol, scontrol failed); the message says why."""


@dataclass
class NodeState:
    """One node as `scontrol show node -o` describes it."""

    name: str
    address: str = ""
    state: str = ""  # IDLE, MIXED+DRAIN, DOWN*+DRAIN, ...
    reason: str = ""  # without the " [user@time]" Slurm appends, which is kept apart:
    fields: dict[str, str] = field(default_factory=dict)
    reason_user: str = ""
    reason_time: str = ""

    @property
    def drained(self) -> bool:
        """Drained or draining (a node in DRAIN state keeps its running jobs)."""
        return "DRAIN" in self.state.upper()

    @property
    def drained_by_preflight(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)
