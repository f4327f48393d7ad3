"""How long the kernel takes to write N MB to a new file, by bytes per write call (what
``gateway.cli.writer.WRITE_BYTES`` was chosen from; benchmarks/PEERS_RESULTS.md).

    python3 -m benchmarks.write_sizes [--mb 71] [--repeat 3] [--pause 2] [--dir DIR]

Each measurement writes a new file in DIR (default: the system's temporary directory) after
``--pause`` seconds, then removes it; sizes are tried in turn, so each sees the same memory.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

SIZES = (64 << 10, 256 << 10, 1 << 20, 2_500_000, 16 << 20)


def write_once(path: str, data: bytes, step: int) -> float:
    view = memoryview(data)
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for at in range(0, len(view), step):
            os.write(fd, view[at:at + step])
    finally:
        os.close(fd)
    return time.perf_counter() - started


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=71)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pause", type=float, default=2.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args(argv)
    line, size = b'{"query":"q1","events":{}}\n', args.mb * 1_000_000
    data = (line * (size // len(line) + 1))[:size]
    times: dict = {step: [] for step in SIZES}
    for k in range(args.repeat):
        for step in SIZES:
            time.sleep(args.pause)
            path = os.path.join(args.dir, f".raycep-write-sizes-{os.getpid()}-{k}-{step}")
            try:
                times[step].append(write_once(path, data, step))
            finally:
                os.unlink(path)
            print(f"run {k + 1}/{args.repeat}: {step:>10,} bytes a call: "
                  f"{times[step][-1]:.4f} s", flush=True)
    print(f"--- {args.mb} MB to a new file, median of {args.repeat}")
    for step, got in times.items():
        print(f"{step:>10,} bytes a call: {statistics.median(got):.4f} s "
              f"({min(got):.4f}-{max(got):.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
