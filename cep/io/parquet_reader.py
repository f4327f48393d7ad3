"""Events of a Parquet file, a record batch at a time (cep.io.sources).

Columns are typed by their Parquet types (text columns are typed per cell like CSV cells, as
the Spark ingest job types them; a timestamp is read as epoch seconds, a date or time as ISO
text, a decimal as a float); null = absent. Errors name the 1-based row number.
"""
from __future__ import annotations

from raycep.cep.io.files import REQUIRED_COLUMNS, file_error

#: Parquet rows per record batch
PARQUET_BATCH_ROWS = 65_536


def parquet_chunks(path: str, handle, key_attr, ts_unit):
    """``([ColumnBatch], their row numbers, [(row, IngestError)])`` per record batch of a
    Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from raycep.cep.io.columns import build_columns, convert_times, typed_table
    try:
        parquet = pq.ParquetFile(handle)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise file_error(path, f"not a Parquet file: {str(exc).splitlines()[0]}") from None
    names = parquet.schema_arrow.names
    missing = [name for name in REQUIRED_COLUMNS if name not in names]
    if missing:
        raise file_error(path, f"Parquet file lacks required column(s) "
                               f"{', '.join(repr(m) for m in missing)} (columns: "
                               f"{', '.join(names)})", field=missing[0])
    row = 1
    try:
        for record_batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            size = record_batch.num_rows
            table, wrong = convert_times(pa.Table.from_batches([record_batch]), ts_unit,
                                         first_row=row)
            batch, bad = build_columns(typed_table(table, empty_absent=False), key_attr,
                                       first_row=row)
            bad = [(p, wrong.get(p, err)) for p, err in bad]
            numbers = np.arange(row, row + size, dtype=np.int64)
            if bad:
                numbers = np.delete(numbers, [p for p, _ in bad])
            yield [batch], numbers, [(err.row, err) for _, err in bad]
            row += size
    except pa.ArrowException as exc:
        raise file_error(path, f"Parquet read failed after row {row - 1}: "
                               f"{str(exc).splitlines()[0]}") from None


__all__ = ["parquet_chunks"]
