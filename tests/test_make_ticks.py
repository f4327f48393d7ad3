"""examples/make_ticks.py: the sample ticks, byte for byte the same by default, and ``--symbols
N`` (more keys to spread over partition actors, each at the sample's rate of ticks)."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "make_ticks.py")


def make(tmp_path, *args) -> list:
    out = tmp_path / "t.csv"
    subprocess.run([sys.executable, SCRIPT, "--out", str(out), *args], check=True,
                   capture_output=True)
    with open(out, newline="") as f:
        return list(csv.DictReader(f))


def test_the_default_is_the_sample_file(tmp_path):
    out = tmp_path / "t.csv"
    subprocess.run([sys.executable, SCRIPT, "--out", str(out)], check=True,
                   capture_output=True)
    with open(os.path.join(ROOT, "examples", "ticks.csv"), "rb") as f:
        assert out.read_bytes() == f.read()


def test_more_symbols_keep_each_symbols_rate(tmp_path):
    eight = make(tmp_path, "--rows", "4000", "--seed", "3")
    many = make(tmp_path, "--rows", "32000", "--seed", "3", "--symbols", "64")
    assert len({r["symbol"] for r in eight}) == 8
    assert len({r["symbol"] for r in many}) == 64 and {"AAPL", "S008", "S063"} <= \
        {r["symbol"] for r in many}
    # 8x the rows over 8x the symbols: about the same span of time (each symbol's rate kept)
    span8, span64 = float(eight[-1]["ts"]), float(many[-1]["ts"])
    assert 0.9 < span64 / span8 < 1.1
    times = [float(r["ts"]) for r in many]
    assert times == sorted(times) and len(set(times)) == len(times)
    counts = Counter(r["symbol"] for r in many)
    assert min(counts.values()) > 300                  # ~500 each


def test_bad_symbol_counts_are_refused(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--symbols", "0", "--out",
                           str(tmp_path / "t.csv")], capture_output=True, text=True)
    assert done.returncode == 2 and "--symbols must be at least 1" in done.stderr
