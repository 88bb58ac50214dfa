"""Record Prometheus' answers for monitoring.alarms' unit tests: `python tests/data/monitoring/record.py`.

Starts Debian's prometheus on loopback (as tests/integration/test_prometheus_alarms.py does) with the
rules `preflight alerts` writes plus two planted ones: BrokenUtilisation, loaded but failing to
evaluate ("vector cannot contain metrics with the same labelset"), and BlindUtilisation, healthy but
selecting a job that no longer exists. Two stand-in dcgm exporters (busy-node, idle-node) are
scraped. Every answer monitoring.alarms asks for is written to rules_broken_and_blind.json, keyed by
path and query, as Prometheus gave it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from preflight.integrations import alerts  # noqa: E402
from preflight_checks.monitoring.alarms import MonitoringAlarms  # noqa: E402
from tests.integration.test_prometheus_alarms import Exporter, get, start_prometheus, stop, wait_for  # noqa: E402

PLANTED = """
  - name: planted
    rules:
    - alert: BrokenUtilisation
      expr: abs({__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_XID_ERRORS"}) < 50
      for: 1s
    - alert: BlindUtilisation
      expr: avg_over_time(DCGM_FI_DEV_GPU_UTIL{job="old-dcgm"}[5s]) < 50
      for: 1s
"""


def main() -> None:
    exporters = {"busy-node": Exporter("busy-node", 97), "idle-node": Exporter("idle-node", 3)}
    tmp = Path(tempfile.mkdtemp(prefix="record-alarms-"))
    rules = tmp / "rules.yml"
    rules.write_text(alerts.build(window="5s", for_="1s") + PLANTED)
    proc, url = start_prometheus(tmp, "prometheus", [e.address for e in exporters.values()], rules)
    answers: dict[str, object] = {}
    try:
        wait_for("a GPU series", lambda: get(f"{url}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL")["data"]["result"])
        time.sleep(3)  # every rule evaluated a few times

        def recording_get(path: str, **query: str) -> object:
            import urllib.error
            import urllib.parse

            full = f"{url}{path}?{urllib.parse.urlencode(query)}" if query else f"{url}{path}"
            try:
                body = get(full)
            except urllib.error.HTTPError as exc:
                body = json.loads(exc.read().decode())
            answers[f"{path}?{urllib.parse.urlencode(query)}"] = body
            if body.get("status") != "success":
                from preflight_checks.monitoring.alarms import QueryFailed

                raise QueryFailed(f"answered {path} with {body.get('error')}")
            return body["data"]

        nodes = [{"name": n, "address": "", "kind": "ssh"} for n in exporters]
        MonitoringAlarms()._ask({"url": "http://prometheus:9090", "nodes": nodes}, recording_get)
    finally:
        stop(proc)
        for exporter in exporters.values():
            exporter.stop()
    out = {"_source": "tests/data/monitoring/record.py against prometheus 2.42.0+ds (Debian 12), loopback",
           "nodes": ["busy-node", "idle-node"], "answers": answers}
    (HERE / "rules_broken_and_blind.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
