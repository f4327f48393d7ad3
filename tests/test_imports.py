"""What ``raycep local`` and the columnar wire decoder import: never pandas; for a small CSV
or JSON Lines file, not even numpy or pyarrow.

pyarrow's ``pa.array``, ``pa.scalar`` and ``Array.to_numpy`` import pandas through its pandas
shim (~0.25 s and tens of MB per process, in the timed region of ``raycep local``), so
cep.io.columns builds and reads columns from buffers (``arrow_array``). A file of at most
``raycep.cep.io.files.ROW_READ_BYTES`` is read row by row. Each check runs in a fresh interpreter
(``bulk``: with ROW_READ_BYTES lowered so the small test file is read as a large one) and fails
if any step of the path brings those modules in again.
"""
import datetime as dt
import decimal
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raycep.cep.event import Event
from raycep.cep.io.codec import encode_batch

QUERY = "PATTERN SEQ(A a, B b) WHERE a.price < b.price WITHIN 60 seconds"

#: runs main([...]) (argv[1]: "bulk" or "small") and prints, as its last line, the exit
#: status and which of the modules this test watches were imported
_LOCAL = """
import json, sys
import raycep.cep.io.files
from raycep.gateway.cli import main
if sys.argv[1] == "bulk":
    raycep.cep.io.files.ROW_READ_BYTES = -1
status = main(sys.argv[2:])
print(json.dumps({"status": status,
                  "imported": [m for m in ("pandas", "numpy", "pyarrow") if m in sys.modules]}))
"""


@pytest.fixture(params=["bulk", "small"])
def reading(request):
    return request.param


def _expected(reading, status=0):
    """The modules a run may import: pyarrow and numpy to read in bulk, never pandas."""
    return {"status": status, "imported": ["numpy", "pyarrow"] if reading == "bulk" else []}


def _run(code: str, *args) -> tuple:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    *out, last = done.stdout.strip().splitlines()
    return json.loads(last), out, done.stderr


def _local(reading, events_path, out_path, *extra) -> tuple:
    result, out, err = _run(_LOCAL, reading, "local", "--query", QUERY, "--events",
                            str(events_path), "--out", str(out_path), "--key", "key", *extra)
    summary = json.loads(out[-1])
    return result, summary, err


def _rows(n=300):
    """Rows with mixed-kind, absent and bad values, so unions, nulls and bad rows are built."""
    rows = []
    for i in range(n):
        price = [i % 17 + 0.5, i % 13, "n/a", True][i % 4]
        rows.append({"type": "AB"[i % 2], "ts": 1000 + i, "price": price,
                     "volume": None if i % 5 == 0 else i, "key": f"k{i % 3}"})
    return rows


@pytest.mark.parametrize("quoted", [False, True], ids=["split-at-commas", "csv-module"])
def test_local_csv_never_imports_pandas(tmp_path, reading, quoted):
    lines = ["type,ts,price,volume,key"]
    for row in _rows():
        volume = "" if row["volume"] is None else row["volume"]
        lines.append(f"{row['type']},{row['ts']},{row['price']},{volume},{row['key']}")
    lines += ['A,2000,"1,5",3,k1' if quoted else "A,2000,1.5,3,k1",
              "A,2001,1.5,,", "B,,2,3,k1", "  ,  ,  ,  ,  ", "B,2002"]
    path = tmp_path / "e.csv"
    path.write_text("\n".join(lines) + "\n")
    result, summary, err = _local(reading, path, tmp_path / "m.jsonl", "--skip-bad-rows")
    assert result == _expected(reading)
    assert summary["events"] == 301 and summary["matches"] > 0
    assert "line 303" in err and "line 304" in err and "line 306" in err   # bad rows named


def test_local_jsonl_never_imports_pandas(tmp_path, reading):
    rows = _rows() + [{"type": "A", "ts": "x", "key": "k1"},
                      {"type": "B", "ts": 5000, "price": {"nested": [1, None]}, "key": "k2"}]
    path = tmp_path / "e.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result, summary, err = _local(reading, path, tmp_path / "m.jsonl", "--skip-bad-rows")
    assert result == _expected(reading)
    assert summary["events"] == 301 and summary["matches"] > 0
    assert "line 301" in err


def test_local_parquet_never_imports_pandas(tmp_path):
    n = 300
    epoch = dt.datetime(2024, 1, 1)
    table = pa.table({
        "type": pa.array(["AB"[i % 2] for i in range(n)]),
        "ts": pa.array([None if i == 7 else epoch + dt.timedelta(seconds=i) for i in range(n)],
                       pa.timestamp("ms")),
        "price": pa.array([decimal.Decimal(i % 17) / 4 for i in range(n)], pa.decimal128(9, 2)),
        "day": pa.array([dt.date(2024, 1, 1 + i % 28) for i in range(n)]),
        "note": pa.array([str(i % 4) if i % 3 else "x" for i in range(n)]),
        "key": pa.array([f"k{i % 3}" for i in range(n)]),
    })
    path = tmp_path / "e.parquet"
    pq.write_table(table, path)
    result, summary, err = _local("bulk", path, tmp_path / "m.jsonl", "--skip-bad-rows")
    assert result == _expected("bulk")
    assert summary["events"] == n - 1 and summary["matches"] > 0
    assert "row 8" in err


_DECODE = """
import json, sys
from raycep.cep.io.codec import decode_batch, encode_batch
batch, problems = decode_batch(open(sys.argv[1], "rb").read(), errors="collect")
events = batch.events
again = decode_batch(encode_batch(events, "s", "b2", schema_version=2)).events
print(json.dumps({"events": len(events), "problems": [p.row for p in problems],
                  "same": [e.id for e in again] == [e.id for e in events],
                  "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.parametrize("mixed", [False, True], ids=["plain-columns", "union-columns"])
def test_wire_v2_decode_and_encode_never_import_pandas(tmp_path, mixed):
    events = [Event("AB"[i % 2], float(i), {"price": ([1, 2.5, "x", None, [1]][i % 5] if mixed
                                                      else i * 0.5), "n": i}, f"k{i % 3}")
              for i in range(50)]
    data = encode_batch(events, "s", "b", schema_version=2)
    if mixed:                                        # a bad row: NaN event time, in column form
        table = pa.table({"type": ["A", "B"], "ts": [1.0, float("nan")]})
        from raycep.cep.io.codec import encode_columns
        (tmp_path / "bad.bin").write_bytes(encode_columns(table, "s", "bad"))
    path = tmp_path / "batch.bin"
    path.write_bytes(data)
    result, _, _ = _run(_DECODE, str(path))
    assert result == {"events": 50, "problems": [], "same": True, "pandas": False}
    if mixed:
        result, _, _ = _run(_DECODE, str(tmp_path / "bad.bin"))
        assert result == {"events": 1, "problems": [1], "same": True, "pandas": False}
