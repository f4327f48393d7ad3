"""Events: a type, an event time, attributes, an optional partition key and an id.

The id is either given by the producer or derived from the event's content (type, ts, key and
attributes), so a replayed or duplicated event gets the same id. The derived id is computed
lazily: most events never need it (it only matters for duplicates, equal timestamps and output).

Total order used everywhere (SEQ, the index, matches): ``(ts, id)``. It does not depend on the
arrival order, so it is the same under replay and under out-of-order delivery.
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import threading
from itertools import repeat
from operator import attrgetter

import msgpack
import orjson

from raycep.cep.errors import IngestError, short_repr

#: attribute names that are fields of the event itself, not attributes
RESERVED = ("type", "ts", "id", "key")


class Event:
    """One primitive event. Treat instances as immutable once created.

    ``Event(type, ts, attrs, key, id)`` checks its arguments with the rules of
    ``make_event`` (the one validation layer of every input path) and raises IngestError
    naming the field: ``type`` a non-empty string; ``ts`` a finite number of seconds (stored
    as a float; a NaN, an infinity, a boolean, a ``datetime`` or a ``pandas.Timestamp`` is
    refused: convert those with ``.timestamp()``); attribute names strings and values
    numbers (finite, 64-bit integers), strings, booleans, null, bytes, lists or maps (numbers
    of another class are converted, e.g. numpy's); ``key`` a string, a finite number or a
    boolean; ``id`` a string (a number or boolean is stored as text). The check runs once,
    here; nothing is checked again per evaluation.

    With ``Engine(key_attr=A)`` the partition key is the attribute ``A`` (see
    ``keyed_events``): an Event without a key gets it from ``attrs[A]``; a ``key`` that
    differs from ``attrs[A]`` is refused when the engine takes the event.
    """

    __slots__ = ("type", "ts", "attrs", "key", "_id", "_json")

    def __init__(self, type: str, ts: float, attrs: dict | None = None, key=None,
                 id: str | None = None):
        if type.__class__ is not str or not type:
            _bad_type(type)
        if ts.__class__ is not float or ts - ts != 0.0:
            ts = event_time(ts)
        attrs = {} if attrs is None else checked_attrs(attrs)
        if key is not None and key.__class__ is not str:
            key = checked_key(key, None, "key")
        if id is not None and id.__class__ is not str:
            id = checked_id(id)
        self.type = type
        self.ts = ts
        self.attrs = attrs
        self.key = key
        self._id = id
        self._json = None

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

    def __reduce__(self):
        """Pickled (Ray, checkpoints) as its constructor's arguments, without the cached JSON
        (the receiver serialises it again if needed): ~4x faster than a state dict. Rebuilt
        without a second check (it was checked when it was made)."""
        return trusted_event, (self.type, self.ts, self.attrs, self.key, self._id)

    def json(self) -> bytes:
        """``to_dict()`` as compact JSON bytes, computed once per event: a match line is
        assembled from these fragments (cep.io.output), so an event in many matches is serialised
        once. Values JSON cannot carry (bytes) are written as their ``str()``. Computed by
        ``prepare_json``, which does it for many events at once."""
        if self._json is None:
            prepare_json((self,))
        return self._json

    def to_dict(self) -> dict:
        """JSON-friendly form: id, type, ts, key (if any) and the attributes at top level
        (an attribute named ``key`` is shown, not the partition key, which is then the value
        of another attribute)."""
        return _record(self.id, self.type, self.ts, self.key, self.attrs)


def trusted_event(type: str, ts: float, attrs: dict, key=None, id: str | None = None) -> Event:
    """An Event from values already checked by the rules of ``Event``/``make_event`` (a
    decoded column batch, an unpickled event, ``make_event`` itself): no second check."""
    ev = _new(Event)
    ev.type, ev.ts, ev.attrs, ev.key, ev._id, ev._json = type, ts, attrs, key, id, None
    return ev


_new = object.__new__


def event_row(ev: Event) -> list:
    """``[type, ts, key, attrs, id]`` of ``ev`` (its own id, None where it is derived): an
    event as a row (the actors' state files, cep.store.batch ``ColumnBatch.rows``)."""
    return [ev.type, ev.ts, ev.key, ev.attrs, ev._id]


def _bad_type(etype):
    if etype is None or etype == "":
        raise IngestError("missing event type", None, "type")
    raise IngestError(f"event type must be a string, got {short_repr(etype)}", None, "type")


def event_time(ts, index: int | None = None) -> float:
    """``ts`` as a finite float (seconds), or IngestError naming the field: a number (or
    numeric text, as files give it) that is finite. A boolean is no time, nor is a datetime
    or a pandas Timestamp (convert those with ``.timestamp()``)."""
    if ts is None or ts == "":
        raise IngestError("missing event time", index, "ts")
    if ts.__class__ is not float:
        if isinstance(ts, bool) or hasattr(ts, "timestamp") or hasattr(ts, "total_seconds"):
            hint = " (convert it with .timestamp())" if hasattr(ts, "timestamp") else ""
            raise IngestError(f"event time must be a number of seconds, got "
                              f"{type(ts).__name__} {short_repr(ts)}{hint}", index, "ts")
        try:
            ts = float(ts)
        except OverflowError:
            ts = math.inf
        except (TypeError, ValueError):
            raise IngestError(f"event time must be a number (seconds), got {short_repr(ts)}",
                              index, "ts") from None
    if ts - ts != 0.0:
        raise IngestError(f"event time must be finite, got {ts!r}", index, "ts")
    return ts


def checked_attrs(attrs, index: int | None = None) -> dict:
    """``attrs`` when every name is a string and every value passes ``_put``'s rules (the
    common case: the same dict, checked in one loop); else a converted copy, or IngestError
    naming the attribute."""
    if attrs.__class__ is not dict:
        if not isinstance(attrs, dict):
            raise IngestError(f"attrs must be a mapping (a dict), got {type(attrs).__name__}",
                              index, "attrs")
        attrs = dict(attrs)
    for name, value in attrs.items():
        cls = value.__class__
        if name.__class__ is not str:
            raise IngestError(f"attribute names must be strings, got {short_repr(name)}",
                              index, "attrs")
        if cls is float:
            if value - value != 0.0:
                raise _not_finite(value, index, name)
        elif cls is int:
            if not _INT_MIN <= value <= _INT_MAX:
                raise _too_large(value, index, name)
        elif cls is not str and cls is not bool:
            for other in attrs:
                if other.__class__ is not str:
                    raise IngestError(f"attribute names must be strings, got "
                                      f"{short_repr(other)}", index, "attrs")
            out: dict = {}
            _put(out, attrs, (), index)          # converts (numpy numbers...) or reports
            return out
    return attrs


def checked_key(key, index: int | None = None, field: str = "key"):
    """A partition key: a string, a finite number (64-bit if an integer) or a boolean (other
    number classes converted), or IngestError naming ``field``."""
    if key.__class__ not in _KEY_KINDS:
        key = _checked(key, index, field)
    cls = key.__class__
    if cls not in _KEY_KINDS:
        raise IngestError(f"partition key must be a string, a number or a boolean, got "
                          f"{type(key).__name__}", index, field)
    if cls is float and key - key != 0.0:
        raise _not_finite(key, index, field)
    if cls is int and not _INT_MIN <= key <= _INT_MAX:
        raise _too_large(key, index, field)
    return key


def checked_id(eid, index: int | None = None) -> str:
    """An event id as text: a string, or a number or boolean (stored as text)."""
    if eid.__class__ is not str:
        if eid.__class__ not in _KEY_KINDS:
            raise IngestError(f"event id must be a string or a number, got "
                              f"{type(eid).__name__}", index, "id")
        eid = str(eid)
    return eid


_ABSENT = object()
_KEY, _ATTRS = attrgetter("key"), attrgetter("attrs")


def keyed_events(events: list, key_attr: str) -> list:
    """``events`` as an ``Engine(key_attr=...)`` takes them: the partition key is the
    attribute ``key_attr`` (one source of truth, as ``make_event(row, key_attr=...)`` makes
    it). An event without a key gets one from the attribute (a copy with the event's id;
    an event without the attribute keeps no key); an event whose key differs from the attribute, or that has a key
    but not the attribute, raises IngestError naming its position and the attribute: the
    engine would otherwise pair events of different keys. The list itself when nothing
    changes (checked with C-level maps: no loop per event unless a key is missing).
    ``key_attr="key"`` (as in ``make_event``): the event's key is the key; an attribute
    named ``key`` only fills a missing one."""
    keys = list(map(_KEY, events))
    values = list(map(dict.get, map(_ATTRS, events), repeat(key_attr), repeat(_ABSENT)))
    if keys == values:
        return events
    out = list(events)
    for k, (key, value) in enumerate(zip(keys, values)):
        if key == value and key is not None:
            continue
        if key is None:
            if value is not _ABSENT and value is not None:
                ev = events[k]                   # the copy keeps the event's id
                out[k] = trusted_event(ev.type, ev.ts, ev.attrs,
                                       checked_key(value, k, key_attr), ev.id)
            continue
        if key_attr == "key":           # make_event: the key field is the key, then
            continue                    # (an attribute named key is only a fallback)
        if value is _ABSENT:
            raise IngestError(f"the event has partition key {short_repr(key)} but no attribute "
                              f"{key_attr!r}, which is the partition key of this engine "
                              f"(key_attr={key_attr!r})", k, key_attr)
        raise IngestError(f"partition key {short_repr(key)} differs from the attribute "
                          f"{key_attr}={short_repr(value)}: with key_attr={key_attr!r} the "
                          f"attribute is the partition key (leave key out, or make them equal)",
                          k, key_attr)
    return out


def keyed_event(event: Event, key_attr: str) -> Event:
    """``keyed_events`` of one event."""
    key = event.key
    if key is not None and key is event.attrs.get(key_attr, _ABSENT):
        return event
    return keyed_events([event], key_attr)[0]


def _record(eid: str, type: str, ts: float, key, attrs: dict) -> dict:
    """``Event.to_dict()`` from the event's fields (attributes named id, type or ts are
    not shown: the fields win)."""
    if key is None or "key" in attrs:
        out = {"id": eid, "type": type, "ts": ts}
    else:
        out = {"id": eid, "type": type, "ts": ts, "key": key}
    if "id" in attrs or "type" in attrs or "ts" in attrs:
        for name, value in attrs.items():
            if name not in out:
                out[name] = value
    else:
        out.update(attrs)
    return out


class _Local(threading.local):
    """Per thread: one msgpack Packer (a Packer is not thread-safe; building one per call
    costs ~1.3 us)."""

    def __init__(self):
        self.pack = msgpack.Packer(use_bin_type=True, default=str).pack


_LOCAL = _Local()
_JSON_ERRORS = (TypeError, orjson.JSONEncodeError)     # e.g. an int orjson does not take


#: numeric kinds of an attribute value (column-wise comparisons: cep.store.batch, cep.store.index)
ABSENT, EXACT, OTHER = 0, 1, 2
#: ints up to this magnitude are exact in float64
EXACT_INT = 2 ** 53


def kind_of(value) -> int:
    """EXACT for a float or an int that float64 holds exactly (not a bool), else OTHER."""
    cls = value.__class__
    if cls is float or (cls is int and -EXACT_INT <= value <= EXACT_INT):
        return EXACT
    return OTHER


def derive_id(type: str, ts: float, key, attrs: dict, pack=None) -> str:
    """A stable content hash (hex) of an event; identical content gives the identical id.
    ``pack``: this thread's ``Packer.pack`` when the caller has it at hand (prepare_json)."""
    body = (pack or _LOCAL.pack)([type, ts, key, sorted(attrs.items())])
    return hashlib.blake2b(body, digest_size=10).hexdigest()


def prepare_json(events) -> None:
    """Compute ``Event.json()`` (and the derived id, if not known yet) of every event of
    ``events`` that has no JSON yet, in one loop (one packer, no method or property call
    per event besides the id and the record): cep.io.output calls it once per chunk of matches,
    ~10 % less time per event than ``e.json()`` one by one."""
    pack, dumps, record = _LOCAL.pack, orjson.dumps, _record
    for e in events:
        if e._json is None:
            eid, key, attrs = e._id, e.key, e.attrs
            if eid is None:
                eid = e._id = derive_id(e.type, e.ts, key, attrs, pack)
            out = record(eid, e.type, e.ts, key, attrs)
            try:
                e._json = dumps(out, default=str)
            except _JSON_ERRORS:
                e._json = json.dumps(out, default=str, separators=(",", ":"),
                                     ensure_ascii=False).encode()


def before(x: Event, y: Event) -> bool:
    """``x`` strictly precedes ``y`` in the total order (ts, id)."""
    return x.ts < y.ts or (x.ts == y.ts and x is not y and x.id < y.id)


#: top-level fields of a row that are not attributes
_FIELDS = frozenset(RESERVED + ("attrs",))
_FIELDS_BUT_KEY = _FIELDS - {"key"}
#: attribute values that need no check (a float is checked for being finite)
_PLAIN = frozenset((str, int, bool))
_SIMPLE = _PLAIN | {float}
#: the kinds of a partition key and of an event id
_KEY_KINDS = frozenset((str, int, float, bool))
_NESTED = (list, tuple, dict)
#: the integers an event can carry (msgpack: int64 and uint64)
_INT_MIN, _INT_MAX = -2 ** 63, 2 ** 64 - 1


def make_event(row: dict, index: int | None = None, key_attr: str | None = None) -> Event:
    """Build an Event from a mapping with ``type`` and ``ts`` and attributes.

    This is the one validation layer of every input path (files, the codec, the gateway's
    JSON rows, the client, Spark): a bad row raises IngestError naming the row ``index`` and
    the field, so the caller reports it and goes on with the other rows.

    * Attributes may be given at top level or under ``attrs`` (where any name is an
      attribute). Values are numbers, strings, booleans, null, lists or maps; a number that is
      not finite (NaN, Infinity, also inside a list or map) makes the row bad. Lists and maps
      are kept as data: every comparison or arithmetic with one fails (the conjunct is false).
    * ``id`` (optional) is the event id: a string, or a number or boolean (stored as text).
    * ``key`` (optional) is the partition key, unless ``key_attr`` names another attribute:
      then the partition key is that attribute's value and a ``key`` field is an ordinary
      attribute (a user's column named ``key`` is never replaced or lost). ``key_attr="key"``
      is the same as no ``key_attr`` except that a missing key is an error. A partition key is
      a string, a finite number or a boolean.
    """
    if not isinstance(row, dict):
        raise IngestError(f"expected a mapping, got {type(row).__name__}", index)
    etype = row.get("type")
    if etype is None or etype == "":
        raise IngestError("missing event type", index, "type")
    if not isinstance(etype, str):
        raise IngestError(f"event type must be a string, got {etype!r}", index, "type")
    ts = event_time(row.get("ts"), index)
    nested = row.get("attrs")
    if nested is not None and not isinstance(nested, dict):
        raise IngestError(f"attrs must be a mapping, got {type(nested).__name__}", index,
                          "attrs")
    key_is_field = key_attr is None or key_attr == "key"
    attrs: dict = {}
    _put(attrs, row, _FIELDS if key_is_field else _FIELDS_BUT_KEY, index)
    if nested:
        for value in nested.values():        # the wire form: a quick check, then one copy
            cls = value.__class__
            if cls not in _SIMPLE or (cls is float and value - value != 0.0):
                _put(attrs, nested, (), index)      # reports the value, or converts it
                break
        else:
            attrs.update(nested)
    eid = row.get("id")
    if eid is not None and eid.__class__ is not str:
        eid = checked_id(eid, index)
    if key_is_field:
        key = row.get("key")
        if key is None and key_attr is not None:
            if "key" not in row and "key" not in attrs:
                raise IngestError("partition key attribute 'key' is missing", index, "key")
            key = attrs.get("key")
        field = "key"
    else:
        if key_attr not in attrs:
            raise IngestError(f"partition key attribute {key_attr!r} is missing", index,
                              key_attr)
        key = attrs[key_attr]
        field = key_attr
    if key is not None and key.__class__ is not str:
        key = checked_key(key, index, field)
    return trusted_event(etype, ts, attrs, key, eid)


def _put(attrs: dict, row: dict, skip, index) -> None:
    """Copy the attributes of ``row`` (names not in ``skip``) into ``attrs``, checking each
    value in O(1) unless it is a list or map: str/int/bool pass, a float must be finite."""
    for name, value in row.items():
        if name in skip:
            continue
        cls = value.__class__
        if cls is float:
            if value - value != 0.0:                  # NaN or +-Infinity
                raise _not_finite(value, index, name)
        elif cls is int:
            if not _INT_MIN <= value <= _INT_MAX:     # msgpack carries 64-bit integers
                raise _too_large(value, index, name)
        elif cls not in _PLAIN:
            value = _checked(value, index, name)
        attrs[name] = value


def _too_large(value, index, name) -> IngestError:
    return IngestError(f"integer out of range (a 64-bit integer), got "
                       f"{short_repr(value, 20)}", index, name)


def _not_finite(value, index, name) -> IngestError:
    return IngestError(f"number must be finite, got {value!r}", index, name)


def _checked(value, index, name):
    """An attribute value that is not a str/int/bool/float: null; bytes; a list or map whose
    numbers are all finite (walked without recursion, so deep nesting cannot overflow the
    stack); a number or string of another class, converted to float/int/str. Anything else
    makes the row bad."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, _NESTED):
        todo = [value]
        while todo:
            item = todo.pop()
            for v in (item.values() if isinstance(item, dict) else item):
                cls = v.__class__
                if cls is float:
                    if v - v != 0.0:
                        raise IngestError(f"number inside the value must be finite, got {v!r}",
                                          index, name)
                elif cls is int and not _INT_MIN <= v <= _INT_MAX:
                    raise _too_large(v, index, name)
                elif isinstance(v, _NESTED):
                    todo.append(v)
                elif not (cls in _PLAIN or v is None or cls is bytes):
                    raise IngestError(f"value holds a {type(v).__name__}: only numbers, "
                                      "strings, booleans, null, lists and maps are allowed",
                                      index, name)
        return value
    if isinstance(value, numbers.Integral):
        if not _INT_MIN <= int(value) <= _INT_MAX:
            raise _too_large(value, index, name)
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        if value - value != 0.0:
            raise _not_finite(value, index, name)
        return value
    if isinstance(value, str):
        return str(value)
    raise IngestError(f"value must be a number, string, boolean, null, list or map, got "
                      f"{type(value).__name__}", index, name)
