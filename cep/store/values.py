"""Arrow columns as Python values: what a ``ColumnBatch`` (cep.store.batch) decodes on first need,
and what ``cep.io.columns`` reads a table with.

``column_values`` decodes one column and flags the rows whose value ``make_event`` must
check; a dense union column (several kinds of values, see cep.io.columns) is decoded child by
child, its ``msgpack`` and ``bigint`` children unpacked.
"""
from __future__ import annotations

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycep.cep.store.arrow import to_numpy, true_mask, valid_mask


#: an attribute given as null (present, value None) in a table_from_events column
NULL = type("_NullValue", (), {"__repr__": lambda self: "null"})()


def plain_array(column) -> pa.Array:
    """One contiguous Array (dictionary-decoded) from an Array or ChunkedArray."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def is_text(t) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


class Column:
    """Python values of one column: ``values`` (list, None = null), ``flags`` (numpy bool:
    rows make_event must see, or None) and ``nulls`` (positions of nulls, numpy, or None)."""
    __slots__ = ("values", "flags", "nulls")

    def __init__(self, values, flags=None, nulls=None):
        self.values, self.flags, self.nulls = values, flags, nulls


def column_values(arr, key: bool = False) -> Column:
    """Decode one Arrow column to Python values, flagging the rows whose value make_event must
    check: non-finite floats, nested values, integers beyond 64 bits, values of Arrow types
    that are not plain (timestamps, decimals, lists, structs ...) and, for a partition key
    (``key=True``), bytes."""
    arr = plain_array(arr)
    t = arr.type
    if pa.types.is_union(t):
        return _union_values(arr, key)
    values = _text_values(arr) if is_text(t) else arr.to_pylist()
    nulls = np.flatnonzero(~valid_mask(arr)) if arr.null_count else None
    if (is_text(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)
            or pa.types.is_null(t)):
        return Column(values, None, nulls)
    if pa.types.is_floating(t):
        bad = true_mask(pc.invert(pc.is_finite(arr)))
        return Column(values, bad if bad.any() else None, nulls)
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t)) and not key:
        return Column(values, None, nulls)
    if pa.types.is_map(t):
        values = [dict(v) if v is not None else None for v in values]
    return Column(values, true_mask(pc.is_valid(arr)), nulls)


def _text_values(arr) -> list:
    """The str values of a text column (None = null), one str object per distinct text when
    texts repeat (event types, keys, symbols): ~50 bytes less per repeated cell to keep."""
    n = len(arr)
    if n < 64:
        return arr.to_pylist()
    encoded = pc.dictionary_encode(arr)
    texts = encoded.dictionary.to_pylist()
    if len(texts) > n // 4:
        return arr.to_pylist()
    index = to_numpy(encoded.indices)
    if arr.null_count:
        texts.append(None)
        index = np.where(valid_mask(encoded.indices), index, len(texts) - 1)
    distinct = np.empty(len(texts), dtype=object)
    distinct[:] = texts
    return distinct.take(index).tolist()


def _union_values(arr, key: bool) -> Column:
    t = arr.type
    if t.mode != "dense":
        arr = plain_array(arr)
        values = arr.to_pylist()                          # sparse unions: rare, row by row
        return Column(values, np.ones(len(arr), dtype=bool),
                       np.flatnonzero([v is None for v in values]) if None in values else None)
    n = len(arr)
    buffers = arr.buffers()                          # [None, type ids, offsets, children...]
    codes = np.frombuffer(buffers[1], dtype=np.int8)[arr.offset:arr.offset + n]
    offsets = np.frombuffer(buffers[2], dtype=np.int32)[arr.offset:arr.offset + n]
    code_index = np.zeros(128, dtype=np.int64)
    for index, code in enumerate(t.type_codes):
        code_index[code] = index
    which = code_index[codes]
    lists, flag_arrays = [], []
    for index in range(t.num_fields):
        name = t.field(index).name
        child = arr.field(index)
        if name == "msgpack" and (pa.types.is_binary(child.type)
                                  or pa.types.is_large_binary(child.type)):
            vals = [None if b is None else _unpacked(b) for b in child.to_pylist()]
            flags = np.array([v is not None for v in vals], dtype=bool)
        elif name == "bigint" and is_text(child.type):
            vals = [None if s is None else int(s) for s in child.to_pylist()]
            flags = np.array([v is not None for v in vals], dtype=bool)
        else:
            col = column_values(child, key)
            vals = col.values
            flags = col.flags if col.flags is not None else np.zeros(len(child), dtype=bool)
        lists.append(vals)
        flag_arrays.append(flags)
    values = [lists[c][o] for c, o in zip(which.tolist(), offsets.tolist())]
    flags = np.zeros(n, dtype=bool)
    for index, child_flags in enumerate(flag_arrays):
        if child_flags.any():
            rows = which == index
            flags[rows] = child_flags[offsets[rows]]
    nulls = [i for i, v in enumerate(values) if v is None]
    return Column(values, flags if flags.any() else None,
                   np.asarray(nulls, dtype=np.int64) if nulls else None)


def _unpacked(data: bytes):
    value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return NULL if value is None else value


__all__ = ["NULL", "Column", "column_values", "is_text", "plain_array"]
