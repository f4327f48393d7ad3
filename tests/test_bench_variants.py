"""benchmarks/bench_variants.py ``--worker``: one PartitionWorker against raycep local on the
same rules and ticks (a tiny run: what it prints, and the same match count on every side)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_variants  # noqa: E402


def test_worker_part_compares_the_worker_with_raycep_local(capsys):
    assert bench_variants.main(["--worker", "--counts", "6", "--rows", "800",
                                "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "raycep local --workers 1" in out
    assert "worker, outbox (cluster)" in out and "worker, records as dicts" in out
    assert "3 evaluators planned by the worker" in out
    assert "per core" in out.splitlines()[1]           # the target: CPU seconds per core
