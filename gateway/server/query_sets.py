"""Query sets: what a batch registration holds (``POST /v1/query-set``,
``Client.register_many``, ``raycep query add``) and how it is checked before anything is
registered.

A set is a query file's text (queries separated by ``;``, each optionally ``NAME n``) or a
list of entries (query text, or ``{"text", "name"?, "params"?, "mode"?}``). Every query is
parsed, compiled with its parameters and given its scope first; an error names the query
(``query 'NAME' (#k, line L)`` or ``query #k``) and carries its ``index`` (from 1) and
``query`` (its name) beside the usual line and column, so a caller knows which one to fix.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from raycep.cep.errors import CepError, QuerySyntaxError, QueryValidationError
from raycep.cep.lang.ast import Query
from raycep.cep.lang.parser import parse_queries
from raycep.gateway.server.checks import analyse, parse_one, validate_name
from raycep.gateway.server.messages import type_name
from raycep.local.queries import declares_name, statement_at

#: the fields of an entry given as an object
ENTRY_FIELDS = ("text", "name", "params", "mode")


@dataclass(frozen=True)
class Entry:
    """One query of a set: its position (from 1), its own text, the id asked for (None: the
    registry generates one), parameters and mode; ``line``/``column``: where its text starts
    in the query file (None for a list entry); ``query``: its AST when already parsed."""
    index: int
    text: str
    name: str | None = None
    params: dict = field(default_factory=dict)
    mode: str | None = None
    line: int | None = None
    column: int | None = None
    query: Query | None = None

    @property
    def label(self) -> str:
        """How error messages name it: ``query 'NAME' (#k, line L)``, ``query #k (line L)``."""
        where = f"line {self.line}" if self.line else ""
        if self.name:
            return f"query {self.name!r} (#{self.index}{', ' + where if where else ''})"
        return f"query #{self.index}" + (f" ({where})" if where else "")


@dataclass(frozen=True)
class Checked:
    """An entry that passed every check: its parsed query, scope and the types it reads."""
    entry: Entry
    query: Query
    scope: str
    types: frozenset | None


def file_entries(text, params=None, mode=None) -> list:
    """The entries of a query file's text (each query's own text, its NAME if it declares
    one, where it starts); a syntax or validation error is named by its query."""
    if not isinstance(text, str):
        raise QueryValidationError(f"text must be a string (a query file), got "
                                   f"{type_name(text)}")
    try:
        queries = parse_queries(text)
    except (QuerySyntaxError, QueryValidationError) as exc:
        found = statement_at(text, exc.line) if exc.line else None
        if found is None:
            raise
        k, name, first, _ = found
        raise labelled(exc, Entry(k, text, name, line=first), relative=False) from None
    out, offset = [], 0
    for k, query in enumerate(queries, start=1):
        offset = text.find(query.text, offset)
        line = text.count("\n", 0, offset) + 1
        column = offset - text.rfind("\n", 0, offset)
        out.append(Entry(k, query.text, query.name if declares_name(query) else None,
                         params, mode, line, column, query))
        offset += len(query.text)
    return out


def list_entries(items, params=None, mode=None) -> list:
    """The entries of a list of query texts or ``{"text", "name"?, "params"?, "mode"?}``
    objects (``params``/``mode``: for those that give none)."""
    if not isinstance(items, (list, tuple)):
        raise QueryValidationError(f"queries must be an array of query texts or objects, "
                                   f"got {type_name(items)}")
    out = []
    for k, item in enumerate(items, start=1):
        if isinstance(item, str):
            out.append(Entry(k, item, None, params, mode))
            continue
        entry = Entry(k, "")
        if not isinstance(item, dict):
            raise labelled(QueryValidationError(f"expected query text or an object "
                                                f"{{{', '.join(ENTRY_FIELDS)}}}, got "
                                                f"{type_name(item)}"), entry)
        unknown = [key for key in item if key not in ENTRY_FIELDS]
        if unknown:
            raise labelled(QueryValidationError(f"unknown field {unknown[0]!r} (known: "
                                                f"{', '.join(ENTRY_FIELDS)})"), entry)
        if "text" not in item:
            raise labelled(QueryValidationError("missing field 'text'"), entry)
        name = item.get("name")
        out.append(Entry(k, item["text"], name,
                         item["params"] if item.get("params") is not None else params,
                         item["mode"] if item.get("mode") is not None else mode))
    return out


def check_entries(entries: list, key_attr: str | None, max_window: float | None,
                  check_options) -> list:
    """Every entry parsed, its options checked (``check_options(name, params, mode)``), its
    name valid and used once, compiled and given its scope; the first failure is raised,
    named by its query (``labelled``). Returns the ``Checked`` entries in order."""
    if not entries:
        raise QueryValidationError("the query set is empty")
    out, names = [], {}
    for entry in entries:
        try:
            query = entry.query if entry.query is not None else parse_one(entry.text)
            check_options(entry.name, entry.params, entry.mode)
            name = entry.name if entry.name is not None else \
                (query.name if entry.query is None else None)
            if name != entry.name:
                entry = Entry(entry.index, entry.text, name, entry.params, entry.mode,
                              entry.line, entry.column, query)
            if name is not None:
                validate_name(name)
                if name in names:
                    raise QueryValidationError(f"the name {name!r} is used twice in the set "
                                               f"(also by query #{names[name]})")
                names[name] = entry.index
            scope, types = analyse(query, entry.params or None, key_attr, max_window)
        except CepError as exc:
            raise labelled(exc, entry) from None
        out.append(Checked(entry, query, scope, types))
    return out


def labelled(exc: CepError, entry: Entry, relative: bool = True) -> CepError:
    """``exc`` (same class, same fields) with a message that starts with the query's label,
    its ``index`` and ``query`` set and, when ``relative`` (its position is in the entry's
    own text), its line and column moved to positions in the query file the entry came
    from."""
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    reason = getattr(exc, "reason", None)
    cls = type(exc)
    out = cls.__new__(cls)
    out.__dict__.update(exc.__dict__)
    if relative and entry.line is not None and line:
        out.line = entry.line + line - 1
        out.column = column + entry.column - 1 if line == 1 and column else column
    out.index, out.query = entry.index, entry.name
    if reason is not None and line and isinstance(exc, (QuerySyntaxError,
                                                         QueryValidationError)):
        excerpt = exc.excerpt
        message = f"{reason} at line {out.line}, column {out.column}" + \
            (f"\n{excerpt}" if excerpt else "")
    else:
        message = str(exc)
    Exception.__init__(out, f"{entry.label}: {message}")
    return out
