"""The store on SQLite: where it lives, what it writes, and what it does when the file is not usable."""

from __future__ import annotations

import sqlite3
import threading

import pytest
import sqlalchemy

from preflight.history import record_run
from preflight.history.store import (ForeignStore, HistoryError, NewerStore, Store, StoreCorrupt, StoreFull, StoreLocked,
                                     StoreMissing, default_path, resolve, translate)
from tests.unit.history import fleet, scenario


@pytest.fixture
def small_run():
    return fleet.fleet_report(fleet.node_names(6), fleet.START, seed=1)


def test_default_store_follows_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "preflight" / "history.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local" / "share" / "preflight" / "history.sqlite"


def test_urls_and_paths_resolve_to_engines(tmp_path):
    assert resolve(str(tmp_path / "h.sqlite"))[2] == tmp_path / "h.sqlite"
    assert resolve(f"sqlite:///{tmp_path}/h.sqlite")[2] == tmp_path / "h.sqlite"
    url, location, path = resolve("postgresql://fleet:secret@db.example.org/preflight")
    assert url.drivername == "postgresql+psycopg" and path is None
    assert "secret" not in location


def test_record_run_writes_only_the_store(tmp_path, monkeypatch, small_run):
    home, store_dir = tmp_path / "home", tmp_path / "store"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    assert record_run(small_run, url=str(store_dir / "history.sqlite")) is None
    assert list(home.iterdir()) == []
    assert {p.name for p in store_dir.iterdir()} <= {"history.sqlite", "history.sqlite-wal", "history.sqlite-shm"}
    with Store(store_dir / "history.sqlite", create=False) as store, store.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == 1


def test_record_run_by_default_goes_to_xdg_data_home(tmp_path, monkeypatch, small_run):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert record_run(small_run) is None
    assert (tmp_path / "data" / "preflight" / "history.sqlite").is_file()


def test_a_locked_store_is_a_warning_not_an_error(tmp_path, small_run):
    path = tmp_path / "history.sqlite"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        warning = record_run(small_run, url=str(path), timeout_s=0.3)
        with Store(path, timeout_s=0.3) as store, pytest.raises(StoreLocked):
            store.ingest(small_run)
    finally:
        holder.rollback()
        holder.close()
    assert warning is not None and "locked" in warning and str(path) in warning


def test_writers_at_the_same_time_both_get_recorded(tmp_path):
    path = tmp_path / "history.sqlite"
    Store(path).close()
    reports = [fleet.fleet_report(fleet.node_names(8), fleet.START + fleet.timedelta(hours=i), seed=i)
               for i in range(4)]
    warnings: list[str | None] = []
    threads = [threading.Thread(target=lambda r=r: warnings.append(record_run(r, url=str(path), timeout_s=20)))
               for r in reports]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert warnings == [None] * 4
    with Store(path, create=False) as store, store.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == 4


def test_a_file_that_is_not_a_database_is_named(tmp_path, small_run):
    path = tmp_path / "results.json"
    path.write_text('{"not": "a database"}')
    with pytest.raises(StoreCorrupt) as caught:
        Store(path)
    assert str(path) in str(caught.value)
    warning = record_run(small_run, url=str(path))
    assert warning is not None and str(path) in warning
    assert path.read_text() == '{"not": "a database"}'


def test_a_damaged_database_is_named(tmp_path, small_run):
    path = tmp_path / "history.sqlite"
    with Store(path) as store:
        store.ingest(small_run)
    with Store(path) as store, store.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # the header survives, every page after it does not
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt) as caught:
        Store(path, create=False)
    assert str(path) in str(caught.value)


def test_another_programs_database_is_foreign(tmp_path, small_run):
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(ForeignStore) as caught:
        Store(path)
    assert str(path) in str(caught.value) and "users" in str(caught.value)
    assert "not a preflight history database" in record_run(small_run, url=str(path))
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["users"]


def test_a_store_from_a_newer_preflight_is_refused(tmp_path):
    path = tmp_path / "history.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, '2030-01-01 00:00:00', 'preflight-history', '9.0')")
    with pytest.raises(NewerStore, match="upgrade preflight"):
        Store(path)


def test_reading_a_store_that_does_not_exist_creates_nothing(tmp_path):
    path = tmp_path / "none" / "history.sqlite"
    with pytest.raises(StoreMissing):
        Store(path, create=False)
    assert not (tmp_path / "none").exists()


def test_a_full_disk_reads_as_full(tmp_path):
    """SQLite's own 'database or disk is full', provoked with a page limit."""
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'tiny.sqlite'}")
    with pytest.raises(sqlalchemy.exc.OperationalError) as caught:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x TEXT)")
            conn.exec_driver_sql("PRAGMA max_page_count = 3")
            for _ in range(100):
                conn.exec_driver_sql("INSERT INTO t VALUES (?)", ("x" * 4000,))
    engine.dispose()
    assert isinstance(translate("tiny.sqlite", caught.value), StoreFull)


def test_a_missing_postgresql_server_is_a_warning(small_run):
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    warning = record_run(small_run, url="postgresql+psycopg://preflight@127.0.0.1:1/preflight", timeout_s=2)
    assert warning is not None and "unreachable" in warning and "127.0.0.1" in warning


def test_ingest_is_one_transaction(tmp_path):
    """A run whose last table cannot be written leaves nothing of itself in the others."""
    path = tmp_path / "history.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE findings")  # the last table ingest writes
    report = fleet.fleet_report(fleet.node_names(6), fleet.START, seed=2)
    with Store(path) as store:
        with pytest.raises(HistoryError, match="findings"):
            store.ingest(report)
        with store.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == 0
            assert conn.exec_driver_sql("SELECT count(*) FROM figures").scalar() == 0
            assert conn.exec_driver_sql("SELECT count(*) FROM node_images").scalar() == 0


def test_runs_imported_twice_are_kept_once(tmp_path):
    path = tmp_path / "history.sqlite"
    run = scenario.runs()[0]
    with Store(path) as store:
        first, second = store.ingest(run), store.ingest(run)
    assert first.new and not second.new and first.run_id == second.run_id
