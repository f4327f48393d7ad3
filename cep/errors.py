"""The one error hierarchy of raycep. Every error the library raises derives from CepError."""
from __future__ import annotations


class CepError(Exception):
    """Base of all raycep errors."""


class QuerySyntaxError(CepError):
    """Query text that does not parse; carries line, column (1-based) and a caret excerpt."""

    def __init__(self, message: str, text: str, line: int, column: int):
        self.reason = message
        self.line = line
        self.column = column
        self.excerpt = caret_excerpt(text, line, column)
        super().__init__(f"{message} at line {line}, column {column}\n{self.excerpt}")


class QueryValidationError(CepError):
    """A query that parses but means nothing sensible (unknown variable, missing WITHIN, ...).

    ``line``/``column`` point at the offending construct when it is known.
    """

    def __init__(self, message: str, text: str | None = None, line: int | None = None,
                 column: int | None = None):
        self.reason = message
        self.line = line
        self.column = column
        self.excerpt = caret_excerpt(text, line, column) if text and line else ""
        where = f" at line {line}, column {column}" if line else ""
        tail = f"\n{self.excerpt}" if self.excerpt else ""
        super().__init__(f"{message}{where}{tail}")


class PlanningError(CepError):
    """A plan that does not fit its query, or a planner that cannot produce one."""


class IngestError(CepError):
    """An event or batch that cannot be read. Names the row index and the field when known."""

    def __init__(self, message: str, row: int | None = None, field: str | None = None):
        self.reason = message
        self.row = row
        self.field = field
        parts = []
        if row is not None:
            parts.append(f"row {row}")
        if field is not None:
            parts.append(f"field {field!r}")
        prefix = f"{', '.join(parts)}: " if parts else ""
        super().__init__(prefix + message)


class RecoveryError(CepError):
    """Saved state cannot be used: an unreadable checkpoint, or another partition's state."""


class EvaluationError(CepError):
    """A failure while evaluating a query that is not the input's fault (a bug or a bad plan)."""


def caret_excerpt(text: str | None, line: int | None, column: int | None) -> str:
    """The offending source line with a caret under ``column`` (both 1-based)."""
    if not text or not line:
        return ""
    lines = text.splitlines() or [""]
    src = lines[min(line, len(lines)) - 1]
    col = max(1, column or 1)
    return f"  {src}\n  {' ' * (col - 1)}^"


def short_repr(value, limit: int = 40) -> str:
    """``repr(value)`` for a message, cut at ``limit`` characters (a huge number or mapping
    must not flood the message; an int too long for ``repr`` is described instead)."""
    try:
        text = repr(value)
    except ValueError:
        return f"<{type(value).__name__} with too many digits>"
    return text if len(text) <= limit else text[:limit] + "..."


class GatewayError(CepError):
    """A request the gateway (or a client talking to it) cannot complete; ``status`` is the
    HTTP status it maps to."""
    status = 500


class NotFoundError(GatewayError):
    """No such query (or route)."""
    status = 404


class ConflictError(GatewayError):
    """The query id is taken."""
    status = 409


class AuthenticationError(GatewayError):
    """Missing or wrong bearer token."""
    status = 401


class UnavailableError(GatewayError):
    """The gateway, or a partition/planner actor behind it, cannot be reached."""
    status = 503


class OverloadedError(GatewayError):
    """Backpressure: a partition actor refused a batch because its match outbox holds more
    undelivered matches than its limit (or the batch's predecessor was refused). Nothing of
    the refused batch was processed; send it again later (HTTP 503, ``Retry-After`` seconds)."""
    status = 503
    retry_after = 1


class MovingError(OverloadedError):
    """A partition actor refused a routed batch because the cluster is being re-partitioned
    (``raycep scale``) and the batch's events lie after the time at which the keys move.
    Nothing of it was processed; send it again shortly: the actor takes it, or, once the
    keys have moved, refuses it with a ConflictError naming the new layout (route it again)."""
    retry_after = 1


_STATUS = {QuerySyntaxError: 400, QueryValidationError: 400, IngestError: 400,
           PlanningError: 400, EvaluationError: 500}
#: the location fields an error carries over the wire; ``index`` and ``query``: the position
#: (1-based) and name of the query of a query set that the error is about
_FIELDS = ("reason", "line", "column", "excerpt", "row", "field", "index", "query")


def http_status(exc: CepError) -> int:
    """The HTTP status of a raycep error."""
    if isinstance(exc, GatewayError):
        return exc.status
    return next((s for cls, s in _STATUS.items() if isinstance(exc, cls)), 500)


def error_to_dict(exc: CepError) -> dict:
    """A raycep error as plain data for the wire: its type, message and location fields."""
    out = {"type": type(exc).__name__, "message": str(exc)}
    for name in _FIELDS:
        value = getattr(exc, name, None)
        if value is not None:
            out[name] = value
    return out


def error_from_dict(data: dict, default: type = None) -> CepError:
    """The inverse of ``error_to_dict``: the same error class with the same fields (the class
    is looked up among this module's errors by name, never imported from the wire)."""
    classes = {cls.__name__: cls for cls in _all_errors()}
    cls = classes.get(str(data.get("type")), default or GatewayError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(data.get("message", "")))
    for name in _FIELDS:
        setattr(exc, name, data.get(name))
    return exc


def _all_errors():
    todo, seen = [CepError], []
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen
