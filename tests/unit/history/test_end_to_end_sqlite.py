"""The whole tour of fleet history on an SQLite file: see scenario.py."""

from __future__ import annotations

from preflight.history.store import Store
from tests.unit.history import scenario


def test_history_end_to_end_on_sqlite(tmp_path):
    with Store(tmp_path / "history.sqlite") as store:
        scenario.exercise(store)
        assert store.size_bytes() > 0
