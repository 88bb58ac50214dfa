"""Results files are validated by a compiled validator first (jsonschema-rs), and by jsonschema where it
refuses: the two must accept and refuse the same documents, and a refusal still names the field."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from preflight.core.results_file import ResultsFileError, fast_valid, parse_report, schema
from tests.conftest import DATA


def stored_run() -> dict:
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    return data


def damaged(change) -> dict:
    data = copy.deepcopy(stored_run())
    change(data)
    return data


DOCUMENTS = {
    "as stored": stored_run(),
    "a status no check has": damaged(lambda d: d["results"][0].update(status="MAYBE")),
    "a result without its node": damaged(lambda d: d["results"][1].pop("node")),
    "a schema version to come": damaged(lambda d: d.update(schema_version=2)),
    "a figure as text": damaged(lambda d: d["results"][2]["measurements"][0].update(value="fast")),
    "a whole figure": damaged(lambda d: d["results"][2]["measurements"][0].update(value=3.0)),
    "a boolean for a duration": damaged(lambda d: d["results"][0].update(duration_s=True)),
    "a NaN figure": damaged(lambda d: d["results"][2]["measurements"][0].update(value=float("nan"))),
    "results that are not a list": damaged(lambda d: d.update(results={"n1": []})),
}


@pytest.mark.parametrize("name", DOCUMENTS)
def test_the_compiled_validator_accepts_what_jsonschema_accepts(name):
    document, whole = DOCUMENTS[name], schema()
    exact = jsonschema.Draft202012Validator(whole).is_valid(document)
    fast = fast_valid(document, whole, f"test {name}")
    assert exact or not fast  # never accepts what jsonschema refuses
    # A NaN is no JSON value for jsonschema-rs: it refuses, and jsonschema decides (and accepts).
    assert fast is (exact and name != "a NaN figure")


def test_a_refused_file_still_names_its_field():
    text = json.dumps(DOCUMENTS["a status no check has"])
    with pytest.raises(ResultsFileError, match=r"field results\[0\]\.status: 'MAYBE' is not one of"):
        parse_report(text, "results.json")
    assert parse_report(json.dumps(stored_run()), "results.json").results
