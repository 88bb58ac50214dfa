"""The stand-in NVML library's node descriptions (tests/nvml/descriptions) are what tests/nvml/describe.py
makes of the real `nvidia-smi -q` readings, each keeping its source; each fault variant names the
reading it came from and what was put in."""

from __future__ import annotations

import json

from tests.conftest import ROOT
from tests.nvml.describe import FAULTS, READINGS, descriptions, render
from tests.nvml.standin import DESCRIPTIONS


def test_descriptions_are_current():
    stale = [name for name, made in descriptions().items()
             if not (DESCRIPTIONS / f"{name}.json").is_file() or (DESCRIPTIONS / f"{name}.json").read_text() != render(made)]
    assert stale == [], "run: python tests/nvml/describe.py"


def test_every_reading_has_a_description_that_keeps_its_source():
    made = descriptions()
    for reading in READINGS.glob("*.txt"):
        if "\nGPU " not in reading.read_text():
            continue  # a header alone (tests/data/real keeps what a parser reads of it): no node to describe
        source = json.loads(reading.with_name(reading.name + ".source.json").read_text())
        kept = made[reading.stem]["source"]
        assert kept["reading"] == str(reading.relative_to(ROOT)) and kept["published"] == source["source"]
        assert made[reading.stem]["gpus"], reading


def test_every_fault_names_its_reading_and_changes_it():
    made = descriptions()
    for name in FAULTS:
        variant = made[f"fault-{name}"]
        base = made[variant["fault"]["derived_from"].removesuffix(".json")]
        assert variant["fault"]["what"] and variant["source"] == base["source"]
        assert {k: v for k, v in variant.items() if k != "fault"} != base
    assert {p.stem for p in DESCRIPTIONS.glob("*.json")} == set(made)
