"""Generate the sample stock ticks (examples/ticks.csv): deterministic, stdlib only.

Columns: type (always ``Stock``), ts (seconds, increasing by small random gaps), symbol,
price (a per-symbol multiplicative random walk, 2 decimals) and volume (shares, round lots,
with occasional spikes). Same seed, same file, byte for byte.

    python3 examples/make_ticks.py                      # writes examples/ticks.csv
    python3 examples/make_ticks.py --rows 1000 --out /tmp/ticks.csv --seed 7
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import sys

SYMBOLS = {"AAPL": 190.0, "MSFT": 410.0, "GOOG": 140.0, "AMZN": 175.0,
           "NVDA": 880.0, "META": 480.0, "IBM": 185.0, "INTC": 43.0}


def ticks(rows: int = 20000, seed: int = 42):
    """Yield ``(ts, symbol, price, volume)`` tuples, ts strictly increasing."""
    rng = random.Random(seed)
    prices = dict(SYMBOLS)
    names = sorted(SYMBOLS)
    ts = 0.0
    for _ in range(rows):
        ts = round(ts + rng.choice((0.1, 0.2, 0.3, 0.5, 1.0)), 1)
        symbol = rng.choice(names)
        price = prices[symbol] * (1.0 + rng.gauss(0.0, 0.004))
        prices[symbol] = max(1.0, price)
        volume = 100 * rng.randint(1, 50)
        if rng.random() < 0.02:
            volume *= 10
        yield ts, symbol, round(prices[symbol], 2), volume


def write_csv(path: str, rows: int = 20000, seed: int = 42) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(["type", "ts", "symbol", "price", "volume"])
        for ts, symbol, price, volume in ticks(rows, seed):
            out.writerow(["Stock", f"{ts:.1f}", symbol, f"{price:.2f}", volume])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "ticks.csv"))
    args = parser.parse_args(argv)
    write_csv(args.out, args.rows, args.seed)
    print(f"wrote {args.rows} ticks to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
