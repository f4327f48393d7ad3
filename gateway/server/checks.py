"""What the gateway checks of a query before it registers one: the text holds one query
(parsed once here: the planner and the actors get the AST), its parameters, its window, and
where it runs (its scope) and which event types it reads."""
from __future__ import annotations

import re

from raycep.cep.lang.compiler import compile_query
from raycep.cep.errors import CepError, QuerySyntaxError, QueryValidationError
from raycep.cep.lang.parser import parse_queries, parse_query
from raycep.cep.lang.validate import finite, short_repr
from raycep.gateway.server.messages import type_name

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def validate_name(name: object) -> str:
    """``name`` if it is 1-64 characters of ``[A-Za-z0-9_.-]``, else QueryValidationError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise QueryValidationError(
            f"invalid query name {name!r}: use 1-64 characters of letters, digits, "
            f"'_', '.' and '-'")
    return name


def parse_one(text: str):
    """The one query of ``text``, parsed once here: the planner and the actors get the
    parsed query (the AST), not the text (each compiles it once)."""
    if not isinstance(text, str):
        raise QueryValidationError(f"text must be a string, got {type_name(text)}")
    if not text.strip():
        raise QueryValidationError("the query text is empty")
    try:
        return parse_query(text.strip().rstrip(";"))
    except QuerySyntaxError:
        try:
            queries = parse_queries(text)
        except CepError:
            queries = ()
        if len(queries) > 1:
            raise QueryValidationError(f"register one query at a time; the text holds "
                                       f"{len(queries)} (separated by ';')") from None
        raise


def check_params(params) -> None:
    """Query parameters: a mapping of names to finite numbers, strings or booleans;
    QueryValidationError names the first parameter that is not."""
    if params is None:
        return
    if not isinstance(params, dict):
        raise QueryValidationError(f"params must be a mapping of names to values, got "
                                   f"{type_name(params)}")
    for key, value in params.items():
        if not isinstance(key, str):
            raise QueryValidationError(f"parameter names must be strings, got {key!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not finite(value):
            raise QueryValidationError(f"parameter {key!r} must be a finite number, got "
                                       f"{short_repr(value)}")
        if not isinstance(value, (bool, int, float, str)):
            raise QueryValidationError(f"parameter {key!r} must be a number, a string or a "
                                       f"boolean, got {type_name(value)}")


def analyse(query, params: dict | None, key_attr: str | None,
            max_window: float | None = None) -> tuple:
    """(scope, types) of a parsed query: compile it (raising its validation error).
    ``max_window``: refuse a larger WITHIN (checked at registration, not on restore)."""
    cq = compile_query(query, params)
    if max_window is not None and not cq.window <= max_window:     # inf and nan too
        line, column = (query.within.pos or (None, None)) if query.within else (None, None)
        raise QueryValidationError(
            f"the query's window (WITHIN {cq.window:g} seconds) is larger than this "
            f"gateway's maximum of {max_window:g} seconds (raycep serve --max-window)",
            query.text, line, column)
    # strict contiguity is judged over the whole stream, every key's events (SASE+ section
    # 2): a partition actor sees only its keys, so such a query runs on the global actor
    keyed = key_attr is not None and key_attr in cq.equivalence \
        and query.strategy != "strict_contiguity"
    types = None if None in cq.types else frozenset(cq.types)
    return ("keyed" if keyed else "global"), types
