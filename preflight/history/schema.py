"""The history database's tables and their versioned migrations (SQLAlchemy Core, SQLite and PostgreSQL).

`schema_version` holds one row per migration applied, with the application name, so that a
database of some other program is recognised as foreign. Migrations are numbered from 1 and run in
order, each in the transaction that opens the store, so a store is never left half-migrated. A
migration builds the tables as they were at its version (`_tables_v1` is frozen: a later change to
a table is a new migration that alters it, never an edit here), and the module-level tables below
are the latest schema that the queries use.

Version 1: runs, nodes, node images, figure keys, figures, findings.
Version 2: per-run figure summaries (figure_stats: median and percentiles per run, figure and
           image, backfilled from version 1's figures) and the status of every result.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timezone
from typing import Callable

from sqlalchemy import (BigInteger, Boolean, Column, DateTime, Double, ForeignKey, Index, Integer, MetaData,
                        String, Table, Text, UniqueConstraint, inspect, select, text)
from sqlalchemy.engine import Connection

from preflight.history.extract import IMAGE_FIELDS
from preflight.history.stats import median, percentile

APPLICATION = "preflight-history"
# SQLite gives INTEGER PRIMARY KEY columns their rowid; a BIGINT primary key would not autoincrement there.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _tables_v1(md: MetaData) -> None:
    Table("schema_version", md,
          Column("version", Integer, primary_key=True, autoincrement=False),
          Column("applied", DateTime, nullable=False),
          Column("application", String(40), nullable=False),
          Column("preflight_version", String(40), nullable=False, default=""))
    Table("runs", md,
          Column("id", Integer, primary_key=True),
          Column("run_key", String(32), nullable=False, unique=True),
          Column("started", DateTime, nullable=False, index=True),
          Column("finished", DateTime),
          Column("verdict", String(16), nullable=False),
          Column("level", String(16), nullable=False, default=""),
          Column("profile", Text, nullable=False, default=""),
          Column("preflight_version", String(40), nullable=False, default=""),
          Column("command", Text, nullable=False, default=""),
          Column("config_digest", String(16), nullable=False, default=""),
          Column("node_count", Integer, nullable=False, default=0),
          Column("report_schema", Integer),
          Column("source", Text, nullable=False, default=""),
          Column("ingested", DateTime, nullable=False))
    Table("nodes", md,
          Column("id", Integer, primary_key=True),
          Column("name", String(255), nullable=False, unique=True))
    images = Table("node_images", md,
                   Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
                   Column("node_id", Integer, ForeignKey("nodes.id"), primary_key=True),
                   Column("digest", String(16), index=True),
                   *[Column(name, Integer if name == "gpu_count" else Text) for name in IMAGE_FIELDS])
    Index("ix_node_images_node_run", images.c.node_id, images.c.run_id)
    Table("figure_keys", md,
          Column("id", Integer, primary_key=True),
          Column("check_id", String(200), nullable=False),
          Column("name", Text, nullable=False),
          Column("series", Text, nullable=False, default=""),
          Column("at", Text, nullable=False, default=""),
          Column("unit", String(40), nullable=False, default=""),
          Column("figure", String(16), nullable=False, default=""),
          Column("direction", String(8), nullable=False, default=""),
          Column("comparison", String(4), nullable=False, default=""),
          UniqueConstraint("check_id", "name", "series", "at", "unit", name="uq_figure_keys"))
    # Clustered by run (WITHOUT ROWID on SQLite): a run's rows are written at the end, side by side.
    # `seq` tells apart the same figure measured twice on one node in one run. The tables of one row
    # per figure, finding or result declare no foreign keys: checking three per row made PostgreSQL
    # ten times slower to take a 1,000-node run, and their ids come from the same transaction.
    figures = Table("figures", md,
                    Column("run_id", Integer, primary_key=True),
                    Column("node_id", Integer, primary_key=True),
                    Column("key_id", Integer, primary_key=True),
                    Column("seq", Integer, primary_key=True, autoincrement=False),
                    Column("value", Double, nullable=False),
                    Column("threshold", Double),
                    Column("ok", Boolean),
                    Column("samples_n", Integer, nullable=False, default=0),
                    Column("spread", Double),
                    sqlite_with_rowid=False)
    # Read by figure (trend, learn) as well as by run and node (compare, through node_images).
    Index("ix_figures_key_run", figures.c.key_id, figures.c.run_id)
    findings = Table("findings", md,
                     Column("id", BigId, primary_key=True),
                     Column("run_id", Integer, nullable=False),
                     Column("check_id", String(200), nullable=False),
                     Column("node_id", Integer, nullable=False),
                     Column("finding_id", String(200), nullable=False),
                     Column("level", String(8), nullable=False))
    Index("ix_findings_node", findings.c.node_id, findings.c.finding_id)
    Index("ix_findings_run", findings.c.run_id)


def _columns_v3(md: MetaData) -> None:
    """Version 3 adds a column to runs (see _migrate_v3); the table as the code reads it has it."""
    md.tables["runs"].append_column(Column("headline", Text, nullable=False, default="", server_default=""))


def _tables_v2(md: MetaData) -> None:
    Table("results", md,  # no foreign keys, as figures
          Column("run_id", Integer, primary_key=True),
          Column("check_id", String(200), primary_key=True),
          Column("node_id", Integer, primary_key=True),
          Column("status", String(8), nullable=False),
          Column("duration_s", Double))
    stats = Table("figure_stats", md,
                  Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
                  Column("key_id", Integer, ForeignKey("figure_keys.id"), primary_key=True),
                  Column("image", String(16), primary_key=True),  # the node image digest, "" when unknown
                  Column("n", Integer, nullable=False),
                  Column("median", Double, nullable=False),
                  Column("p05", Double, nullable=False),
                  Column("p25", Double, nullable=False),
                  Column("p75", Double, nullable=False),
                  Column("p95", Double, nullable=False),
                  Column("min", Double, nullable=False),
                  Column("max", Double, nullable=False),
                  Column("noise", Double))  # median relative spread of the samples behind the figures
    Index("ix_figure_stats_key_run", stats.c.key_id, stats.c.run_id)


metadata = MetaData()
_tables_v1(metadata)
_tables_v2(metadata)
_columns_v3(metadata)
T = metadata.tables
schema_version, runs, nodes, node_images = T["schema_version"], T["runs"], T["nodes"], T["node_images"]
figure_keys, figures, findings = T["figure_keys"], T["figures"], T["findings"]
results, figure_stats = T["results"], T["figure_stats"]


def summarise(values: list[float], spreads: list[float]) -> dict[str, float | int | None]:
    """The figure_stats columns for one run, figure and image."""
    ordered = sorted(values)
    return {"n": len(ordered), "median": median(ordered), "p05": percentile(ordered, 5, ordered=True),
            "p25": percentile(ordered, 25, ordered=True), "p75": percentile(ordered, 75, ordered=True),
            "p95": percentile(ordered, 95, ordered=True), "min": ordered[0], "max": ordered[-1],
            "noise": median(spreads) if spreads else None}


# ---------------------------------------------------------------------------------------------------
# Migrations
# ---------------------------------------------------------------------------------------------------

def _migrate_v1(conn: Connection) -> None:
    md = MetaData()
    _tables_v1(md)
    md.create_all(conn)


def _migrate_v2(conn: Connection) -> None:
    md = MetaData()
    _tables_v2(md)
    # The v2 tables refer to v1's; reflecting them lets create_all resolve the foreign keys.
    md.reflect(conn, only=["runs", "nodes", "figure_keys", "figures", "node_images"])
    md.create_all(conn, tables=[md.tables["results"], md.tables["figure_stats"]])
    _backfill_figure_stats(conn, md)


def _backfill_figure_stats(conn: Connection, md: MetaData) -> None:
    """Summaries for the runs recorded before version 2, one run at a time (the tables as of version 2)."""
    runs, figures, node_images = md.tables["runs"], md.tables["figures"], md.tables["node_images"]
    figure_stats = md.tables["figure_stats"]
    for (run_id,) in conn.execute(select(runs.c.id)).all():
        rows = conn.execute(
            select(figures.c.key_id, node_images.c.digest, figures.c.value, figures.c.spread)
            .select_from(figures.outerjoin(node_images, (node_images.c.run_id == figures.c.run_id)
                                           & (node_images.c.node_id == figures.c.node_id)))
            .where(figures.c.run_id == run_id)).all()
        groups: dict[tuple[int, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for key_id, digest, value, spread in rows:
            values, spreads = groups[(key_id, digest or "")]
            values.append(value)
            if spread is not None and math.isfinite(spread):
                spreads.append(spread)
        if groups:
            conn.execute(figure_stats.insert(), [{"run_id": run_id, "key_id": k, "image": img, **summarise(v, s)}
                                                 for (k, img), (v, s) in groups.items()])


def _migrate_v3(conn: Connection) -> None:
    """Each run's headline, as its reports show it (the fleet site lists it); "" for runs recorded before."""
    conn.execute(text("ALTER TABLE runs ADD COLUMN headline TEXT NOT NULL DEFAULT ''"))


MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _migrate_v1, 2: _migrate_v2, 3: _migrate_v3}
LATEST = max(MIGRATIONS)


class SchemaProblem(Exception):
    """The database is not (or not yet, or no longer) a history store this preflight can use."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "foreign" or "newer"


def installed_version(conn: Connection) -> int | None:
    """The schema version of the store; None for an empty database. Raises SchemaProblem for a
    database that holds tables of another program, or was written by a newer preflight."""
    names = set(inspect(conn).get_table_names())
    if not names:
        return None
    if "schema_version" not in names:
        raise SchemaProblem("foreign", f"holds tables ({', '.join(sorted(names)[:5])}) but no schema_version: "
                                       "not a preflight history database")
    columns = {c["name"] for c in inspect(conn).get_columns("schema_version")}
    if not {"version", "application"} <= columns:
        raise SchemaProblem("foreign", "its schema_version table is not preflight's: not a preflight history database")
    rows = conn.execute(select(schema_version.c.version, schema_version.c.application)).all()
    if any(app != APPLICATION for _, app in rows):
        raise SchemaProblem("foreign", "its schema_version belongs to another application")
    version = max((v for v, _ in rows), default=0)
    if version > LATEST:
        raise SchemaProblem("newer", f"has schema version {version}, newer than this preflight's {LATEST}: "
                                     "upgrade preflight to use it")
    return version


def migrate(conn: Connection, current: int | None, preflight_version: str) -> list[int]:
    """Apply every migration after `current`; returns the versions applied."""
    applied = []
    for version in range(int(current or 0) + 1, LATEST + 1):
        MIGRATIONS[version](conn)
        conn.execute(schema_version.insert().values(
            version=version, applied=datetime.now(timezone.utc).replace(tzinfo=None), application=APPLICATION,
            preflight_version=preflight_version))
        applied.append(version)
    return applied
