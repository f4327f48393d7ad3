"""Arrow arrays to and from numpy and Python values, through buffers.

pyarrow's ``pa.array``, ``pa.scalar``, ``fill_null(value)`` and ``Array.to_numpy`` go through
its pandas shim, which imports pandas (~0.25 s and tens of MB in every process) though no
pandas object is involved. raycep builds arrays with ``arrow_array`` and reads them back with
``to_numpy`` / ``valid`` / ``mask`` instead (``tests/test_imports.py``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Arrow type -> numpy dtype of the fixed-width types arrow_array builds
_NUMPY_DTYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32,
                 pa.int64(): np.int64, pa.uint8(): np.uint8, pa.uint16(): np.uint16,
                 pa.uint32(): np.uint32, pa.uint64(): np.uint64, pa.float32(): np.float32,
                 pa.float64(): np.float64, pa.bool_(): np.bool_}
_ARROW_TYPES = {np.dtype(d): t for t, d in _NUMPY_DTYPES.items()}


def arrow_array(values, arrow_type=None, mask=None) -> pa.Array:
    """An Arrow array built from buffers (never through pandas, see above): ``values`` is a
    numpy array (numeric or bool; ``mask``, numpy bool, marks nulls) or a list of Python
    values of ``arrow_type`` (string, binary, an integer, float or bool type; None = null).
    Raises OverflowError / ValueError (UnicodeEncodeError) for a value the type cannot hold."""
    if isinstance(values, np.ndarray):
        if arrow_type is None:
            arrow_type = _ARROW_TYPES[values.dtype]
    else:
        if arrow_type is None:
            raise TypeError("arrow_array needs the type of a list")
        if None in values:
            mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
            blank = b"" if pa.types.is_binary(arrow_type) else \
                "" if pa.types.is_string(arrow_type) else 0
            values = [blank if v is None else v for v in values]
        if pa.types.is_string(arrow_type) or pa.types.is_binary(arrow_type):
            return _binary_array(values, arrow_type, mask)
        if pa.types.is_null(arrow_type):
            return pa.nulls(len(values))
        values = np.array(values, dtype=_NUMPY_DTYPES[arrow_type]) if values else \
            np.zeros(0, dtype=_NUMPY_DTYPES[arrow_type])
    n = len(values)
    dtype = _NUMPY_DTYPES[arrow_type]
    if values.dtype != dtype:
        values = values.astype(dtype)
    data = np.packbits(values, bitorder="little") if dtype is np.bool_ else \
        np.ascontiguousarray(values)
    validity, nulls = None, 0
    if mask is not None and (nulls := int(np.count_nonzero(mask))):
        validity = pa.py_buffer(np.packbits(~np.asarray(mask, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(data)],
                                 null_count=nulls)


def _binary_array(values: list, arrow_type, mask) -> pa.Array:
    """A string (values: str) or binary (bytes) array of a list; ``mask`` marks nulls."""
    n = len(values)
    encoded = list(map(str.encode, values)) if pa.types.is_string(arrow_type) else values
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = pa.large_string() if pa.types.is_string(arrow_type) else pa.large_binary()
    wide = offsets[-1] > np.iinfo(np.int32).max
    validity, nulls = None, 0
    if mask is not None and (nulls := int(np.count_nonzero(mask))):
        validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    arr = pa.Array.from_buffers(large if wide else arrow_type, n,
                                [validity, pa.py_buffer(offsets if wide else
                                                        offsets.astype(np.int32)),
                                 pa.py_buffer(b"".join(encoded))], null_count=nulls)
    return arr.cast(arrow_type) if wide else arr


def _bits(buffer, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap from bit ``offset`` on, as numpy bool."""
    if not n:
        return np.zeros(0, dtype=bool)
    data = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(data, count=offset + n, bitorder="little")[offset:].view(np.bool_)


def to_numpy(arr) -> np.ndarray:
    """The values of a numeric or boolean Arrow array as numpy (read-only; a null slot holds
    whatever its buffer holds)."""
    n = len(arr)
    validity, data = arr.buffers()[:2]
    if pa.types.is_boolean(arr.type):
        return _bits(data, arr.offset, n)
    dtype = _NUMPY_DTYPES[arr.type]
    if not n:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype)[arr.offset:arr.offset + n]


def valid_mask(arr) -> np.ndarray:
    """numpy bool: True where ``arr`` is not null."""
    if not arr.null_count:
        return np.ones(len(arr), dtype=bool)
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), dtype=bool)
    return _bits(arr.buffers()[0], arr.offset, len(arr))


def true_mask(arr) -> np.ndarray:
    """A boolean Arrow array as a numpy bool array, null -> False."""
    values = to_numpy(arr)
    return values & valid_mask(arr) if arr.null_count else values
