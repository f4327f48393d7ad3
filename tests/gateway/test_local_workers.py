"""``raycep local --workers N`` (gateway.cli.slices): the file in time slices, one forked
process each, gives the bytes one process writes; a file a slice cannot stand for (out of time
order, a copy, a bad row) is run again in one piece, with the messages and exit
status of one process. Run as a user runs it: the CLI in a subprocess."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEQ3 = ("PATTERN SEQ(A a, B b, C c) WHERE a.price < b.price AND b.price > c.price "
        "WITHIN 60 seconds")
NEG = "NAME quiet\nPATTERN SEQ(A a, C c, ~B z) WHERE a.price < c.price WITHIN 40 seconds"
ROWS = 36_000                  # ~850 KB: 3 parts of at least 256 KiB (cep.io.slices)


def _local(*args, stdout=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "raycep", "local", *args],
                          stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300,
                          check=False)


def _rows(n: int, seed: int = 7) -> list:
    rng = random.Random(seed)
    ts, out = 1_000_000, []
    for _ in range(n):
        ts += rng.choice((0, 1, 1, 2, 3))              # ties too
        kind = rng.choices("ABC", weights=(50, 10, 2))[0]
        out.append((kind, ts, round(rng.uniform(90, 110), 2), rng.randint(1, 2000),
                    f"k{rng.randint(0, 3)}"))
    return out


def _csv(path: Path, rows: list) -> Path:
    path.write_text("type,ts,price,volume,key\n" +
                    "".join(f"{t},{ts},{p},{v},{k}\n" for t, ts, p, v, k in rows))
    return path


def _untimed(summary: dict) -> dict:
    return {k: v for k, v in summary.items()
            if k not in ("seconds", "startup_seconds", "events_per_s", "peak_rss_mb")}


def _summary(done) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def ordered(tmp_path_factory) -> Path:
    path = _csv(tmp_path_factory.mktemp("w") / "ordered.csv", _rows(ROWS))
    assert path.stat().st_size > 512 * 1024
    return path


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("q") / "q.cep"
    path.write_text(f"NAME seq3\n{SEQ3};\n{NEG}\n")
    return path


def test_slices_write_the_bytes_of_one_process(ordered, queries, tmp_path):
    one, three = tmp_path / "one.jsonl", tmp_path / "three.jsonl"
    whole = _local("-q", str(queries), "-e", str(ordered), "-o", str(one), "--workers", "1")
    done = _local("-q", str(queries), "-e", str(ordered), "-o", str(three), "--workers", "3")
    s1, s3 = _summary(whole), _summary(done)
    assert s1["workers"] == 1 and s3["workers"] == 3
    assert "evaluated in 3 time slices" in done.stderr
    assert s3["events"] == s1["events"] == ROWS
    assert s3["matches"] == s1["matches"] > 1000

    def per_query(err):                  # (without how many triggers went bulk: slices
        return sorted(line.split("; triggers: ")[0] for line in err.splitlines()   # re-read
                      if line.startswith("raycep: query "))                        # some)

    assert len(per_query(done.stderr)) == 2
    assert per_query(done.stderr) == per_query(whole.stderr)
    assert three.read_bytes() == one.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".raycep-slice-")]


def test_slices_to_stdout_and_json_lines(ordered, queries, tmp_path):
    one = tmp_path / "one.jsonl"
    _summary(_local("-q", str(queries), "-e", str(ordered), "-o", str(one), "--workers", "1"))
    done = _local("-q", str(queries), "-e", str(ordered), "--workers", "2")
    assert _summary(done)["workers"] == 2
    assert "".join(line + "\n" for line in done.stdout.splitlines()[:-1]) == one.read_text()
    jsonl = tmp_path / "events.jsonl"
    with open(ordered) as src, open(jsonl, "w") as dst:
        next(src)
        for line in src:
            t, ts, p, v, k = line.rstrip("\n").split(",")
            dst.write(json.dumps({"type": t, "ts": int(ts), "price": float(p),
                                  "volume": int(v), "key": k}) + "\n")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    sa = _summary(_local("-q", str(queries), "-e", str(jsonl), "-o", str(a), "--workers", "1"))
    sb = _summary(_local("-q", str(queries), "-e", str(jsonl), "-o", str(b), "--workers", "2"))
    assert sb["workers"] == 2 and sa["matches"] == sb["matches"] > 1000
    assert a.read_bytes() == b.read_bytes()


def test_a_file_out_of_time_order_is_run_again_in_one_piece(queries, tmp_path):
    rows = _rows(ROWS, seed=11)
    k = 2 * ROWS // 3                                     # one event far behind, late on
    rows[k] = (rows[k][0], rows[k][1] - 500, *rows[k][2:])
    path = _csv(tmp_path / "late.csv", rows)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    whole = _local("-q", str(queries), "-e", str(path), "-o", str(one), "--workers", "1")
    done = _local("-q", str(queries), "-e", str(path), "-o", str(two), "--workers", "2")
    s1, s2 = _summary(whole), _summary(done)
    assert "run again in one piece: the events are not in time order" in done.stderr
    assert s2["workers"] == 1 and _untimed(s2) == _untimed(s1)

    def disorder(err):
        return [line for line in err.splitlines() if line.startswith("raycep: out of order")]

    assert disorder(done.stderr) == disorder(whole.stderr) and disorder(whole.stderr)
    assert two.read_bytes() == one.read_bytes()


def test_a_copy_or_a_bad_row_is_reported_as_by_one_process(queries, tmp_path, ordered):
    lines = ordered.read_text().splitlines(keepends=True)
    copied = tmp_path / "copy.csv"
    copied.write_text("".join(lines[:20_001] + [lines[20_000]] + lines[20_001:]))
    done = _local("-q", str(queries), "-e", str(copied), "-o", str(tmp_path / "c.jsonl"),
                  "--workers", "2")
    summary = _summary(done)
    assert "run again in one piece: copies or late events" in done.stderr
    assert summary["workers"] == 1 and summary["duplicates"] == 1
    bad = tmp_path / "bad.csv"
    lines[25_000] = "C,oops,1.0,1,k1\n"
    bad.write_text("".join(lines))
    outs = {}
    for workers in ("1", "2"):
        out = tmp_path / f"bad{workers}.jsonl"
        done = _local("-q", str(queries), "-e", str(bad), "-o", str(out), "--workers", workers)
        assert done.returncode == 2
        assert "line 25001" in done.stderr and "ts" in done.stderr
        outs[workers] = (out.read_bytes(), _untimed(json.loads(done.stdout.splitlines()[-1])))
    assert outs["1"] == outs["2"]
    skipped = _local("-q", str(queries), "-e", str(bad), "-o", str(tmp_path / "s.jsonl"),
                     "--workers", "2", "--skip-bad-rows")
    assert _summary(skipped)["events"] == ROWS - 1
    assert "skipped bad row" in skipped.stderr and "line 25001" in skipped.stderr


def test_workers_must_be_positive_and_small_files_stay_whole(tmp_path, queries):
    done = _local("-q", str(queries), "-e", str(tmp_path / "x.csv"), "--workers", "0")
    assert done.returncode == 2 and "--workers must be at least 1" in done.stderr
    small = _csv(tmp_path / "small.csv", _rows(2000))
    assert _summary(_local("-q", str(queries), "-e", str(small), "-o",
                           str(tmp_path / "s.jsonl"), "--workers", "4"))["workers"] == 1


def test_a_full_disk_or_a_closed_pipe_ends_slices_as_one_process(queries, ordered):
    """--workers 2 writing to /dev/full: the same message and exit status as one process;
    stdout closed by its reader (``| head -1``): ended quietly with status 1, as one process
    does."""
    if not os.path.exists("/dev/full"):
        pytest.fail("this test needs Linux's /dev/full")
    for workers in ("1", "2"):
        done = _local("-q", str(queries), "-e", str(ordered), "-o", "/dev/full",
                      "--workers", workers)
        assert done.returncode == 2, done.stderr
        assert "raycep: error: cannot write matches to /dev/full: No space left on device" \
            in done.stderr and "Traceback" not in done.stderr
    for workers in ("1", "2"):
        proc = subprocess.Popen([sys.executable, "-m", "raycep", "local", "-q",
                                 str(queries), "-e", str(ordered), "--workers", workers],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT),
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout.readline().startswith(b'{"query":')
        proc.stdout.close()                             # as `| head -1` does
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, err
        assert b"Traceback" not in err and b"cannot write" not in err
