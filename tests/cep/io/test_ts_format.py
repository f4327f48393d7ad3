"""``raycep local --ts-format``: event times in ms / us / ns, ISO-8601 or a strftime pattern
read exactly as ``raycep ingest --ts-format`` reads them (same times, ids and matches)."""
import csv
import datetime as dt
import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raycep.cep.io.sources import read_events
from raycep.gateway import cli
from raycep.spark_ingest.mapping import EventMapping

ROOT = pathlib.Path(__file__).resolve().parents[3]
TICKS = ROOT / "examples" / "ticks.csv"
QUERIES = ROOT / "examples" / "queries.cep"
SEQ_AB = "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 10 seconds"


def iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat()


def rewrite_ticks(path, convert):
    """examples/ticks.csv with its ts column rewritten by ``convert(text)``."""
    with open(TICKS, newline="") as src, open(path, "w", newline="") as dst:
        rows = csv.reader(src)
        out = csv.writer(dst, lineterminator="\n")
        header = next(rows)
        out.writerow(header)
        at = header.index("ts")
        for row in rows:
            row[at] = convert(row[at])
            out.writerow(row)
    return path


def run_local(capsys, *argv):
    status = cli.main(["local", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


@pytest.mark.parametrize("fmt, convert", [
    ("iso", lambda t: iso(float(t))),
    ("ms", lambda t: str(round(float(t) * 1000))),
    ("%Y-%m-%d %H:%M:%S.%f", lambda t: dt.datetime.fromtimestamp(float(t), dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S.%f")),
])
def test_local_reads_the_sample_ticks_in_other_time_formats_with_the_same_matches(
        capsys, tmp_path, fmt, convert):
    converted = rewrite_ticks(tmp_path / "ticks.csv", convert)
    assert converted.stat().st_size > 512 * 1024           # the bulk (columnar) reader
    status, plain, err = run_local(capsys, "--query", QUERIES, "--events", TICKS,
                                   "--key", "symbol")
    assert status == 0, err
    status, lines, err = run_local(capsys, "--query", QUERIES, "--events", converted,
                                   "--key", "symbol", "--ts-format", fmt)
    assert status == 0, err
    assert len(plain) > 10
    assert lines[:-1] == plain[:-1]                          # same matches, ids, times
    assert json.loads(lines[-1])["events"] == json.loads(plain[-1])["events"] == 20_000


ROWS = [("A", "2026-11-23T10:00:01Z", 1), ("B", "2026-11-23T10:00:02+00:00", 0),
        ("A", "2026-11-23T10:00:03", 5), ("B", "not a time", 7),
        ("B", "2026-11-23T10:00:04.5", 10)]


def small_files(tmp_path):
    """The same five rows (one with a bad time, line 5 / row 4) as CSV, JSONL and Parquet."""
    csv_path = tmp_path / "e.csv"
    csv_path.write_text("type,ts,x\n" + "".join(f"{t},{ts},{x}\n" for t, ts, x in ROWS))
    jsonl_path = tmp_path / "e.jsonl"
    jsonl_path.write_text("".join(json.dumps({"type": t, "ts": ts, "x": x}) + "\n"
                                  for t, ts, x in ROWS))
    parquet_path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"type": [r[0] for r in ROWS], "ts": [r[1] for r in ROWS],
                             "x": [r[2] for r in ROWS]}), parquet_path)
    return {"csv": (csv_path, "line 5"), "jsonl": (jsonl_path, "line 4"),
            "parquet": (parquet_path, "row 4")}


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_iso_times_give_the_events_spark_ingest_builds_and_a_bad_time_names_its_row(
        capsys, tmp_path, kind):
    path, where = small_files(tmp_path)[kind]
    events, problems = read_events(path, errors="collect", ts_unit="iso")
    mapping = EventMapping(ts_unit="iso")
    expected = [mapping.to_event({"type": t, "ts": ts, "x": x}, i)
                for i, (t, ts, x) in enumerate(ROWS, start=1) if ts != "not a time"]
    assert [e.ts for e in events] == [e.ts for e in expected]
    assert events[0].ts == dt.datetime(2026, 11, 23, 10, 0, 1, tzinfo=dt.timezone.utc).timestamp()
    assert events[3].ts - events[0].ts == 3.5
    assert [(e.type, e.attrs) for e in events] == [(e.type, e.attrs) for e in expected]
    [problem] = problems
    assert "event time 'not a time' is not valid for format 'iso'" in str(problem)
    assert where in str(problem) and str(path) in str(problem)

    status, lines, err = run_local(capsys, "--query", SEQ_AB, "--events", path,
                                   "--ts-format", "iso", "--skip-bad-rows")
    assert status == 0, err
    assert "not valid for format 'iso'" in err and where in err
    matches = [json.loads(line) for line in lines[:-1]]
    assert sorted((m["events"]["a"]["x"], m["events"]["b"]["x"]) for m in matches) == \
        [(1, 10), (5, 10)]
    assert json.loads(lines[-1])["events"] == 4

    status, lines, err = run_local(capsys, "--query", SEQ_AB, "--events", path,
                                   "--ts-format", "iso")
    assert status == 2 and "not valid for format 'iso'" in err and where in err


def test_seconds_stay_the_default_and_an_unknown_format_is_a_usage_error(capsys, tmp_path):
    path = tmp_path / "e.csv"
    path.write_text("type,ts,x\nA,2026-11-23T10:00:01Z,1\n")
    status, _, err = run_local(capsys, "--query", SEQ_AB, "--events", path)
    assert status == 2 and "event time must be a number (seconds)" in err
    assert "--ts-format iso" in err                      # says how to read such times
    status, _, err = run_local(capsys, "--query", SEQ_AB, "--events", path,
                               "--ts-format", "minutes")
    assert status == 2
    assert "--ts-format" in err and "unknown event-time format 'minutes'" in err
