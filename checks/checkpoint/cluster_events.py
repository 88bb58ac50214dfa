"""What one kill-and-resume launch came to, read from the events its ranks printed
(preflight.workers.resume_train) and from how each node's torchrun ended. Pure.

Times are the ranks' wall clocks (seconds since the epoch); across nodes they are as close as the
nodes' clocks are (NTP keeps them within milliseconds, well below the seconds measured here).
"""

from __future__ import annotations

import statistics
from typing import Any


def _of(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == name]


def _saves(events: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The ranks' "saved" events, grouped by the step they saved."""
    saves: dict[int, list[dict[str, Any]]] = {}
    for e in _of(events, "saved"):
        saves.setdefault(int(e["step"]), []).append(e)
    return saves


def _save_figures(saves: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each save across the ranks (its slowest rank, its bytes) and the median save time and size."""
    per_save = [max(s["save_s"] for s in group) for _, group in sorted(saves.items())]
    out: dict[str, Any] = {"saves": [{"step": step, "save_s": max(s["save_s"] for s in group),
                                      "bytes": sum(s.get("bytes", 0) for s in group), "ranks": len(group)}
                                     for step, group in sorted(saves.items())]}
    out["save_s"] = statistics.median(per_save) if per_save else None
    if out["saves"]:
        out["save_bytes"] = statistics.median(s["bytes"] for s in out["saves"])
    return out


def _after_kill(events: list[dict[str, Any]], kills: list[dict[str, Any]],
                saves: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """What followed the first kill: when it was noticed, which nodes restarted, where and how fast they resumed."""
    kill = min(kills, key=lambda e: e["t"])
    kill_t = kill["t"]
    out: dict[str, Any] = {"kill": {"node": kill["node"], "step": kill["step"], "phase": kill.get("phase"), "t": kill_t,
                                    "ranks": sorted(e["rank"] for e in kills)}}
    out["saved_before_kill"] = max((s for s in saves if any(e["t"] < kill_t for e in saves[s])), default=0)
    after = [e for e in events if e.get("t", 0) > kill_t]
    signs = [e["t"] for e in after if e.get("event") == "start" or (e.get("ok") is False and e["node"] != kill["node"])]
    out["noticed_s"] = round(min(signs) - kill_t, 3) if signs else None
    out["restarted_nodes"] = sorted({e["node"] for e in _of(after, "start")})
    out["resume_choices"] = [{"node": e["node"], "rank": e["rank"], "step": e["step"], "complete": e.get("complete"),
                              "path": e.get("path")} for e in _of(after, "resume")]
    resumed = _of(after, "resumed")
    if resumed:
        out["resumed_step"] = min(e["step"] for e in resumed)
        out["resume_s"] = round(max(e["t"] for e in resumed) - kill_t, 3)
        out["load_s"] = max(e.get("load_s", 0.0) for e in resumed)
        out["steps_lost"] = kill["step"] - out["resumed_step"]
    return out


def timeline(events: list[dict[str, Any]], agents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Figures and facts of one launch: the kill, when it was noticed, the resume, saves, the result."""
    saves = _saves(events)
    out: dict[str, Any] = _save_figures(saves)
    visible: dict[str, list[str]] = {}
    for e in _of(events, "visible"):
        visible.setdefault(e["node"], e.get("nodes", []))
    out["visible"] = visible
    out["result"] = next((e for e in events if e.get("ok") is True), None)
    out["errors"] = [e for e in events if e.get("ok") is False]
    out["agents"] = agents
    kills = _of(events, "kill")
    if kills:
        out.update(_after_kill(events, kills, saves))
    return out


def stopped_by_us(agents: dict[str, dict[str, Any]]) -> list[str]:
    """Nodes whose torchrun was still running at the launch's deadline and was stopped."""
    return sorted(n for n, a in agents.items() if a.get("killed"))


def agent_facts(agents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """How each node's torchrun ended, without the ranks' reports (kept as events)."""
    keep = ("returncode", "killed", "transport_failure", "duration_s", "rendezvous", "last_error")
    return {node: {k: a.get(k) for k in keep} | {"last_error": (a.get("last_error") or "")[-600:]}
            for node, a in agents.items()}
