"""EventMapping: how a table row (CSV, JSON lines, Parquet) becomes an Event.

Pure Python (no Spark import), so the same mapping is tested in-process and applied inside
Spark tasks. A row is a plain dict of column -> value (``Row.asDict()``). The event is built
with ``cep.event.make_event``, exactly as ``raycep local`` builds it, so the same file gives the
same event ids, hence the same match ids, whichever path it takes.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from raycep.cep.errors import IngestError
from raycep.cep.event import Event, make_event
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.timestamps import check_format, epoch, event_time

RESERVED = ("type", "ts", "id", "key", "attrs")


@dataclass(frozen=True)
class EventMapping:
    """Which column is what.

    ``type_column`` names the event-type column, or ``type_constant`` gives every row one
    type. ``ts_column`` holds the event time: a number in ``ts_unit`` (s, ms, us, ns), or with
    ``ts_unit="iso"`` an ISO-8601 string / timestamp value, or with a ``strftime`` pattern
    (``"%Y-%m-%d %H:%M:%S"``) a string in that format (naive times are UTC). ``key_column`` is
    the partition key; ``id_column`` the event id (None: a column named ``id``, if any);
    ``attributes`` the attribute columns (None: every other column; the key column is always
    one, as ``[key]`` tests it). Columns named ``key`` and ``id`` are read as ``raycep local``
    reads them: ``key`` is the partition key unless ``key_column`` names another column (then
    it is an ordinary attribute), ``id`` is an attribute when ``id_column`` names another
    column. ``typed_strings``: text cells that look like numbers or booleans become
    numbers/booleans (as CSV cells do in ``raycep local``)."""
    type_column: str | None = "type"
    type_constant: str | None = None
    ts_column: str = "ts"
    ts_unit: str = "s"
    key_column: str | None = None
    id_column: str | None = None
    attributes: tuple | None = None
    typed_strings: bool = True

    def __post_init__(self):
        if (self.type_column is None) == (self.type_constant is None):
            raise IngestError("give exactly one of a type column or a constant event type",
                              field="type")
        check_format(self.ts_unit)
        if self.attributes is not None:
            object.__setattr__(self, "attributes", tuple(self.attributes))

    def check_columns(self, columns) -> None:
        """Raise IngestError naming every mapped column the table lacks."""
        needed = [c for c in (self.type_column, self.ts_column, self.key_column,
                              self.id_column) if c is not None]
        needed += list(self.attributes or ())
        missing = [c for c in needed if c not in columns]
        if missing:
            raise IngestError(f"the input has no column(s) {', '.join(map(repr, missing))} "
                              f"(columns: {', '.join(columns)})", field=missing[0])

    def to_event(self, row: dict, index: int | None = None) -> Event:
        """The event of ``row``; IngestError naming the row and the column otherwise."""
        out: dict = {}
        if self.type_constant is not None:
            out["type"] = self.type_constant
        else:
            etype = _text(row.get(self.type_column))
            if etype is None or etype == "":
                raise IngestError("missing event type", index, self.type_column)
            if not isinstance(etype, str):
                raise IngestError(f"event type must be text, got {etype!r}", index,
                                  self.type_column)
            out["type"] = etype
        out["ts"] = event_time(row.get(self.ts_column), self.ts_unit, index, self.ts_column)
        id_column = self.id_column if self.id_column is not None else "id"
        if row.get(id_column) is not None:
            out["id"] = _text(row[id_column])         # as raycep local reads an id column
        skip = {self.type_column, self.ts_column, id_column}
        if self.attributes is None:
            names = [c for c in row if c not in skip]
        else:
            names = [c for c in self.attributes if c not in skip]
            if self.key_column is not None and self.key_column not in self.attributes:
                names.append(self.key_column)         # [key] tests it: an attribute
        for name in names:
            if name in RESERVED and name not in ("key", "id"):
                raise IngestError(f"column {name!r} is reserved; map it to another name or "
                                  f"leave it out of the attributes", index, name)
            value = row.get(name)
            if value is None:
                continue                              # an empty cell: attribute absent
            value = self._value(value, index, name)
            if name == "id":                          # the event id is another column
                out.setdefault("attrs", {})["id"] = value
            else:
                out[name] = value                     # a "key" column: as in make_event
        return make_event(out, index, self.key_column)

    def _value(self, value, index, name):
        if isinstance(value, str):
            return parse_cell(value) if self.typed_strings else value
        if isinstance(value, dt.datetime):
            return epoch(value)
        if isinstance(value, (dt.date, dt.time)):
            return value.isoformat()
        if isinstance(value, (bool, int, float, list, dict)):
            return value
        if hasattr(value, "asDict"):                  # a nested Spark Row
            return value.asDict(recursive=True)
        try:
            return float(value)                       # Decimal and friends
        except (TypeError, ValueError):
            raise IngestError(f"unsupported value {value!r} ({type(value).__name__})", index,
                              name) from None


def _text(value):
    return value.strip() if isinstance(value, str) else value
