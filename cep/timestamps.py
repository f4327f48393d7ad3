"""Event times given in other units or formats, read as seconds since the epoch.

One rule for every input path: ``raycep local --ts-format`` (cep.sources) and ``raycep
ingest --ts-format`` (spark_ingest.mapping) read the same cell as the same float, so the same
file gives the same event times, ids and matches through either command.
"""
from __future__ import annotations

import datetime as dt
import math
import re

from cep.errors import IngestError

#: units of a numeric event-time column: how many of them make a second. Dividing (not
#: multiplying by 1e-3 ...) is correctly rounded: 9 ms is 0.009 s, not 0.009000000000000001,
#: so a file in ms gives the same event times (hence ids) as the same file in seconds.
TS_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
FORMAT_HELP = "s, ms, us, ns (numbers), iso, or a strftime pattern such as '%Y-%m-%d %H:%M:%S'"
_INT = re.compile(r"[+-]?\d+")


def check_format(unit: str) -> str:
    """``unit`` if it is a known time format, else IngestError naming the choices."""
    if not isinstance(unit, str) or (unit not in TS_UNITS and unit != "iso" and "%" not in unit):
        raise IngestError(f"unknown event-time format {unit!r}: use {FORMAT_HELP}", field="ts")
    return unit


def event_time(value, unit: str, index: int | None = None, field: str = "ts") -> float:
    """Seconds since the epoch of one event-time value in ``unit`` (a TS_UNITS key, ``iso``
    or a strftime pattern; naive times are UTC); IngestError naming the row otherwise."""
    if value is None or value == "":
        raise IngestError("missing event time", index, field)
    try:
        if isinstance(value, dt.datetime):
            return epoch(value)
        if isinstance(value, dt.date):
            return epoch(dt.datetime(value.year, value.month, value.day))
        if unit == "iso":
            return epoch(dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00")))
        if "%" in unit:
            return epoch(dt.datetime.strptime(str(value).strip(), unit))
        if isinstance(value, bool):
            raise ValueError("a boolean is not a time")
        ts = _number(value) / TS_UNITS[unit]
    except (TypeError, ValueError, OverflowError) as exc:
        raise IngestError(f"event time {value!r} is not valid for format {unit!r}: {exc}",
                          index, field) from None
    if not math.isfinite(ts):
        raise IngestError(f"event time must be finite, got {value!r}", index, field)
    return ts


def epoch(value: dt.datetime) -> float:
    """Seconds since the epoch of a datetime (naive: UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def _number(value):
    """An int when the value is integral text or an int (exact, also for ns since 1970),
    else a float."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if _INT.fullmatch(text):
            return int(text)
        return float(text)
    return float(value)


__all__ = ["TS_UNITS", "FORMAT_HELP", "check_format", "event_time", "epoch"]
