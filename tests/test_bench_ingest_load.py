"""The benchmarks of the commands' cluster paths run (no timing checked): the copies
bench_serve_ingest feeds hold the same ticks at later times, and bench_load drives a real
``raycep serve`` with producers, readers and query changes."""
import csv
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_load, bench_serve_ingest  # noqa: E402


def test_copies_hold_the_same_ticks_later(tmp_path):
    paths = bench_serve_ingest.write_copies(str(tmp_path), 500, 3, 3)
    rows = [list(csv.DictReader(open(p, encoding="utf-8"))) for p in paths]
    assert [len(r) for r in rows] == [500, 500, 500]
    for k, copy in enumerate(rows):
        assert [r["symbol"] for r in copy] == [r["symbol"] for r in rows[0]]
        assert all(float(b["ts"]) == float(a["ts"]) + k * bench_serve_ingest.SHIFT
                   for a, b in zip(rows[0], copy))


@pytest.mark.ray
def test_load_benchmark_drives_a_real_cluster(capsys):
    assert bench_load.main(["--seconds", "3", "--queries", "6", "--producers", "2",
                            "--readers", "1", "--rows", "4000", "--batch", "20"]) == 0
    out = capsys.readouterr().out
    sent = [line for line in out.splitlines() if line.startswith("sent ")]
    assert sent and int(sent[0].split()[1].replace(",", "")) > 0
    assert "send -> readable    n=" in out and "errors" not in out
    stages = {line.split()[0]: line for line in out.splitlines() if line[:1].isalpha()}
    assert all(stage in stages for stage in ("route", "wait", "actor", "drain", "total"))
    same = [line for line in out.splitlines() if line.startswith("matches against raycep local")]
    assert same and ": identical (" in same[0]
    assert int(same[0].split(": identical (")[1].split()[0].replace(",", "")) > 0   # not vacuous
