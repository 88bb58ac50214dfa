"""Opening a store written by an older preflight migrates it in place, keeping what it holds."""

from __future__ import annotations

import sqlite3

from preflight.history import queries
from preflight.history.schema import LATEST
from preflight.history.store import Store
from tests.unit.history import fleet

# Schema version 1 as a preflight of that version created it on SQLite: written out here, not taken
# from preflight.history.schema, so that the test holds whatever the code's idea of v1 becomes.
V1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL PRIMARY KEY, applied DATETIME NOT NULL,
    application VARCHAR(40) NOT NULL, preflight_version VARCHAR(40) NOT NULL);
CREATE TABLE runs (id INTEGER NOT NULL PRIMARY KEY, run_key VARCHAR(32) NOT NULL UNIQUE, started DATETIME NOT NULL,
    finished DATETIME, verdict VARCHAR(16) NOT NULL, level VARCHAR(16) NOT NULL, profile TEXT NOT NULL,
    preflight_version VARCHAR(40) NOT NULL, command TEXT NOT NULL, config_digest VARCHAR(16) NOT NULL,
    node_count INTEGER NOT NULL, report_schema INTEGER, source TEXT NOT NULL, ingested DATETIME NOT NULL);
CREATE INDEX ix_runs_started ON runs (started);
CREATE TABLE nodes (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL UNIQUE);
CREATE TABLE node_images (run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id INTEGER NOT NULL REFERENCES nodes (id), digest VARCHAR(16), driver TEXT, cuda TEXT, cuda_driver TEXT,
    nccl TEXT, kernel TEXT, os TEXT, torch TEXT, tensorflow TEXT, gpu_model TEXT, gpu_count INTEGER, vbios TEXT,
    PRIMARY KEY (run_id, node_id));
CREATE TABLE figure_keys (id INTEGER NOT NULL PRIMARY KEY, check_id VARCHAR(200) NOT NULL, name TEXT NOT NULL,
    series TEXT NOT NULL, at TEXT NOT NULL, unit VARCHAR(40) NOT NULL, figure VARCHAR(16) NOT NULL,
    direction VARCHAR(8) NOT NULL, comparison VARCHAR(4) NOT NULL,
    CONSTRAINT uq_figure_keys UNIQUE (check_id, name, series, at, unit));
CREATE TABLE figures (run_id INTEGER NOT NULL, node_id INTEGER NOT NULL, key_id INTEGER NOT NULL, seq INTEGER NOT NULL, value FLOAT NOT NULL, threshold FLOAT, ok BOOLEAN, samples_n INTEGER NOT NULL, spread FLOAT,
    PRIMARY KEY (run_id, node_id, key_id, seq)) WITHOUT ROWID;
CREATE INDEX ix_figures_key_run ON figures (key_id, run_id);
CREATE TABLE findings (id INTEGER NOT NULL PRIMARY KEY, run_id INTEGER NOT NULL, check_id VARCHAR(200) NOT NULL,
    node_id INTEGER NOT NULL, finding_id VARCHAR(200) NOT NULL, level VARCHAR(8) NOT NULL);
INSERT INTO schema_version VALUES (1, '2026-10-01 00:00:00.000000', 'preflight-history', '0.0.9');
"""

BUSBW = "nccl (8 GPUs): busbw at 1 GiB"


def write_v1_store(path, busbw_by_node: dict[str, float]) -> None:
    """A v1 store holding one run, with one figure per node, as v1 recorded it."""
    with sqlite3.connect(path) as conn:
        conn.executescript(V1)
        conn.execute("INSERT INTO runs VALUES (1, 'k1', '2026-10-02 10:00:00.000000', NULL, 'GO', 'standard', '', "
                     "'0.0.9', 'preflight run', 'cd', ?, 1, '', '2026-10-02 10:05:00.000000')", (len(busbw_by_node),))
        conn.execute("INSERT INTO figure_keys VALUES (1, 'collectives.local', ?, 'nccl', '1073741824', 'GB/s', 'size', "
                     "'higher', '>=')", (BUSBW,))
        for i, (node, value) in enumerate(sorted(busbw_by_node.items()), start=1):
            conn.execute("INSERT INTO nodes VALUES (?, ?)", (i, node))
            conn.execute("INSERT INTO node_images (run_id, node_id, digest, driver, gpu_count) "
                         "VALUES (1, ?, 'aaaabbbbccccdddd', '535.104.05', 8)", (i,))
            conn.execute("INSERT INTO figures VALUES (1, ?, 1, 0, ?, 380.0, 1, 5, 0.02)", (i, value))


def test_a_version_1_store_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "history.sqlite"
    values = {"gpu01": 470.0, "gpu02": 466.0, "gpu03": 474.0}
    write_v1_store(path, values)
    with Store(path, create=False) as store:
        assert store.migrated == list(range(2, LATEST + 1))
        keys, rows = queries.trend(store, figure=BUSBW)
        assert [(r.run_id, r.n, r.median, r.low, r.high) for r in rows] == [(1, 3, 470.0, 466.0, 474.0)]
        assert rows[0].image == "aaaabbbbccccdddd"
        # ... and the migrated store records new runs beside the old one.
        store.ingest(fleet.fleet_report(fleet.node_names(6), fleet.START, seed=3))
        assert len(queries.list_runs(store)) == 2
        with store.connect() as conn:
            versions = [r[0] for r in conn.exec_driver_sql("SELECT version FROM schema_version ORDER BY version")]
    assert versions == list(range(1, LATEST + 1))
    with Store(path, create=False) as again:
        assert again.migrated == []  # nothing left to do the second time


def test_a_new_store_starts_at_the_latest_version(tmp_path):
    with Store(tmp_path / "history.sqlite") as store:
        assert store.migrated == list(range(1, LATEST + 1))
