"""``raycep stats``: a running cluster at a glance (the gateway, each actor, each query), as
tables or ``--json`` (``GET /v1/stats`` and ``GET /v1/queries``)."""
from __future__ import annotations

from raycep.gateway.cli.common import add_gateway_arguments, client_for, table
from raycep.gateway.cli.queries import query_table


def add_parser(commands) -> None:
    stats = commands.add_parser("stats", help="the cluster at a glance: gateway, actors, "
                                              "queries")
    stats.add_argument("--json", action="store_true",
                       help="GET /v1/stats and the queries as one JSON object")
    add_gateway_arguments(stats)
    stats.set_defaults(func=run_stats)


def run_stats(args) -> int:
    client = client_for(args)
    stats, queries = client.stats(), client.queries()
    if args.json:
        from raycep.gateway.client import strict_json
        print(strict_json({**stats, "queries": queries}, indent=2))
        return 0
    print(overview(stats, queries))
    return 0


def overview(stats: dict, queries: list) -> str:
    """The three tables of ``raycep stats``."""
    g = stats["gateway"]
    total = (g.get("send_stages") or {}).get("total") or {}
    sends = f"{g.get('send_stages', {}).get('sends', 0):,} sends"
    if total.get("n"):
        sends += (f", p50 {total['p50'] * 1000:.1f} ms, p99 {total['p99'] * 1000:.1f} ms "
                  f"(last {total['n']:,})")
    lines = [f"gateway: {g['events']:,} events in, {g['bad_rows']:,} bad rows, "
             f"{g['late_events']:,} late events; {sends}", ""]
    rows = []
    for label, a in stats["actors"].items():
        clock = a.get("clock")
        rows.append((label, f"{a.get('events', 0):,}", f"{a.get('buffered', 0):,}",
                     f"{a.get('evicted', 0):,}", a.get("outbox") if a.get("outbox") is not None
                     else "-", a.get("refused_batches", 0), a.get("late_events", 0),
                     f"{clock:g}" if isinstance(clock, (int, float)) else "-"))
    lines.append(table(("ACTOR", "EVENTS", "BUFFERED", "EVICTED", "OUTBOX", "REFUSED", "LATE",
                        "CLOCK"), rows))
    lines.append("")
    lines.append(query_table(queries) if queries else "no query is registered")
    return "\n".join(lines)
