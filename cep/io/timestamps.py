"""Event times given in other units or formats, read as seconds since the epoch.

One rule for every input path: ``raycep local --ts-format`` (cep.io.sources) and ``raycep
ingest --ts-format`` (spark_ingest.mapping) read the same cell as the same float, so the same
file gives the same event times, ids and matches through either command.
"""
from __future__ import annotations

import datetime as dt
import math
import re

from raycep.cep.errors import IngestError

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


#: the ISO 8601 text ``iso_seconds`` reads in bulk: date, ``T`` or space, time, 3 or 6
#: fraction digits (what every Python since 3.7 reads alike), ``Z`` or a ``+hh:mm`` offset
_ISO_BULK = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}"
             r"(\.[0-9]{3}|\.[0-9]{6})?(Z|[+-][0-9]{2}:[0-9]{2})?$")
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def iso_seconds(arr) -> tuple:
    """``(seconds, read)`` of a pyarrow string array of ISO 8601 times, in bulk (numpy over
    the text's bytes): ``seconds[i]`` is ``event_time(arr[i], "iso")`` where ``read[i]``;
    the other cells (null, other forms, out of range, beyond the year 2255) are left to
    ``event_time``, which reads them or says why not. A time is its microseconds since the
    epoch divided by 10**6, as ``datetime.timestamp()`` computes it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from raycep.cep.store.arrow import true_mask
    n = len(arr)
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    seconds = np.zeros(n, dtype=np.float64)
    read = true_mask(pc.match_substring_regex(arr, _ISO_BULK)) if n else np.zeros(0, bool)
    rows = np.flatnonzero(read)
    if not rows.size:
        return seconds, read
    _, offsets, data = arr.buffers()[:3]
    offsets = np.frombuffer(offsets, dtype=np.int32)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(data, dtype=np.uint8)
    start, end = offsets[rows].astype(np.int64), offsets[rows + 1].astype(np.int64)

    def number(at, count, valid=None):
        value = np.zeros(len(at), dtype=np.int64)
        for k in range(count):
            digit = data[np.minimum(at + k, len(data) - 1)].astype(np.int64) - 48
            value = value * 10 + (digit if valid is None else np.where(valid > k, digit, 0))
        return value

    year, month, day = number(start, 4), number(start + 5, 2), number(start + 8, 2)
    hour, minute, second = number(start + 11, 2), number(start + 14, 2), number(start + 17, 2)
    last = data[end - 1]
    zone = np.where(last == ord("Z"), 1, np.where(      # ("...:ss" alone is no zone)
        (data[np.maximum(end - 3, 0)] == ord(":")) & (end - start > 19), 6, 0))
    digits = np.maximum(end - start - 20 - zone, 0)                     # 0, 3 or 6
    micro = number(start + 20, 6, digits)
    sign = np.where(data[np.maximum(end - 6, 0)] == ord("-"), -1, 1)
    shift = np.where(zone == 6, sign * (number(end - 5, 2) * 3600 + number(end - 2, 2) * 60), 0)
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    month_days = np.asarray(_MONTH_DAYS)[np.clip(month, 0, 12)] + (leap & (month == 2))
    valid = (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= month_days) & \
        (hour <= 23) & (minute <= 59) & (second <= 59) & \
        ((zone != 6) | ((number(end - 5, 2) <= 23) & (number(end - 2, 2) <= 59)))
    y = year - (month <= 2)                                            # days from civil
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    micros = (days * 86400 + hour * 3600 + minute * 60 + second - shift) * 1_000_000 + micro
    valid &= np.abs(micros) <= 2 ** 53                                 # exact in float64
    seconds[rows] = micros / 1e6
    read[rows[~valid]] = False
    return seconds, read


# --------------------------------------------------------------------------- in bulk

#: Arrow types of a numeric event-time column read in bulk (bulk_seconds)
_NUMBER_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float", "double")
#: integers float64 holds exactly: numpy divides them as Python's ``int / int`` does
_EXACT = 2 ** 53


def bulk_seconds(arr, unit: str, rows=None, first_row: int = 0):
    """``(float64 pyarrow Array, {position: IngestError})``: ``event_time(cell, unit)`` of
    every cell of a pyarrow Array, in bulk, for numbers in a unit of TS_UNITS and for ISO
    text (``iso``); None for other columns and formats (read cell by cell). Null cells stay
    null, a cell that is not a valid time is null and its error (row ``rows[position]`` or
    ``first_row + position``) is ``event_time``'s own."""
    import pyarrow as pa
    if unit in TS_UNITS and str(arr.type) in _NUMBER_TYPES:
        return _number_seconds(arr, unit, rows, first_row)
    if unit == "iso" and pa.types.is_string(arr.type):
        return _iso_column(arr, rows, first_row)
    return None


def _number_seconds(arr, unit: str, rows, first_row: int) -> tuple:
    """``bulk_seconds`` of a numeric column: an integer float64 holds exactly divided by the
    unit in numpy (correctly rounded, as Python's ``int / int``); larger ones divided in
    Python; a value that is not finite is an error."""
    import numpy as np
    import pyarrow as pa
    from raycep.cep.store.arrow import arrow_array, to_numpy, valid_mask
    per = TS_UNITS[unit]
    values = to_numpy(arr)
    present = valid_mask(arr)
    seconds = values.astype(np.float64) / per
    errors = {}
    if pa.types.is_integer(arr.type):
        big = np.flatnonzero((values > _EXACT) | (values < -_EXACT) if
                             pa.types.is_signed_integer(arr.type) else values > _EXACT)
        if big.size:
            seconds[big] = [v / per for v in values[big].tolist()]
    else:
        bad = np.flatnonzero(~np.isfinite(seconds) & present)
        for i in bad.tolist():
            try:
                event_time(float(values[i]), unit, _row(rows, first_row, i))
            except IngestError as err:
                errors[i] = err
        if bad.size:
            present = present.copy()
            present[bad] = False
    return arrow_array(seconds, pa.float64(), mask=None if present.all() else ~present), \
        errors


def _iso_column(arr, rows, first_row: int) -> tuple:
    """``bulk_seconds`` of ISO text: the common forms by ``iso_seconds``, the other cells by
    ``event_time``."""
    import numpy as np
    import pyarrow as pa
    from raycep.cep.store.arrow import arrow_array
    seconds, read = iso_seconds(arr)
    errors = {}
    rest = np.flatnonzero(~read)
    if rest.size:
        for i, value in zip(rest.tolist(), arr.take(arrow_array(rest)).to_pylist()):
            if value is None:
                continue                         # absent: the event's check says so
            try:
                seconds[i] = event_time(value, "iso", _row(rows, first_row, i))
                read[i] = True
            except IngestError as err:
                errors[i] = err
    return arrow_array(seconds, pa.float64(), mask=None if read.all() else ~read), errors


def timestamp_seconds(arr):
    """An Arrow timestamp column as float seconds since the epoch, rounded once (as
    ``datetime.timestamp()``: ``int / int``; numpy's division where float64 holds the
    integer exactly)."""
    import numpy as np
    import pyarrow as pa
    from raycep.cep.store.arrow import arrow_array, to_numpy, valid_mask
    per = TS_UNITS[arr.type.unit]
    ints = to_numpy(arr.cast(pa.int64()))
    seconds = ints / per
    big = np.flatnonzero((ints > _EXACT) | (ints < -_EXACT))
    if big.size:
        seconds[big] = [v / per for v in ints[big].tolist()]
    return arrow_array(seconds, pa.float64(), mask=~valid_mask(arr) if arr.null_count else None)


def _row(rows, first_row: int, position: int) -> int:
    return int(rows[position]) if rows is not None else first_row + position


__all__ = ["TS_UNITS", "FORMAT_HELP", "bulk_seconds", "check_format", "event_time", "epoch",
           "iso_seconds", "timestamp_seconds"]
