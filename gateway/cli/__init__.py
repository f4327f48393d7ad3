"""The ``raycep`` command line: one parser, one error policy, one module per subcommand.

| subcommand | module |
|---|---|
| ``local`` (no Ray, no Spark) | ``gateway.cli.local`` |
| ``serve`` | ``gateway.cli.serve`` |
| ``demo`` | ``gateway.cli.demo`` |
| ``query add/rm/ls``, ``matches``, ``late``, ``advance`` | ``gateway.cli.queries`` |
| ``ingest`` | ``gateway.cli.ingest`` |

Shared options and helpers live in ``gateway.cli.common``. A new subcommand is a module with
``add_parser(commands)`` (which sets ``func``) listed in ``SUBCOMMANDS``. Error policy (``main``):
a user's mistake prints ``raycep: <message>`` on stderr and exits with status 2, never a
traceback; a missing install extra names the extra; Ctrl-C exits 130. Environment defaults
for the process and what it starts (``ENVIRONMENT``) are set there too.
"""
from __future__ import annotations

import argparse
import importlib
import os

from raycep.cep.errors import CepError, IngestError, QuerySyntaxError, QueryValidationError
from raycep.gateway.cli.common import (PROG, Terminated, UsageError, err, load_queries,
                                silence_stdout)

__all__ = ["PROG", "SUBCOMMANDS", "UsageError", "build_parser", "load_queries", "main"]

#: the subcommand modules, in the order ``raycep --help`` lists them
SUBCOMMANDS = ("local", "demo", "serve", "queries", "stats", "scale", "ingest")

#: top-level modules of the optional install extras (pyproject.toml) -> the extra
EXTRAS = {"ray": "cluster", "aiohttp": "cluster", "pyspark": "spark", "raydp": "spark"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="raycep: complex event processing for many concurrent "
                               "pattern queries.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"raycep.gateway.cli.{name}").add_parser(commands)
    return parser


#: environment defaults for this process and what it starts (Ray's workers inherit them); a
#: value the user set is kept
ENVIRONMENT = {
    # numpy's OpenBLAS starts a thread per further core at import that spins ~0.1 s then and
    # after each BLAS call; raycep calls none, and the spin took the second core from the
    # match writer: `raycep local` W = 600 s 0.065 -> 0.052 s (benchmarks/PEERS_RESULTS.md)
    "OPENBLAS_NUM_THREADS": "1",
}


def main(argv=None) -> int:
    """Entry point of the ``raycep`` console script; returns the exit status."""
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:                       # --help, or argparse's own usage error
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.func(args)
    except UsageError as exc:
        err(str(exc))
    except (QuerySyntaxError, QueryValidationError) as exc:
        err(f"error in query: {exc}")
    except IngestError as exc:
        err(f"bad input: {exc}")
    except CepError as exc:
        err(f"error: {exc}")
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        if args.command == "ingest":
            extra = "spark"                         # it needs Ray, PySpark and RayDP
        err(f"error: raycep {args.command} needs the '{extra}' extra ({exc.name} is not "
            f"installed): python3 -m pip install 'raycep[{extra}]'")
    except KeyboardInterrupt:
        err("interrupted")
        return 130
    except Terminated as exc:
        err(f"terminated (signal {exc.signum})")
        return 128 + exc.signum
    except BrokenPipeError:
        silence_stdout()
        return 1
    return 2
