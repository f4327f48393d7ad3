"""The persisted registry of the gateway's queries (sqlite3).

Each registered query has a name, its text, its parameters, its disorder mode (None: the
cluster's default) and a registration sequence number. The sequence counter lives in a ``meta`` table and only grows, so generated names
(``q<seq>``) are never reused, even after removal or a restart. Every write is committed at
once: a process that dies right after ``add`` finds the query when it reopens the file.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass

from raycep.cep.errors import CepError, QueryValidationError
from raycep.gateway.server.checks import validate_name

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
    seq     INTEGER PRIMARY KEY,
    id      TEXT NOT NULL UNIQUE,
    text    TEXT NOT NULL,
    params  TEXT NOT NULL,
    created REAL NOT NULL,
    mode    TEXT
);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('last_seq', 0);
"""


@dataclass(frozen=True)
class QueryRecord:
    """One registered query."""

    id: str
    text: str
    params: dict
    created: float
    seq: int
    mode: str | None = None


def default_registry_path() -> str:
    """Where ``raycep serve`` keeps its query registry unless told: ``$RAYCEP_REGISTRY``, else
    ``$XDG_STATE_HOME/raycep/registry.sqlite`` (``~/.local/state/raycep/registry.sqlite``):
    one place per user, whatever directory the gateway starts in."""
    path = os.environ.get("RAYCEP_REGISTRY")
    if path:
        return os.path.abspath(os.path.expanduser(path))
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                             "state")
    return os.path.join(state, "raycep", "registry.sqlite")


class QueryRegistry:
    """Registered queries in sqlite; ``path`` None or ``":memory:"`` keeps them in memory."""

    def __init__(self, path: str | None = None):
        self.path = path or ":memory:"
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()
        try:
            # autocommit mode: each statement commits at once, `add` uses an explicit BEGIN
            self._conn = sqlite3.connect(self.path, check_same_thread=False,
                                         isolation_level=None)
        except sqlite3.Error as exc:
            raise CepError(f"cannot open the query registry {self.path!r}: {exc}") from exc
        try:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.executescript(_SCHEMA)
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(queries)")}
            if "mode" not in columns:         # a registry written before disorder modes
                self._conn.execute("ALTER TABLE queries ADD COLUMN mode TEXT")
        except sqlite3.Error as exc:
            self._conn.close()
            raise CepError(f"cannot open the query registry {self.path!r} (corrupt or not a "
                           f"raycep registry?): {exc}") from exc

    def add(self, id: str | None, text: str, params: dict | None = None,
            mode: str | None = None) -> QueryRecord:
        """Register a query; ``id`` None generates ``q<seq>``. Raises QueryValidationError
        for a bad or already registered name."""
        return self.add_many([(id, text, params, mode)])[0]

    def add_many(self, entries: list) -> list:
        """Register ``(id, text, params, mode)`` entries in one transaction, all or none
        (``add`` of each); returns their records in order."""
        rows = []
        for id, text, params, mode in entries:
            if id is not None:
                validate_name(id)
            params = dict(params or {})
            try:
                params_json = json.dumps(params, sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise QueryValidationError(
                    f"the parameters of query {id!r} are not JSON-serialisable: {exc}") from exc
            rows.append((id, text, params, params_json, mode))
        records = []
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                seq = conn.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()[0]
                for id, text, params, params_json, mode in rows:
                    if id is not None and self._row(id) is not None:
                        raise QueryValidationError(
                            f"a query named {id!r} is already registered; remove it first or "
                            f"choose another NAME")
                    while True:
                        seq += 1
                        # a generated name must not collide with a query the user named q<n>
                        if id is not None or self._row(f"q{seq}") is None:
                            break
                    name = id if id is not None else f"q{seq}"
                    record = QueryRecord(name, text, params, time.time(), seq, mode)
                    conn.execute(
                        "INSERT INTO queries (seq, id, text, params, created, mode) "
                        "VALUES (?,?,?,?,?,?)",
                        (seq, name, text, params_json, record.created, mode))
                    records.append(record)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'last_seq'", (seq,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return records

    def remove(self, id: str) -> bool:
        """Forget the query ``id``; False when there was none."""
        return self.remove_many([id]) > 0

    def remove_many(self, ids: list) -> int:
        """Forget the queries of ``ids`` in one transaction; how many there were."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                count = sum(conn.execute("DELETE FROM queries WHERE id = ?", (id,)).rowcount
                            for id in ids)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return count

    def get(self, id: str) -> QueryRecord | None:
        with self._lock:
            row = self._row(id)
        return _record(row) if row is not None else None

    def all(self) -> list[QueryRecord]:
        """Every registered query in registration order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, text, params, created, seq, mode FROM queries ORDER BY seq").fetchall()
        return [_record(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _row(self, id: str):
        return self._conn.execute(
            "SELECT id, text, params, created, seq, mode FROM queries WHERE id = ?", (id,)).fetchone()


def _record(row) -> QueryRecord:
    id, text, params, created, seq, mode = row
    return QueryRecord(id, text, json.loads(params), created, seq, mode)
