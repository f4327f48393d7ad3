"""raycep: complex event processing for many rules, in one process or on a Ray cluster.

Find patterns of events (sequences, negation, Kleene closure, conditions across events, time
windows) in a stream or a table, with a SASE+-style query language or a Python builder::

    import raycep
    matches = raycep.match(
        "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price * 1.01 "
        "WITHIN 30 seconds", ticks_df, key="symbol")      # -> pyarrow.Table
    matches.to_pandas()

The pieces:

* ``match(queries, events, ...)``: queries over a DataFrame, an Arrow table or a file, the
  matches as a ``pyarrow.Table`` (what ``raycep local`` finds).
* ``Engine``: an incremental engine in this process; ``Event`` in, ``Match`` (and
  ``Retraction``) out; ``Engine.process_table`` takes tables.
* ``parse`` / ``compile``: query text to its AST (``Query``) and to the compiled query;
  ``builder`` (``seq``, ``var``, ``attr``, ``query``, ...) builds the same ``Query`` in Python,
  and ``str(query)`` prints it as text.
* ``connect(address, token)``: the client of a running cluster (``raycep serve``): register
  and remove queries, send events and tables, read matches.
* ``CepError`` and its subclasses: every error raycep raises on purpose.

The command line is ``raycep`` (``raycep local``, ``raycep serve``, ``raycep ingest``, ...);
the documentation is in ``docs/`` (a MkDocs site).
"""
from __future__ import annotations

from importlib import metadata as _metadata

from raycep import builder
from raycep.cep.errors import (AuthenticationError, CepError, ConflictError, EvaluationError,
                               GatewayError, IngestError, MovingError, NotFoundError,
                               OverloadedError, PlanningError, QuerySyntaxError, QueryValidationError,
                               RecoveryError, UnavailableError)
from raycep.cep.event import Event
from raycep.cep.lang.ast import Query
from raycep.cep.lang.builder import query
from raycep.cep.lang.compiler import CompiledQuery, compile_query
from raycep.cep.lang.parser import parse_queries, parse_query
from raycep.cep.match import Match, Retraction
from raycep.local.engine import Engine
from raycep.gateway.client import Client, connect
from raycep.local.match import match

try:
    __version__ = _metadata.version("raycep")
except _metadata.PackageNotFoundError:       # a checkout that is not installed
    __version__ = "0+unknown"


def parse(text: str) -> Query | list:
    """Parse query text: one query gives its ``Query`` (AST), several (separated by ``;``)
    a list. Raises QuerySyntaxError / QueryValidationError with line and column."""
    queries = parse_queries(text)
    return queries[0] if len(queries) == 1 else queries


def compile(query, params: dict | None = None) -> CompiledQuery:   # noqa: A001 (sqlglot's way)
    """Compile a query (text or ``Query``) with its parameters bound: the checked,
    executable form the engine runs (its conditions, window, variables and branches)."""
    if isinstance(query, str):
        query = parse_query(query)
    return compile_query(query, params)


__all__ = [
    "__version__", "match", "Engine", "Event", "Match", "Retraction", "Query", "CompiledQuery",
    "builder", "query", "parse", "compile", "connect", "Client",
    "CepError", "QuerySyntaxError", "QueryValidationError", "PlanningError", "IngestError",
    "RecoveryError", "EvaluationError", "GatewayError", "NotFoundError", "ConflictError",
    "AuthenticationError", "UnavailableError", "OverloadedError", "MovingError",
]
