"""``raycep local`` with each query's statistics added to its JSON summary line.

    python3 -m benchmarks.local_paths local --query Q.cep --events E.csv ...   (as raycep)

The summary of ``raycep local`` (docs/local.md) has no per-query section, and the benchmark
needs, from the very run it times, which evaluation path each query took
(``Engine.stats()["paths"][name]``, issue 35: ``{"bulk": n, "per_trigger": n, "why": ...}``;
with time slices the slices' counts summed). This runs the ordinary command line with its
summary builder wrapped so that the summary gains ``"query_stats": {name: {"path", "group",
"plan", "triggers", "matches"}}`` (``path`` None where the engine does not report one). The
stats are read after the timed part (``seconds`` is unchanged); a summary that already holds
per-query paths is left as it is.
"""
from __future__ import annotations

import sys

KEPT = ("path", "group", "plan", "triggers", "matches")


def _wrap(local) -> bool:
    """Wrap ``local._summary(run, stats, ...)``; False where it is not there any more."""
    inner = getattr(local, "_summary", None)
    if inner is None:
        return False

    def summary(run, stats, *args, **kwargs):
        out = inner(run, stats, *args, **kwargs)
        queries = stats.get("queries", {}) if isinstance(stats, dict) else {}
        paths = (run.sliced.paths if getattr(run, "sliced", None) is not None
                 else stats.get("paths", {})) if isinstance(stats, dict) else {}
        out.setdefault("query_stats", {name: {**{k: q.get(k) for k in KEPT},
                                              "path": paths.get(name)}
                                       for name, q in queries.items()})
        return out

    local._summary = summary
    return True


def main(argv=None) -> int:
    import os

    from raycep.gateway import cli
    for name, value in cli.ENVIRONMENT.items():     # before numpy loads, as cli.main does
        os.environ.setdefault(name, value)
    from raycep.gateway.cli import local
    _wrap(local)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
