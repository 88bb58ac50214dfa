"""fold() reads common node names as one node-set pattern: the same text as ClusterShell folding them
name by name."""

from __future__ import annotations

import random

from ClusterShell.NodeSet import NodeSet

from preflight.core.nodeset import _fold, fold


def test_the_one_pattern_fold_is_the_text_of_the_name_by_name_fold():
    rng = random.Random(7)
    cases = [[f"gpu{i:04d}" for i in range(1, 1001)], ["gpu1", "gpu2", "gpu10", "login1"], ["n1", "n01"],
             ["a1b2", "a1b3"], ["gpu-a1", "gpu-a2", "gpu-b1"], ["node9", "node10"], ["x"], ["h1.example.com"]]
    for _ in range(200):
        prefix = rng.choice(["gpu", "n", "rack-", "a_b", "c."])
        width = rng.choice([0, 2, 3])
        cases.append([f"{rng.choice([prefix, 'login'])}{str(rng.randint(0, 120)).zfill(width)}"
                      for _ in range(rng.randint(1, 40))])
    for names in cases:
        unique = list(dict.fromkeys(names))
        assert _fold.__wrapped__(tuple(unique)) == str(NodeSet.fromlist(unique)), unique[:5]
    assert fold(["gpu0002", "gpu0001", "gpu0003", "[fd00::1]"]) == "gpu[0001-0003],[fd00::1]"
