"""The fleet-history store: one SQLite file by default, or a PostgreSQL database by URL.

    store = Store()                                  # $XDG_DATA_HOME/preflight/history.sqlite
    store = Store("sqlite:////var/lib/preflight/history.sqlite")
    store = Store("postgresql+psycopg://preflight@db.example.org/preflight")
    store.ingest(report_dict)                        # one transaction per run

SQLite runs in WAL mode with a busy timeout, so that runs recorded at the same time wait for each
other instead of failing, and readers never block the writer. Every write transaction starts with
BEGIN IMMEDIATE on SQLite, and takes a transaction-scoped advisory lock on PostgreSQL, so two
writers never interleave. Opening a store creates or migrates its schema (preflight.history.schema).

Errors are HistoryError subclasses whose message names the store (the file, or the URL without its
password): the `history` commands show them as they are, and `record_run` turns them into one
warning line, since recording history must never cost a run its result.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import sqlalchemy
from sqlalchemy import create_engine, event, select, text
from sqlalchemy.engine import Connection, Engine, make_url

from preflight.history.extract import CLUSTER, IMAGE_FIELDS, Extracted, FigureKey, NotAReport, extract
from preflight.history.schema import (LATEST, SchemaProblem, figure_keys, figure_stats, figures, findings,
                                      installed_version, migrate, node_images, nodes, results, runs, summarise)

DEFAULT_TIMEOUT_S = 10.0  # how long a writer waits for another to finish (busy_timeout, connect_timeout)
RECORD_TIMEOUT_S = 3.0  # a run that records its result waits at most this long
PG_LOCK_KEY = 0x70726566  # "pref": the advisory lock that serialises writers on PostgreSQL
CHUNK = 500  # names per IN (...) lookup


class HistoryError(Exception):
    """Something about the history store, with the store named in the message."""

    def __init__(self, location: str, problem: str) -> None:
        from preflight.core.redact import redact_text

        location, problem = redact_text(location), redact_text(problem)  # a driver's message may quote the URL
        super().__init__(f"history store {location}: {problem}")
        self.location = location
        self.problem = problem


class StoreMissing(HistoryError):
    pass


class StoreLocked(HistoryError):
    pass


class StoreFull(HistoryError):
    pass


class StoreUnavailable(HistoryError):
    pass


class StoreCorrupt(HistoryError):
    pass


class ForeignStore(HistoryError):
    pass


class NewerStore(HistoryError):
    pass


def default_path() -> Path:
    """$XDG_DATA_HOME/preflight/history.sqlite, ~/.local/share/preflight/history.sqlite when unset."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "preflight" / "history.sqlite"


def resolve(url: str | Path | None) -> tuple[sqlalchemy.URL, str, Path | None]:
    """(SQLAlchemy URL, the location as messages name it, the SQLite file or None)."""
    if url is None or str(url) == "":
        path = default_path()
        return make_url(f"sqlite:///{path}"), str(path), path
    raw = str(url)
    if "://" not in raw and re.match(r"[^/]*:[^/]*@", raw):
        from preflight.core.redact import redact_url

        # user:password@host/db: a database URL without its scheme, never a file to create
        raise HistoryError(redact_url(raw), "a database URL without its scheme: add it "
                           "(postgresql+psycopg://...), or name a file")
    if "://" not in raw:
        path = Path(raw).expanduser()
        return make_url(f"sqlite:///{path}"), str(path), path
    if raw.startswith(("postgres://", "postgresql://")):
        raw = "postgresql+psycopg://" + raw.split("://", 1)[1]
    try:
        parsed = make_url(raw)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        from preflight.core.redact import redact_url

        raise HistoryError(redact_url(raw), f"not a database URL ({redact_url(exc)})") from None
    location = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise HistoryError(location, "an in-memory SQLite database keeps no history; name a file")
        path = Path(parsed.database).expanduser()
        return parsed.set(database=str(path)), str(path), path
    if parsed.get_backend_name() == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return parsed, location, None
    raise HistoryError(location, "unsupported database: use a file path, sqlite:///PATH or postgresql+psycopg://...")


@dataclass
class Ingested:
    run_id: int
    new: bool  # False: this run was recorded before and is kept once
    nodes: int = 0
    figures: int = 0
    findings: int = 0


class Store:
    """An open history store; use as a context manager, or call close()."""

    def __init__(self, url: str | Path | None = None, *, create: bool = True,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url, self.location, self.path = resolve(url)
        self.timeout_s = timeout_s
        self.engine: Engine | None = None
        self.dialect = self.url.get_backend_name()
        self.migrated: list[int] = []
        # A store this user may only read (a file or folder without write permission, read-only media)
        # is opened read-only: reading it writes nothing, not even the journal mode.
        self.read_only = bool(not create and self.path is not None and self.path.is_file()
                              and not (os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)))
        with self._guard():
            if self.path is not None:
                self._prepare_file(create)
            self.engine = self._engine()
            self._open_schema(create)

    # -- connection set-up ----------------------------------------------------------------------

    def _prepare_file(self, create: bool) -> None:
        assert self.path is not None
        if self.path.is_dir():
            raise StoreUnavailable(self.location, "is a directory, not a database file")
        if not self.path.exists():
            if not create:
                raise StoreMissing(self.location, "no such file: nothing has been recorded there yet "
                                                  "(`preflight run` records each run; `preflight history import` "
                                                  "adds earlier results.json files)")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif self.path.stat().st_size:
            with open(self.path, "rb") as handle:
                if handle.read(16) != b"SQLite format 3\x00":
                    raise StoreCorrupt(self.location, "is not an SQLite database (its header is wrong): a corrupt "
                                                      "file, or some other file given as the history store")

    def _engine(self) -> Engine:
        if self.dialect == "sqlite":
            url = self.url
            if self.read_only:
                from urllib.parse import quote

                url = make_url(f"sqlite:///file:{quote(str(self.path))}?mode=ro&immutable=1&uri=true")
            engine = create_engine(url, connect_args={"timeout": self.timeout_s})
            read_only = self.read_only
            busy_ms = int(self.timeout_s * 1000)

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # transactions are begun below, not by the driver
                cursor = dbapi_conn.cursor()
                cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
                if not read_only:
                    cursor.execute("PRAGMA journal_mode = WAL")
                    cursor.execute("PRAGMA synchronous = NORMAL")  # durable at each checkpoint; WAL keeps it consistent
                cursor.execute("PRAGMA cache_size = -65536")  # 64 MiB: index pages of a large history stay cached
                cursor.execute("PRAGMA foreign_keys = ON")
                cursor.execute("PRAGMA temp_store = MEMORY")  # sorts never spill into files beside others
                cursor.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Connection) -> None:
                write = conn.get_execution_options().get("preflight_write")
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

            return engine
        return create_engine(self.url, connect_args={"connect_timeout": max(1, int(self.timeout_s))},
                             pool_pre_ping=True)

    def _open_schema(self, create: bool) -> None:
        with self.connect() as conn:
            current = installed_version(conn)
        if current == LATEST:
            return
        if current is None and not create:
            raise StoreMissing(self.location, "is empty: nothing has been recorded there yet")
        from preflight import __version__

        with self.write() as conn:
            current = installed_version(conn)  # again, under the write lock: another may have migrated
            self.migrated = migrate(conn, current, __version__)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Database errors as HistoryError naming this store."""
        try:
            yield
        except HistoryError:
            raise
        except SchemaProblem as exc:
            raise (NewerStore if exc.kind == "newer" else ForeignStore)(self.location, str(exc)) from None
        except sqlalchemy.exc.DBAPIError as exc:
            raise translate(self.location, exc) from None
        except OSError as exc:
            raise StoreUnavailable(self.location, exc.strerror or str(exc)) from None

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reading."""
        assert self.engine is not None
        with self._guard(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction; only one writer at a time holds it."""
        assert self.engine is not None
        with self._guard(), self.engine.connect() as conn:
            conn = conn.execution_options(preflight_write=True)
            with conn.begin():
                if self.dialect == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
                yield conn

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def size_bytes(self) -> int | None:
        """What the store takes on disk: the SQLite file with its WAL, or the PostgreSQL database."""
        if self.path is not None:
            return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        with self.connect() as conn:
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())

    # -- recording --------------------------------------------------------------------------------

    def ingest(self, report: dict[str, Any], *, source: str = "", verdict: str | None = None,
               headline: str | None = None) -> Ingested:
        """Record one run report (the results.json dict) in one transaction. `verdict` and `headline`:
        what this process judged the run with; without them (an import) the report's results are
        judged again. `source`: where its results.json is (the fleet site links the report beside it)."""
        ex = extract(report, verdict, headline)
        _add_outliers(ex)
        with self.write() as conn:
            existing = conn.execute(select(runs.c.id).where(runs.c.run_key == ex.run_key)).scalar()
            if existing is not None:
                return Ingested(int(existing), False)
            run_id = conn.execute(runs.insert().values(
                run_key=ex.run_key, started=ex.started, finished=ex.finished, verdict=ex.verdict, level=ex.level,
                profile=ex.profile, preflight_version=ex.preflight_version, command=ex.command,
                config_digest=ex.config_digest, node_count=len(ex.nodes), report_schema=ex.report_schema,
                source=source, headline=ex.headline, ingested=datetime.now(timezone.utc).replace(tzinfo=None))).inserted_primary_key[0]
            names = {*ex.nodes, *(r.node for r in ex.figures), *(f[1] for f in ex.findings),
                     *(r[1] for r in ex.results)}
            node_id = self._node_ids(conn, sorted(names))
            key_id = self._key_ids(conn, ex)
            self._bulk(conn, node_images, ["run_id", "node_id", "digest", *IMAGE_FIELDS],
                       [(run_id, node_id[n], ex.images[n]["digest"], *[ex.images[n][f] for f in IMAGE_FIELDS])
                        for n in ex.nodes])
            statuses = {(c, n): (s, d) for c, n, s, d in ex.results}
            self._bulk(conn, results, ["run_id", "check_id", "node_id", "status", "duration_s"],
                       [(run_id, c, node_id[n], s, d) for (c, n), (s, d) in statuses.items()])
            seen: dict[tuple[int, int], int] = {}
            rows = []
            for r in ex.figures:
                k, n = key_id[r.key], node_id[r.node]
                seq = seen[(k, n)] = seen.get((k, n), -1) + 1
                rows.append((run_id, n, k, seq, r.value, r.threshold, r.ok, r.samples_n, r.spread))
            self._bulk(conn, figures, ["run_id", "node_id", "key_id", "seq", "value", "threshold", "ok", "samples_n",
                                       "spread"], rows)
            self._bulk(conn, figure_stats, ["run_id", "key_id", "image", "n", "median", "p05", "p25", "p75", "p95",
                                            "min", "max", "noise"], _stats_rows(run_id, ex, key_id))
            self._bulk(conn, findings, ["run_id", "check_id", "node_id", "finding_id", "level"],
                       [(run_id, c, node_id[n], f, lvl) for c, n, f, lvl in ex.findings])
        return Ingested(int(run_id), True, len(ex.nodes), len(ex.figures), len(ex.findings))

    def _bulk(self, conn: Connection, table: sqlalchemy.Table, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
        """Many rows at once, past SQLAlchemy's per-row parameter handling: the bulk of a 1,000-node
        run is tens of thousands of figures. PostgreSQL takes them by COPY, SQLite by executemany."""
        if not rows:
            return
        names = ", ".join(columns)
        if self.dialect == "postgresql":
            cursor = conn.connection.driver_connection.cursor()
            try:
                with cursor.copy(f"COPY {table.name} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            finally:
                cursor.close()
            return
        marks = ", ".join("?" for _ in columns)
        conn.exec_driver_sql(f"INSERT INTO {table.name} ({names}) VALUES ({marks})", rows)

    def _insert_ignore(self, conn: Connection, table: sqlalchemy.Table, rows: list[dict[str, Any]]) -> None:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        conn.execute(insert(table).on_conflict_do_nothing(), rows)

    def _node_ids(self, conn: Connection, names: list[str]) -> dict[str, int]:
        ids: dict[str, int] = {}

        def lookup(wanted: list[str]) -> None:
            for i in range(0, len(wanted), CHUNK):
                chunk = wanted[i:i + CHUNK]
                ids.update({name: node_id for node_id, name in conn.execute(
                    select(nodes.c.id, nodes.c.name).where(nodes.c.name.in_(chunk)))})

        lookup(names)
        missing = [n for n in names if n not in ids]
        if missing:
            self._insert_ignore(conn, nodes, [{"name": n} for n in missing])
            lookup(missing)
        return ids

    def _key_ids(self, conn: Connection, ex: Extracted) -> dict[FigureKey, int]:
        def lookup() -> dict[FigureKey, int]:
            checks = sorted({k.check_id for k in ex.keys})
            found = conn.execute(select(figure_keys.c.id, figure_keys.c.check_id, figure_keys.c.name,
                                        figure_keys.c.series, figure_keys.c.at, figure_keys.c.unit)
                                 .where(figure_keys.c.check_id.in_(checks))).all()
            return {FigureKey(c, n, s, a, u): i for i, c, n, s, a, u in found}

        ids = lookup() if ex.keys else {}
        missing = [k for k in ex.keys if k not in ids]
        if missing:
            self._insert_ignore(conn, figure_keys, [
                {"check_id": k.check_id, "name": k.name, "series": k.series, "at": k.at, "unit": k.unit,
                 "figure": ex.keys[k].figure, "direction": ex.keys[k].direction, "comparison": ex.keys[k].comparison}
                for k in missing])
            ids = lookup()
        return ids

def _stats_rows(run_id: int, ex: Extracted, key_id: dict[FigureKey, int]) -> list[tuple[Any, ...]]:
    groups: dict[tuple[int, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for r in ex.figures:
        image = ex.images.get(r.node, {}).get("digest") or ""
        values, spreads = groups[(key_id[r.key], image)]
        values.append(r.value)
        if r.spread is not None:
            spreads.append(r.spread)
    out = []
    for (k, img), (values, spreads) in groups.items():
        st = summarise(values, spreads)
        out.append((run_id, k, img, st["n"], st["median"], st["p05"], st["p25"], st["p75"], st["p95"], st["min"],
                    st["max"], st["noise"]))
    return out


def _add_outliers(ex: Extracted) -> None:
    """Fleet outliers within this run, unless the run's report carries them already."""
    from preflight.history.outliers import FAIL_SLOW_ID, OUTLIER_ID, outliers_of

    if any(f[2] in (OUTLIER_ID, FAIL_SLOW_ID) for f in ex.findings):
        return
    for o in outliers_of(ex):
        ex.findings.append((o.check_id, o.node, o.finding_id, "WARN"))


def read_report(path: str | Path) -> dict[str, Any]:
    """A results.json file as a dict; NotAReport naming the file when it is not one."""
    from preflight.core.bounded import InputError, load_json, read_text
    from preflight.core.results_file import MAX_RESULTS_BYTES, ResultsFileError, validate_report

    path = Path(path)
    try:
        data = load_json(read_text(path, MAX_RESULTS_BYTES), str(path))
    except InputError as exc:
        raise NotAReport(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list) or "started_at" not in data:
        raise NotAReport(f"{path}: not a preflight run report (results.json has started_at and results)")
    try:  # what `preflight report` accepts, and nothing else
        validate_report(data, str(path))
    except ResultsFileError as exc:
        raise NotAReport(str(exc)) from None
    return data


def translate(location: str, exc: sqlalchemy.exc.DBAPIError) -> HistoryError:
    """A driver error as the HistoryError that says what happened to the store."""
    message = str(exc.orig) if exc.orig is not None else str(exc)
    low = message.lower()
    if "locked" in low or "could not obtain lock" in low:
        return StoreLocked(location, f"locked by another writer for longer than the timeout ({message})")
    if "disk is full" in low or "no space left" in low or "disk full" in low:
        return StoreFull(location, f"the disk is full ({message})")
    if "not a database" in low or "malformed" in low or "encrypted" in low:
        return StoreCorrupt(location, f"the database file is corrupt ({message})")
    if "readonly" in low or "read-only" in low or "unable to open" in low or "permission denied" in low:
        return StoreUnavailable(location, f"cannot be written or opened ({message})")
    if isinstance(exc, sqlalchemy.exc.OperationalError):
        first = message.strip().splitlines()[0] if message.strip() else type(exc.orig).__name__
        return StoreUnavailable(location, f"unreachable ({first})")
    return HistoryError(location, message.strip().splitlines()[0] if message.strip() else type(exc).__name__)


def record_run(report: dict[str, Any], url: str | Path | None = None, *, timeout_s: float = RECORD_TIMEOUT_S,
               verdict: str | None = None, headline: str | None = None, source: str = "") -> str | None:
    """Record a finished run; never raises. Returns None, or one line saying why it was not recorded
    (locked, full, unreachable, corrupt, a foreign database), for the run to show as a warning.
    `verdict`: the verdict the run was just judged with, recorded as is (see Store.ingest)."""
    try:
        with Store(url, create=True, timeout_s=timeout_s) as store:
            store.ingest(report, verdict=verdict, headline=headline, source=source)
        return None
    except HistoryError as exc:
        return f"run not recorded in fleet history: {exc}"
    except NotAReport as exc:
        return f"run not recorded in fleet history: {exc}"
    except Exception as exc:  # noqa: BLE001 - recording history must never cost the run its result
        return f"run not recorded in fleet history: {type(exc).__name__}: {exc}"


__all__ = ["CLUSTER", "HistoryError", "Ingested", "Store", "StoreCorrupt", "StoreFull", "StoreLocked",
           "StoreMissing", "StoreUnavailable", "ForeignStore", "NewerStore", "default_path", "read_report",
           "record_run", "resolve"]
