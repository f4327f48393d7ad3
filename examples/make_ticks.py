"""Generate the sample stock ticks (examples/ticks.csv): deterministic, stdlib only.

Columns: type (always ``Stock``), ts (seconds, increasing by small random gaps), symbol,
price (a per-symbol multiplicative random walk, 2 decimals) and volume (shares, round lots,
with occasional spikes). Same seed, same file, byte for byte.

    python3 examples/make_ticks.py                      # writes examples/ticks.csv
    python3 examples/make_ticks.py --rows 1000 --out /tmp/ticks.csv --seed 7
    python3 examples/make_ticks.py --rows 1000000 --symbols 64 --out /tmp/ticks64.csv

``--symbols N`` (default 8, the sample's): N symbols (the sample's eight, then ``S008``,
``S009``, ...), the gaps between ticks divided by N / 8 so that each symbol keeps the
sample's rate of ticks (times then written with 4 decimals): more keys, the same pattern
density per key (for spreading a stream over many partition actors).
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import sys

SYMBOLS = {"AAPL": 190.0, "MSFT": 410.0, "GOOG": 140.0, "AMZN": 175.0,
           "NVDA": 880.0, "META": 480.0, "IBM": 185.0, "INTC": 43.0}


def symbols(count: int = len(SYMBOLS)) -> dict:
    """``count`` symbols and their starting prices: the sample's, then ``S008``, ... ."""
    if count < 1:
        raise ValueError(f"--symbols must be at least 1, got {count}")
    names = dict(sorted(SYMBOLS.items())[:count])
    for i in range(len(SYMBOLS), count):
        names[f"S{i:03d}"] = float(20 + (i * 37) % 900)
    return names


def digits(count: int = len(SYMBOLS)) -> int:
    """Decimals of the times written for ``count`` symbols."""
    return 1 if count <= len(SYMBOLS) else 4


def ticks(rows: int = 20000, seed: int = 42, count: int = len(SYMBOLS)):
    """Yield ``(ts, symbol, price, volume)`` tuples, ts strictly increasing; ``count``
    symbols (see the module's docstring)."""
    rng = random.Random(seed)
    prices = symbols(count)
    names = sorted(prices)
    scale, places = min(1.0, len(SYMBOLS) / count), digits(count)
    ts = 0.0
    for _ in range(rows):
        ts = round(ts + rng.choice((0.1, 0.2, 0.3, 0.5, 1.0)) * scale, places)
        symbol = rng.choice(names)
        price = prices[symbol] * (1.0 + rng.gauss(0.0, 0.004))
        prices[symbol] = max(1.0, price)
        volume = 100 * rng.randint(1, 50)
        if rng.random() < 0.02:
            volume *= 10
        yield ts, symbol, round(prices[symbol], 2), volume


def write_csv(path: str, rows: int = 20000, seed: int = 42, count: int = len(SYMBOLS)) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(["type", "ts", "symbol", "price", "volume"])
        places = digits(count)
        for ts, symbol, price, volume in ticks(rows, seed, count):
            out.writerow(["Stock", f"{ts:.{places}f}", symbol, f"{price:.2f}", volume])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--symbols", type=int, default=len(SYMBOLS),
                        help="number of symbols (default 8, the sample's)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "ticks.csv"))
    args = parser.parse_args(argv)
    if args.symbols < 1:
        parser.error(f"--symbols must be at least 1, got {args.symbols}")
    write_csv(args.out, args.rows, args.seed, args.symbols)
    print(f"wrote {args.rows} ticks of {args.symbols} symbols to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
