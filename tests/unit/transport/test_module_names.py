"""The modules the transports start by name (`python -m MODULE` on a node or beside the coordinator).

preflight.transport may not import preflight.integrations (tests/unit/test_layers.py), so the
Kubernetes transport names its bridge as a declared constant, BRIDGE_MODULE, rather than by a
reference; these tests keep that name and every other module name in the transports true.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util

from preflight.transport.k8s import BRIDGE_FAILURE_EXIT, BRIDGE_MODULE, K8sTransport
from tests.conftest import ROOT


def _runs_as_main(module_name: str) -> bool:
    """The module has a main() and the `if __name__ == "__main__":` that `python -m` needs."""
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin, module_name
    tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    has_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    guarded = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
    return has_main and guarded


def test_the_bridge_module_the_kubernetes_transport_starts_exists_and_runs_as_a_program():
    module = importlib.import_module(BRIDGE_MODULE)
    assert module.__name__ == BRIDGE_MODULE and callable(module.main)
    assert module.FAILED == BRIDGE_FAILURE_EXIT  # what the transport reads as "the pod never ran"
    assert _runs_as_main(BRIDGE_MODULE)
    argv = K8sTransport("node-1", namespace="ns", image="img", run_id="r1").wrap(["python3", "-V"])
    assert argv[1:3] == ["-m", BRIDGE_MODULE]


def test_every_module_a_transport_names_in_a_string_is_importable():
    named = set()
    for path in sorted((ROOT / "preflight" / "transport").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith("preflight.") and node.value.replace(".", "").replace("_", "").isalnum():
                named.add(node.value)
    assert BRIDGE_MODULE in named
    assert [name for name in sorted(named) if importlib.util.find_spec(name) is None] == []
