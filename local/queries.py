"""Queries as ``raycep local`` and ``local.match`` take them: query files, query text or
Query objects (cep.lang.builder), each file or text holding one or more queries."""
from __future__ import annotations

import dataclasses
import os
import re

from raycep.cep.errors import CepError, QuerySyntaxError, QueryValidationError
from raycep.cep.lang.ast import Query

__all__ = ["QuerySourceError", "declares_name", "load_queries", "query_at",
           "statement_at"]

_NAMED = re.compile(r"\s*name\s", re.IGNORECASE)


class QuerySourceError(CepError):
    """Queries that cannot be used: a query file not found or unreadable, one without a
    query, a name used twice, or query text with an error (``located``: the message starts
    with ``in <where the text came from>``, the parser's error follows)."""

    def __init__(self, message: str, located: bool = False):
        super().__init__(message)
        self.located = located


def declares_name(query) -> bool:
    """Whether a query's text starts with ``NAME <ident>`` (else the parser numbered it)."""
    return bool(_NAMED.match(query.text or ""))


def load_queries(values, text_label: str = "query #{}") -> list:
    """``[(label, Query), ...]`` of ``values``: query file paths, query text (one or more
    queries separated by ``;``) or Query objects (``text_label``: how a value that is query
    text or a Query is named in errors, given its position).

    Unnamed queries are called ``q1``, ``q2``, ... by their position over all values; a
    name used twice is an error."""
    from raycep.cep.lang.parser import parse_queries

    out = []
    for position, value in enumerate(values, start=1):
        if isinstance(value, Query):
            label, queries = text_label.format(position), [value]
        else:
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"a query is query text, a query file's path or a Query "
                                f"(cep.lang.builder), got {type(value).__name__}: {value!r}")
            value = os.fspath(value)
            if os.path.isfile(value):
                label = f"query file {value}"
                try:
                    with open(value, encoding="utf-8") as handle:
                        text = handle.read()
                except (OSError, UnicodeDecodeError) as exc:
                    raise QuerySourceError(f"cannot read query file {value}: {exc}") from None
            elif value.endswith(".cep") and not any(c.isspace() for c in value):
                raise QuerySourceError(f"query file not found: {value}")
            else:
                label, text = text_label.format(position), value
            try:
                queries = parse_queries(text)
            except (QuerySyntaxError, QueryValidationError) as exc:
                which = query_at(text, exc.line) if exc.line else None
                raise QuerySourceError(f"in {label}{f', {which}' if which else ''}: {exc}",
                                       located=True) from None
            if not queries:
                raise QuerySourceError(f"{label} contains no query")
        for query in queries:
            named = query.name is not None if query.text is None else declares_name(query)
            if not named:                       # parser numbers per text: renumber
                query = dataclasses.replace(query, name=f"q{len(out) + 1}")
            for other_label, other in out:
                if other.name == query.name:
                    where = f"in {label}" if other_label == label else \
                        f"({other_label} and {label})"
                    raise QuerySourceError(f"query name {query.name!r} is used twice {where}")
            out.append((label, query))
    return out


def query_at(text: str, line: int) -> str | None:
    """How errors name the query of a query file that holds ``line``: ``query 'NAME'``, or
    ``query #k`` (its position) when it has no NAME; None when the text has one query or
    does not tokenize."""
    found = statement_at(text, line)
    if found is None or found[3] < 2:
        return None
    k, name, _, _ = found
    return f"query {name!r}" if name else f"query #{k}"


def statement_at(text: str, line: int) -> tuple | None:
    """``(k, NAME or None, its first line, number of queries)`` of the query of a query file that holds
    ``line`` (``k``: its position, from 1); None when the text does not tokenize or no query
    starts at or before ``line``."""
    from raycep.cep.lang.parser import tokenize
    try:
        toks = tokenize(text)
    except CepError:
        return None
    statements, open_ = [], False              # (position, name, first line)
    for i, tok in enumerate(toks[:-1]):        # the last token is 'eof'
        if tok.kind == "op" and tok.value == ";":
            open_ = False
        elif not open_:
            open_ = True
            named = tok.kind == "ident" and tok.value.lower() == "name" \
                and toks[i + 1].kind == "ident"
            statements.append((len(statements) + 1, toks[i + 1].value if named else None,
                               tok.line))
    found = [s for s in statements if s[2] <= line]
    return (*found[-1], len(statements)) if found else None
