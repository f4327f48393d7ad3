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
