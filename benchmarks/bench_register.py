"""Registering many rules (issue 35): the batch call against one query at a time, on a live
``raycep serve``, and the parser's rate.

    nice python3 -m benchmarks.bench_register [--count 1000] [--partitions 2]
                                              [--one-by-one N] [--part serve|parse|both]

Part ``serve``: starts ``raycep serve --port 0 --partitions P --key symbol --registry
TMP/registry.sqlite`` as a subprocess (as a user runs it: checkpoints and write-ahead log
on, a file registry) and, with the Python client, times only the registration calls:

1. ``Client.register_many`` of the first ``--count`` queries of
   ``bench_multiquery.query_variants`` as a list of ``(text, name)``; then
   ``Client.remove_many`` of them;
2. ``register_many`` of the same set as a query file's text (``;``-separated, ``NAME``s);
   then ``remove_many``;
3. ``Client.register`` of each query, one request each (``--one-by-one N``: the first N
   only, default all ``--count``), then ``remove_many``.

After each registration ``Client.queries()`` must list every query as running (checked,
not timed). Part ``parse``: queries/s of ``parse_query`` on the ``--count`` variants, of
``tokenize`` alone, and of ``parse_queries`` on their query file (best of 5).

Figures go to stdout, progress to stderr; results: benchmarks/MULTIQUERY_RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_multiquery import query_file_text, query_variants


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_parse(count: int) -> list:
    from raycep.cep.lang.parser import parse_queries, parse_query, tokenize
    variants = query_variants(count)
    texts = [text for _, text in variants]
    file_text = query_file_text(variants)
    rows = [("parse_query", best_of(lambda: [parse_query(t) for t in texts])),
            ("tokenize", best_of(lambda: [tokenize(t) for t in texts])),
            ("parse_queries (one file)", best_of(lambda: parse_queries(file_text)))]
    return [f"{'what':<26} {'seconds':>8} {'queries/s':>10}"] + \
        [f"{what:<26} {secs:>8.3f} {count / secs:>10,.0f}" for what, secs in rows]


def start_serve(tmp: str, partitions: int, extra: tuple = ()) -> tuple:
    """``raycep serve`` (and the options ``extra``) as a subprocess; ``(process, gateway
    URL)``."""
    env = dict(os.environ, XDG_STATE_HOME=os.path.join(tmp, "state"))
    env.pop("RAYCEP_REGISTRY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "raycep", "serve", "--port", "0", "--key", "symbol",
         "--partitions", str(partitions), "--registry", os.path.join(tmp, "registry.sqlite"),
         *extra],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("raycep gateway listening on "):
        proc.kill()
        raise RuntimeError(f"raycep serve did not start: {line!r}")
    return proc, line.split()[4]


def stop_serve(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench_serve(count: int, partitions: int, one_by_one: int) -> list:
    from raycep.gateway.client import connect
    variants = query_variants(count)
    pairs = [(text, name) for name, text in variants]
    with tempfile.TemporaryDirectory() as tmp:
        log(f"starting raycep serve --partitions {partitions} ...")
        proc, url = start_serve(tmp, partitions)
        try:
            client = connect(url)

            def timed(what: str, call, n: int) -> tuple:
                t = time.perf_counter()
                ids = call()
                secs = time.perf_counter() - t
                rows = client.queries()
                if len(rows) != n or any(r["status"] != "running" for r in rows):
                    raise AssertionError(f"{what}: {len(rows)} queries listed, {n} expected")
                log(f"  {what}: {n} queries in {secs:.3f} s")
                client.remove_many(ids)
                return what, n, secs

            out = [timed("register_many (list)", lambda: client.register_many(pairs), count),
                   timed("register_many (file)",
                         lambda: client.register_many(query_file_text(variants)), count)]
            n = min(one_by_one, count)
            out.append(timed("register, one by one",
                             lambda: [client.register(t, name=q) for t, q in pairs[:n]], n))
        finally:
            stop_serve(proc)
    lines = [f"{'call':<22} {'queries':>7} {'seconds':>8} {'ms/query':>8}"]
    lines += [f"{what:<22} {n:>7} {secs:>8.3f} {1000 * secs / n:>8.2f}"
              for what, n, secs in out]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--one-by-one", type=int, default=None, metavar="N",
                    help="queries registered one request each (default: --count)")
    ap.add_argument("--part", choices=("serve", "parse", "both"), default="both")
    args = ap.parse_args(argv)
    if args.part in ("parse", "both"):
        print("\n".join(bench_parse(args.count)), flush=True)
    if args.part in ("serve", "both"):
        print("\n".join(bench_serve(args.count, args.partitions,
                                    args.one_by_one or args.count)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
