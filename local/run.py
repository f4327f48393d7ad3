"""One run of ``raycep local``: the engine it builds (``build_engine``: the planner's
defaults, FIRST_PLAN_EVENTS and CHECK_EVERY) and the loop that feeds it an input in chunks
(``evaluate``: column batches evaluated in bulk, chunk sizes that follow the matches found,
``Chunks``), for the command line (gateway.cli.local, which writes the lines) and for
``local.match`` (which makes an Arrow table).

Nothing heavy is imported at this module's import: the command line reads a small file
without numpy or pyarrow (tests/test_imports.py).
"""
from __future__ import annotations

import contextlib
import gc

from raycep.cep.errors import CepError, IngestError
from raycep.local.queries import QuerySourceError

__all__ = ["CHECK_EVERY", "CHUNK_EVENTS", "CHUNK_MATCHES", "Chunks", "FIRST_PLAN_EVENTS",
           "build_engine", "evaluate", "few_collections"]

GC_THRESHOLD = 50_000           # allocations between two young-generation collections
#: raycep local hands the engine chunks of events: large ones amortise the per-chunk work
#: (bulk evaluation, cep.evaluation.bulk), small ones bound the matches held at once (Chunks)
CHUNK_EVENTS = (512, 1024, 32_768)  # fewest, first, most
#: a chunk with more matches than CHUNK_MATCHES halves the next ones; bulk matches are columns
#: (MatchBlock): on 100 variants (392k matches) 65,536 took 15 % less time than 16,384 for
#: 4 MB more peak memory (benchmarks/MULTIQUERY_RESULTS.md)
CHUNK_MATCHES = 65_536
#: events before the planner's first look at the statistics (then every --check-every): until
#: then a query runs a provisional plan from the default statistics (planner.local, in bulk);
#: 200 gave the plans 500 did on the peers' and the sample workloads
#: (benchmarks/PEERS_RESULTS.md)
FIRST_PLAN_EVENTS = 200
#: --check-every's default: the planner's look cuts the chunk it falls in, and a bulk
#: evaluation costs about the same for 2,000 rows as for 32,768 (benchmarks/PEERS_RESULTS.md)
CHECK_EVERY = 32_768


def build_engine(queries: list, *, key: str | None = None, params: dict | None = None,
                 orders: dict | None = None, planner: str = "adaptive",
                 check_every: int = CHECK_EVERY, sharing: bool = True, disorder=None,
                 mode: str | None = None):
    """A ``planner.local.PlannedEngine`` over one Engine (partition key attribute ``key``)
    with the ``[(label, Query), ...]`` of ``local.queries.load_queries`` added (``params``
    bound, ``orders``: query name -> a forced order), planned by ``planner`` first after
    min(check_every, FIRST_PLAN_EVENTS) events, then every ``check_every``.
    QuerySourceError names a query that cannot be added and where it came from."""
    from raycep.cep.runtime.engine import (Engine)  # imported late: `raycep --help` stays cheap
    from raycep.planner.local import PlannedEngine
    engine = PlannedEngine(Engine(key_attr=key, disorder=disorder, mode=mode,
                                  sharing=sharing),
                           check_every=check_every,
                           first_check=min(check_every, FIRST_PLAN_EVENTS))
    for label, query in queries:
        try:
            engine.add_query(query, name=query.name, params=params or None,
                             order=(orders or {}).get(query.name), planner=planner)
        except CepError as exc:
            name = f" {query.name!r}" if query.name else ""
            raise QuerySourceError(f"cannot add query{name} from {label}: {exc}") from None
    return engine


def evaluate(engine, runs, take, *, end=None, late=None, tick=None,
             sizes: tuple = CHUNK_EVENTS) -> tuple:
    """Feed the pieces of ``runs`` (as cep.io.sources.iter_batch_runs gives them: lists of
    Events or column batches) through ``engine`` (a PlannedEngine) in chunks (``sizes``, see
    Chunks); ``take(found)`` gets what each chunk found (matches, retractions and MatchBlocks,
    in order) and returns how many matches that is, ``end(found)`` (default: ``take``) what
    the end of the stream releases. ``late(events)`` gets the late events after each chunk
    (None: they stay in the engine), ``tick(events)`` the count of events so far.
    Returns ``(events, the IngestError it stopped at or None)``: the matches found before a
    bad row are taken, the end of the stream is not reached then."""
    n_events = 0
    core = engine.engine
    try:
        chunks = Chunks(runs, sizes)
        for run, lo, hi in chunks:
            n_events += hi - lo
            found = engine.process_many(run[lo:hi] if hi - lo < len(run) else run) \
                if run.__class__ is list else \
                engine.process_columns(run, lo, hi, blocks=True)
            chunks.found(take(found) if found else 0)
            if late is not None and core.late:
                late(core.take_late())
            if tick is not None:
                tick(n_events)
    except IngestError as exc:
        return n_events, exc
    (end or take)(engine.advance(float("inf")))
    return n_events, None


class Chunks:
    """``(run, lo, hi)``: pieces of the runs of ``iter_batch_runs`` (lists of events or
    column batches). A piece has ``sizes[1]`` rows at first; the size doubles (up to
    ``sizes[2]``) after a piece with few matches and halves (down to ``sizes[0]``) after one
    with more than CHUNK_MATCHES, so the matches held at once stay bounded."""

    def __init__(self, runs, sizes: tuple = CHUNK_EVENTS):
        self.runs = runs
        self.sizes = sizes
        self.size = sizes[1]

    def __iter__(self):
        for run in self.runs:
            n, k = len(run), 0
            while k < n:
                hi = min(n, k + self.size)
                yield run, k, hi
                k = hi

    def found(self, matches: int) -> None:
        """The last piece gave ``matches``."""
        fewest, _, most = self.sizes
        if matches > CHUNK_MATCHES:
            self.size = max(fewest, self.size // 2)
        elif matches < CHUNK_MATCHES // 4:
            self.size = min(most, self.size * 2)


@contextlib.contextmanager
def few_collections():
    """Within: the cyclic garbage collector runs a young-generation pass per GC_THRESHOLD
    allocations, and the objects made before are frozen out of its passes. A run allocates
    millions of short-lived acyclic objects (events, matches): the default (a pass per 700
    allocations, full passes over the whole heap) cost 13 % of a 219,567-match run."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
