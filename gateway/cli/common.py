"""What the ``raycep`` subcommands share: the error policy (``UsageError``, ``err``), query
files and parameters, the out-of-order options, the gateway address options and client."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys

from raycep.cep.errors import CepError
from raycep.cep.io.cells import parse_cell
from raycep.local.queries import QuerySourceError, declares_name, load_queries as load

__all__ = ["DEFAULT_GATEWAY", "PROG", "Terminated", "UsageError", "add_disorder_arguments",
           "add_gateway_arguments", "client_for", "declares_name", "disorder_settings", "err",
           "finite_float", "load_queries", "note", "parse_params", "peak_rss_mb", "require",
           "silence_stdout", "terminable"]

PROG = "raycep"
DEFAULT_GATEWAY = "http://127.0.0.1:8470"


class UsageError(CepError):
    """A command-line argument that cannot be used (exit status 2)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP while a command holds what must be cleaned up (``terminable``): the
    command unwinds (its ``finally`` blocks run) and exits with 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def terminable():
    """Within: SIGTERM and SIGHUP raise Terminated in the main thread instead of ending the
    process at once (raycep local's time slices: their processes are ended and their files
    removed). Elsewhere the handlers are left as they are."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise Terminated(signum)
    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def err(message: str) -> None:
    """A message for the user on stderr (prefixed ``raycep: ``)."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def note(message: str) -> None:
    """A progress or status line on stderr, as it is (tagged ``[ingest]``, ``[demo]``, ...);
    errors go through ``err``."""
    print(message, file=sys.stderr, flush=True)


def silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter exits quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def load_queries(values, text_label: str = "--query #{}") -> list:
    """``--query`` values -> [(label, Query), ...] (``local.queries.load_queries``: a value
    naming a file is read as a file; ``text_label``: how a value that is query text is named
    in errors, given its position); UsageError for what cannot be used."""
    try:
        return load(values, text_label)
    except QuerySourceError as exc:
        raise UsageError(f"error{' ' if exc.located else ': '}{exc}") from None


def parse_params(items) -> dict:
    """``["W=30", "name=IBM"]`` -> ``{"W": 30, "name": "IBM"}`` (values typed like CSV cells)."""
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"error: --param expects NAME=VALUE, got {item!r}")
        if value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise UsageError(f"error: --param {name}: must be a finite number, a string or "
                             f"true/false, got {value.strip()!r}")
        params[name] = parse_cell(value)
    return params


def add_disorder_arguments(parser):
    """The out-of-order options shared by ``raycep local`` and ``raycep serve``."""
    from raycep.cep.store.disorder import DEFAULT_MODE, MODES
    parser.add_argument("--disorder-mode", choices=MODES, default=DEFAULT_MODE,
                        help="how queries handle out-of-order events: 'optimistic' (default: "
                             "report at once, retract a match a late event invalidates) or "
                             "'pessimistic' (wait until the watermark passes; never retract)")
    parser.add_argument("--slack", type=float, default=0.0, metavar="T",
                        help="the minimum slack in event-time units: events up to T behind "
                             "the latest one are always used (default 0: learnt from the "
                             "observed disorder)")
    parser.add_argument("--max-slack", type=float, default=None, metavar="T",
                        help="never wait for (or keep events for) more than T of lateness")
    parser.add_argument("--alpha", type=float, default=2.5,
                        help="lateness threshold = ALPHA x the average out-of-order score "
                             "(default 2.5)")


def disorder_settings(args):
    from raycep.cep.store.disorder import DisorderSettings
    try:
        return DisorderSettings(alpha=args.alpha, min_slack=args.slack,
                                max_slack=args.max_slack)
    except CepError as exc:                     # name the options, not the settings' fields
        message = str(exc).replace("min_slack", "--slack").replace("max_slack", "--max-slack")
        raise UsageError(f"error: {message.replace('alpha', '--alpha')}") from None


def require(*modules: str) -> None:
    """Fail now, with the ModuleNotFoundError ``main`` turns into "install the extra", when a
    module the command needs is not installed (before it contacts anything)."""
    import importlib.util
    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def add_gateway_arguments(parser) -> None:
    """``--gateway`` and ``--token`` of the subcommands that talk to a running gateway."""
    parser.add_argument("--gateway", default=os.environ.get("RAYCEP_GATEWAY", DEFAULT_GATEWAY),
                        help="gateway URL (default $RAYCEP_GATEWAY or %(default)s)")
    parser.add_argument("--token", default=os.environ.get("RAYCEP_TOKEN"))


def client_for(args):
    from raycep.gateway.client import connect
    return connect(args.gateway, args.token)


def finite_float(text: str) -> float:
    """argparse type of a watermark: a finite number."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def peak_rss_mb():
    """Peak resident set size of this process in MiB (None where unavailable)."""
    try:
        import resource
    except ImportError:                             # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    divisor = 1024 * 1024 if sys.platform == "darwin" else 1024     # bytes vs KiB
    return round(peak / divisor, 1)


def table(header: tuple, rows: list, right: tuple = (), indent: str = "") -> str:
    """``rows`` under ``header`` in columns two spaces apart, left-aligned but those at the
    positions ``right``, each line after ``indent``."""
    lines = [tuple(header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return "\n".join(indent + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                                        for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in lines)
