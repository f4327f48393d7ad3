"""A heterogeneous rule set over a multi-type keyed stream (issue 35's benchmark workload).

    python3 -m benchmarks.hetero_rules --rows 40000 --seed 42 --out DIR    (writes both files)

``make_stream``: ``rows`` events of six types A-F (A most frequent, F rarest: TYPE_WEIGHTS)
for ``keys`` symbols ``S000``..., one each ~0.1 s (exponential gaps of at least 1 ms, times in ms: no two alike), with a
per-symbol random-walk ``price``, an integer ``volume``, and a string ``venue`` (V1-V8); CSV
``type,ts,symbol,price,volume,venue`` (what ``raycep local --events F --key symbol`` reads).

``rule_set``: STRUCTURES (12) x ``per`` variants (default 20: 240 rules), the i-th rule of
structure ``i % 12``, so rule 0 (a keyed SEQ-2, the bulk path's shape) is "the first rule"
and rules 0-11 are each structure's first. The structures cover 2-4 types, negation in the
middle and at the end, Kleene closure (any-match and next-match), AND, OR, the four
strategies, keyed (``[symbol]``) and global rules, windows of 10-60 s. Every rule's constants
(ratios, thresholds, venues, some windows) are drawn from ``random.Random(seed)`` within
ranges chosen so that the set gives thousands to tens of thousands of matches on 40,000
events, not millions.

Hold-out discipline: the constant ranges were tuned on seed A = 42 (the default) only; the
reported figures use seed B = 7 (``--seed 7``), a stream and constants never looked at while
tuning. Same seed, same files, byte for byte.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import random

TYPES = "ABCDEF"
TYPE_WEIGHTS = (30, 24, 18, 13, 9, 6)          # A..F, percent
VENUES = tuple(f"V{i}" for i in range(1, 9))
KEYS = 64
SEED_A, SEED_B = 42, 7                           # tuning / reporting (module docstring)
PER = 20                                         # constants per structure


def make_stream(path: str, rows: int, seed: int, keys: int = KEYS) -> str:
    """The CSV stream (module docstring); deterministic in ``(rows, seed, keys)``."""
    rnd = random.Random(f"stream-{seed}")
    prices = [round(rnd.uniform(20.0, 400.0), 2) for _ in range(keys)]
    ms = 0                                       # strictly increasing: no ties, no disorder
    with open(path, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow(["type", "ts", "symbol", "price", "volume", "venue"])
        for _ in range(rows):
            ms += max(1, round(rnd.expovariate(0.01)))
            k = rnd.randrange(keys)
            prices[k] = max(1.0, prices[k] * math.exp(rnd.gauss(0.0, 0.006)))
            volume = max(1, int(rnd.lognormvariate(5.5, 0.8)))
            w.writerow([rnd.choices(TYPES, TYPE_WEIGHTS)[0], f"{ms / 1000:.3f}", f"S{k:03d}",
                        f"{prices[k]:.2f}", volume, rnd.choice(VENUES)])
    return path


def _g(x: float) -> str:
    return f"{round(x, 4):g}"


# Each structure: (name, what it exercises, fn(rnd) -> query text without NAME). rnd is the
# rule's own random.Random, so a rule's constants do not depend on the other rules.
def _seq2(r):
    return (f"PATTERN SEQ(A a, B b)\nWHERE [symbol] AND b.price > a.price * "
            f"{_g(r.uniform(1.012, 1.03))}\nWITHIN {r.choice((10, 15, 20, 30))} seconds")


def _seq4(r):
    return (f"PATTERN SEQ(A a, B b, C c, D d)\nWHERE [symbol] AND b.price < a.price * "
            f"{_g(r.uniform(0.994, 0.999))} AND c.price < b.price AND d.price > a.price"
            f" AND d.volume > {_g(r.uniform(0.8, 1.6))} * a.volume\nWITHIN 60 seconds")


def _neg_mid(r):
    return (f"PATTERN SEQ(B a, ~C n, D b)\nWHERE [symbol] AND b.price > a.price * "
            f"{_g(r.uniform(1.01, 1.025))} AND n.price < a.price\nWITHIN 20 seconds")


def _neg_end(r):
    return (f"PATTERN SEQ(A a, E b, ~F n)\nWHERE [symbol] AND b.volume > "
            f"{_g(r.uniform(3.0, 7.0))} * a.volume AND n.price > b.price\nWITHIN 15 seconds")


def _kleene(r):
    return (f"PATTERN SEQ(A a, B+ b[], C c)\nWHERE [symbol] AND b[1].price > a.price AND "
            f"b[i].price > b[i-1].price AND c.price < LAST(b.price) AND c.volume > "
            f"{_g(r.uniform(1.5, 3.0))} * a.volume\nWITHIN {r.choice((10, 15, 20))} seconds")


def _and3(r):
    return (f"PATTERN AND(C a, D b, E c)\nWHERE [symbol] AND a.volume + b.volume > "
            f"{_g(r.uniform(4.0, 8.0))} * c.volume\nWITHIN {r.choice((10, 15))} seconds")


def _or(r):
    return (f"PATTERN OR(SEQ(A a, F f), SEQ(E e, F g))\nWHERE [symbol] AND f.price > a.price * "
            f"{_g(r.uniform(1.01, 1.025))} AND g.volume > {_g(r.uniform(4.0, 8.0))} * "
            f"e.volume\nWITHIN 20 seconds")


def _next3(r):
    return (f"PATTERN SEQ(B a, C b, D c)\nWHERE skip_till_next_match(a, b, c) {{\n    [symbol]"
            f" AND b.price > a.price * {_g(r.uniform(1.004, 1.012))} AND c.price > b.price\n}}\n"
            f"WITHIN 30 seconds")


def _global_venue(r):
    v1, v2 = r.sample(VENUES, 2)
    return (f"PATTERN SEQ(E a, F b)\nWHERE a.venue = '{v1}' AND b.venue = '{v2}' AND b.volume >"
            f" {_g(r.uniform(1.5, 4.0))} * a.volume\nWITHIN 10 seconds")


def _contig(r):
    return (f"PATTERN SEQ(C a, D b)\nWHERE [symbol] AND b.price > a.price * "
            f"{_g(r.uniform(1.01, 1.025))}\nWITHIN 60 seconds\nSTRATEGY partition_contiguity")


def _kleene_next(r):
    return (f"PATTERN SEQ(A a, B+ b[], C c)\nWHERE skip_till_next_match(a, b, c) {{\n    "
            f"[symbol] AND b[1].price > a.price AND b[i].price > b[i-1].price AND b.LEN >= 2"
            f" AND c.price < LAST(b.price) * {_g(r.uniform(0.99, 0.997))}\n}}\n"
            f"WITHIN 30 seconds")


def _global_strict(r):
    return (f"PATTERN SEQ(E a, F b)\nWHERE a.venue = b.venue AND b.price > a.price * "
            f"{_g(r.uniform(1.0, 3.0))}\nWITHIN 10 seconds\nSTRATEGY strict_contiguity")


#: (name, what it exercises, its maker, the path the bulk rule of cep/evaluation/bulk.py's
#: docstring gives it before issue 35: an expectation printed beside what the engine reports)
STRUCTURES = (
    ("seq2", "keyed SEQ of 2, ratio and window vary", _seq2, "bulk"),
    ("seq4", "keyed SEQ of 4 types, 60 s", _seq4, "bulk"),
    ("neg_mid", "keyed SEQ with a negation in the middle", _neg_mid, "bulk"),
    ("neg_end", "keyed SEQ with a trailing negation (deferred)", _neg_end,
     "per trigger: trailing negation"),
    ("kleene", "keyed Kleene B+ b[] rising, any-match", _kleene, "per trigger: Kleene"),
    ("and3", "keyed AND of 3 types", _and3, "per trigger: AND, a sum of attributes"),
    ("or", "keyed OR of two SEQ-2 branches", _or, "per trigger: OR"),
    ("next3", "keyed SEQ of 3, skip_till_next_match", _next3, "per trigger: strategy"),
    ("global_venue", "global SEQ-2, string equality on venue", _global_venue,
     "per trigger: string comparison"),
    ("contig", "keyed SEQ-2, partition_contiguity", _contig, "per trigger: strategy"),
    ("kleene_next", "keyed Kleene, skip_till_next_match (rally-like)", _kleene_next,
     "per trigger: Kleene, strategy"),
    ("global_strict", "global SEQ-2, strict_contiguity", _global_strict,
     "per trigger: strategy, string comparison"),
)


def rule_set(seed: int, per: int = PER) -> list:
    """``len(STRUCTURES) * per`` rules ``[(name, text)]``: rule i is variant ``i // 12`` of
    structure ``i % 12``, named ``<structure>_<variant>``; constants from ``seed`` (drawn
    again where a rule would repeat an earlier one: no two rules alike)."""
    out, seen = [], set()
    for j in range(per):
        for name, _, make, _ in STRUCTURES:
            again = 0
            text = make(random.Random(f"rule-{seed}-{name}-{j}"))
            while text in seen:                     # constants differ from rule to rule
                again += 1
                text = make(random.Random(f"rule-{seed}-{name}-{j}-{again}"))
            seen.add(text)
            out.append((f"{name}_{j:02d}", text))
    return out


def first_of_each(rules: list) -> list:
    """Each structure's first rule (rules 0..11 of rule_set)."""
    return rules[:len(STRUCTURES)]


def main(argv=None) -> int:
    from benchmarks.bench_multiquery import write_queries
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--seed", type=int, default=SEED_A)
    ap.add_argument("--keys", type=int, default=KEYS)
    ap.add_argument("--per", type=int, default=PER)
    ap.add_argument("--out", default=".", help="folder for hetero.csv and hetero.cep")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    make_stream(os.path.join(args.out, "hetero.csv"), args.rows, args.seed, args.keys)
    write_queries(os.path.join(args.out, "hetero.cep"), rule_set(args.seed, args.per))
    print(f"wrote {args.out}/hetero.csv ({args.rows:,} events) and {args.out}/hetero.cep "
          f"({len(STRUCTURES) * args.per} rules)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
