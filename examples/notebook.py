"""raycep in a notebook: a pandas DataFrame with datetime64 times and an Arrow table in, the
matches out as a pyarrow Table. Run it: ``python3 examples/notebook.py`` (from anywhere).

It prints the number of matches per query of each call and the first rows as a DataFrame;
``raycep local --query examples/queries.cep --events examples/ticks.csv --key symbol`` finds
the same matches (tests/test_public_api.py checks it, ids included)."""
import pathlib

import pandas as pd
import pyarrow as pa

import raycep
from raycep.builder import attr, query, seq, var

HERE = pathlib.Path(__file__).resolve().parent

# the sample ticks; times as datetime64 (seconds after 2026-11-26 00:00 UTC)
ticks = pd.read_csv(HERE / "ticks.csv")
ticks["ts"] = pd.Timestamp("2026-11-26") + pd.to_timedelta(ticks["ts"], unit="s")

text = (HERE / "queries.cep").read_text()                          # three named queries
found = raycep.match(text, ticks, key="symbol")
print(found.group_by("query").aggregate([("id", "count")]).to_pandas())

# the same rule built in Python, over an Arrow table with float seconds
jump = query(seq(var("Stock", "a"), var("Stock", "b")),
             where=attr("b", "price") > attr("a", "price") * 1.01,
             equivalence="symbol", within=(10, "seconds"), name="jump")
print(jump)                                                        # its query text
table = pa.Table.from_pandas(pd.read_csv(HERE / "ticks.csv"), preserve_index=False)
jumps = raycep.match(jump, table, key="symbol")
print(jumps.num_rows, "jumps; the first:")
print(jumps.slice(0, 3).flatten().to_pandas().iloc[:, :8])
