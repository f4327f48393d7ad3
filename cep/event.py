"""Events: a type, an event time, attributes, an optional partition key and an id.

The id is either given by the producer or derived from the event's content (type, ts, key and
attributes), so a replayed or duplicated event gets the same id. The derived id is computed
lazily: most events never need it (it only matters for duplicates, equal timestamps and output).

Total order used everywhere (SEQ, the index, matches): ``(ts, id)``. It does not depend on the
arrival order, so it is the same under replay and under out-of-order delivery.
"""
from __future__ import annotations

import hashlib
import math

import msgpack

from cep.errors import IngestError

#: attribute names that are fields of the event itself, not attributes
RESERVED = ("type", "ts", "id", "key")


class Event:
    """One primitive event. Treat instances as immutable once created."""

    __slots__ = ("type", "ts", "attrs", "key", "_id")

    def __init__(self, type: str, ts: float, attrs: dict | None = None, key=None,
                 id: str | None = None):
        self.type = type
        self.ts = ts
        self.attrs = attrs if attrs is not None else {}
        self.key = key
        self._id = id

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = derive_id(self.type, self.ts, self.key, self.attrs)
        return self._id

    @property
    def order(self) -> tuple:
        """The total order key ``(ts, id)``."""
        return (self.ts, self.id)

    def __repr__(self) -> str:
        key = f", key={self.key!r}" if self.key is not None else ""
        return f"Event({self.type!r}, {self.ts!r}, {self.attrs!r}{key}, id={self.id!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Event) and self.id == other.id and self.type == other.type \
            and self.ts == other.ts

    def __hash__(self) -> int:
        return hash((self.type, self.ts, self.id))

    def to_dict(self) -> dict:
        """JSON-friendly form: id, type, ts, key (if any) and the attributes at top level."""
        out = {"id": self.id, "type": self.type, "ts": self.ts}
        if self.key is not None:
            out["key"] = self.key
        for name, value in self.attrs.items():
            if name not in out:
                out[name] = value
        return out


def derive_id(type: str, ts: float, key, attrs: dict) -> str:
    """A stable content hash (hex) of an event; identical content gives the identical id."""
    body = msgpack.packb([type, ts, key, sorted(attrs.items())], use_bin_type=True,
                         default=str)
    return hashlib.blake2b(body, digest_size=10).hexdigest()


def before(x: Event, y: Event) -> bool:
    """``x`` strictly precedes ``y`` in the total order (ts, id)."""
    return x.ts < y.ts or (x.ts == y.ts and x is not y and x.id < y.id)


def make_event(row: dict, index: int | None = None, key_attr: str | None = None) -> Event:
    """Build an Event from a mapping with ``type`` and ``ts`` and attributes.

    Attributes may be given at top level or under ``attrs``. ``id`` and ``key`` are optional;
    with ``key_attr`` the partition key is taken from that attribute. Raises IngestError naming
    the row ``index`` and the field on malformed input.
    """
    if not isinstance(row, dict):
        raise IngestError(f"expected a mapping, got {type(row).__name__}", index)
    etype = row.get("type")
    if etype is None or etype == "":
        raise IngestError("missing event type", index, "type")
    if not isinstance(etype, str):
        raise IngestError(f"event type must be a string, got {etype!r}", index, "type")
    if "ts" not in row or row["ts"] is None or row["ts"] == "":
        raise IngestError("missing event time", index, "ts")
    ts = row["ts"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        try:
            ts = float(ts)
        except (TypeError, ValueError):
            raise IngestError(f"event time must be a number (seconds), got {ts!r}",
                              index, "ts") from None
    ts = float(ts)
    if math.isnan(ts) or math.isinf(ts):
        raise IngestError(f"event time must be finite, got {ts!r}", index, "ts")
    nested = row.get("attrs")
    if nested is not None and not isinstance(nested, dict):
        raise IngestError(f"attrs must be a mapping, got {type(nested).__name__}", index,
                          "attrs")
    attrs = {k: v for k, v in row.items() if k not in RESERVED and k != "attrs"}
    if nested:
        attrs.update(nested)
    eid = row.get("id")
    if eid is not None and not isinstance(eid, str):
        eid = str(eid)
    key = row.get("key")
    if key_attr is not None:
        if key_attr not in attrs:
            raise IngestError(f"partition key attribute {key_attr!r} is missing", index,
                              key_attr)
        key = attrs[key_attr]
    return Event(etype, ts, attrs, key, eid)
