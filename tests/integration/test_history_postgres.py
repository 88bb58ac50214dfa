"""Fleet history on a real PostgreSQL server: a throwaway cluster on a Unix socket in a temp dir.

The session fixture runs initdb and pg_ctl (as the `postgres` user, or `nobody`, when the tests
run as root: the server refuses to run as root), listens on no TCP port, and always stops the
server and removes its files. Each test gets a database of its own. Skipped where the PostgreSQL
server binaries are not installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
import sqlalchemy  # noqa: E402

from preflight.history import record_run  # noqa: E402
from preflight.history import schema  # noqa: E402
from preflight.history.store import ForeignStore, Store  # noqa: E402
from tests.unit.history import fleet, scenario  # noqa: E402


def _server_binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def _as_server_user(argv: list[str]) -> tuple[list[str], str | None]:
    if os.geteuid() != 0:
        return argv, None
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--", *argv], user
    pytest.skip("running as root with neither a postgres nor a nobody user to run the server as")


@pytest.fixture(scope="session")
def postgres():
    """(socket directory, admin engine URL template); the server runs for the whole session."""
    bindir = _server_binaries()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="pf-pg-"))  # short: a socket path is limited to ~100 bytes
    data, log = root / "data", root / "server.log"
    _, user = _as_server_user([])
    if user:
        shutil.chown(root, user=user)
    started = False
    try:
        argv, _ = _as_server_user([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "preflight",
                                   "-E", "UTF8", "--locale=C", "--no-sync"])
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        argv, _ = _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                                   "-o", f"-k {root} -c listen_addresses= -c fsync=off -c max_connections=40",
                                   "start"])
        subprocess.run(argv, check=True, capture_output=True, timeout=90)
        started = True
        yield root
    except subprocess.CalledProcessError as exc:
        tail = log.read_text()[-2000:] if log.exists() else ""
        pytest.fail(f"could not start PostgreSQL: {exc.stderr.decode(errors='replace')[-2000:]}\n{tail}")
    finally:
        if started:
            argv, _ = _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
            subprocess.run(argv, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _url(socket_dir: Path, database: str) -> str:
    return f"postgresql+psycopg://preflight@/{database}?host={socket_dir}"


@pytest.fixture
def pg_url(postgres):
    """A fresh database for one test, dropped afterwards."""
    name = f"history_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(_url(postgres, "postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield _url(postgres, name)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def test_history_end_to_end_on_postgresql(pg_url):
    with Store(pg_url) as store:
        assert store.dialect == "postgresql"
        scenario.exercise(store)
        assert store.size_bytes() > 0


def test_record_run_on_postgresql_from_several_writers_at_once(pg_url):
    reports = [fleet.fleet_report(fleet.node_names(8), fleet.START + fleet.timedelta(hours=i), seed=i)
               for i in range(4)]
    warnings: list[str | None] = []
    threads = [threading.Thread(target=lambda r=r: warnings.append(record_run(r, url=pg_url, timeout_s=20)))
               for r in reports]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert warnings == [None] * 4
    with Store(pg_url, create=False) as store, store.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == 4
        assert conn.exec_driver_sql("SELECT count(*) FROM nodes").scalar() == 8


def test_a_version_1_database_is_migrated_on_postgresql(pg_url):
    """Version 1's tables and one run in them, then a store opened by this preflight."""
    engine = sqlalchemy.create_engine(pg_url)
    with engine.begin() as conn:
        schema.MIGRATIONS[1](conn)
        conn.exec_driver_sql("INSERT INTO schema_version VALUES (1, now(), 'preflight-history', '0.0.9')")
        conn.exec_driver_sql("INSERT INTO runs (id, run_key, started, verdict, level, profile, preflight_version, "
                             "command, config_digest, node_count, source, ingested) VALUES (1, 'k', "
                             "'2026-10-02 10:00', 'GO', 'standard', '', '0.0.9', '', '', 2, '', now())")
        conn.exec_driver_sql("INSERT INTO nodes VALUES (1, 'gpu01'), (2, 'gpu02')")
        conn.exec_driver_sql("INSERT INTO node_images (run_id, node_id, digest) VALUES (1, 1, 'aaaa0000aaaa0000'), "
                             "(1, 2, 'aaaa0000aaaa0000')")
        conn.exec_driver_sql("INSERT INTO figure_keys VALUES (1, 'collectives.local', 'busbw', '', '', 'GB/s', "
                             "'size', 'higher', '>=')")
        conn.exec_driver_sql("INSERT INTO figures (run_id, node_id, key_id, seq, value, samples_n) VALUES "
                             "(1, 1, 1, 0, 460.0, 0), (1, 2, 1, 0, 470.0, 0)")
        conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('runs', 'id'), 1)")
        conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('nodes', 'id'), 2)")
        conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('figure_keys', 'id'), 1)")
    engine.dispose()
    from preflight.history import queries

    with Store(pg_url, create=False) as store:
        assert store.migrated == list(range(2, schema.LATEST + 1))
        _, rows = queries.trend(store, figure="busbw")
        assert [(r.n, r.median) for r in rows] == [(2, 465.0)]
        store.ingest(fleet.fleet_report(fleet.node_names(6), fleet.START, seed=4))
        assert len(queries.list_runs(store)) == 2


def test_a_database_of_another_application_is_foreign(pg_url):
    engine = sqlalchemy.create_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE invoices (id serial PRIMARY KEY)")
    engine.dispose()
    with pytest.raises(ForeignStore, match="invoices"):
        Store(pg_url)
    warning = record_run(fleet.fleet_report(fleet.node_names(5), fleet.START), url=pg_url)
    assert warning is not None and "not a preflight history database" in warning
