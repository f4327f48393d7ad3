"""The subcommands that talk to a running gateway: ``query add|rm|ls``, ``matches``, ``late``,
``advance`` and ``explain``."""
from __future__ import annotations

import json
import os

from raycep.cep.errors import CepError, UnavailableError
from raycep.gateway.cli.common import (add_gateway_arguments, client_for, declares_name, err,
                                       finite_float, load_queries, note, parse_params, table)


def add_parser(commands) -> None:
    query = commands.add_parser("query", help="add, remove or list queries on a gateway")
    qcmd = query.add_subparsers(dest="query_command", metavar="ACTION", required=True)
    add = qcmd.add_parser("add", help="register the queries of a file or a text (all or "
                                      "nothing, in one request)")
    add.add_argument("query", metavar="FILE_OR_TEXT")
    add.add_argument("--name", default=None, help="the id of a single query")
    add.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    add.add_argument("--disorder-mode", choices=("optimistic", "pessimistic"), default=None,
                     help="out-of-order handling of these queries (default: the cluster's)")
    rm = qcmd.add_parser("rm", help="remove queries by id (all or none)")
    rm.add_argument("ids", nargs="+", metavar="ID")
    ls = qcmd.add_parser("ls", help="list queries with status, plan and counts")
    ls.add_argument("--json", action="store_true")
    matches = commands.add_parser("matches", help="print the matches of a query (JSON lines)")
    matches.add_argument("id", metavar="QUERY")
    matches.add_argument("--since", type=int, default=0, metavar="CURSOR")
    matches.add_argument("--limit", type=int, default=1000)
    matches.add_argument("--follow", "-f", action="store_true",
                         help="keep printing new matches (Server-Sent Events)")
    late = commands.add_parser(
        "late", help="print the late events (later than the lateness threshold; JSON lines)")
    late.add_argument("--since", type=int, default=0, metavar="CURSOR")
    late.add_argument("--limit", type=int, default=1000)
    advance = commands.add_parser(
        "advance", help="promise that no event with ts <= WATERMARK will come",
        description="Move the cluster's watermark to WATERMARK (event time, seconds): matches "
                    "deferred by a trailing negation are released, and a later event with ts "
                    "<= WATERMARK is late. The gateway refuses a watermark more than its "
                    "--max-advance-ahead past the latest event time seen, unless --force.")
    advance.add_argument("watermark", metavar="WATERMARK", type=finite_float)
    advance.add_argument("--force", action="store_true",
                         help="advance even beyond the gateway's --max-advance-ahead bound")
    explain = commands.add_parser(
        "explain", help="how a query is planned: branches, plan and cost, selectivities")
    explain.add_argument("id", metavar="QUERY")
    explain.add_argument("--json", action="store_true")
    explain.set_defaults(func=run_explain)
    for p in (add, rm, ls, matches, late, advance, explain):
        add_gateway_arguments(p)
    for p in (add, rm, ls):
        p.set_defaults(func=run_query)
    matches.set_defaults(func=run_matches)
    late.set_defaults(func=run_late)
    advance.set_defaults(func=run_advance)


def run_query(args) -> int:
    client = client_for(args)
    if args.query_command == "add":
        return add_queries(client, args)
    if args.query_command == "rm":
        for out in client.remove_many(args.ids):      # all or none
            print(f"removed {out['id']} ({out.get('matches', 0)} matches were stored)")
    else:
        rows = client.queries()
        if args.json:
            from raycep.gateway.client import strict_json
            print(strict_json(rows, indent=2))
        else:
            print(query_table(rows))
    return 0


def add_queries(client, args) -> int:
    """``raycep query add``: all or nothing, in one request (``Client.register_many``). The
    gateway checks every query first (it compiles with the parameters; its name is neither
    registered nor used twice in the file) and registers none when one fails; the error
    names the query by its NAME, unnamed ones ``query #k``."""
    params = parse_params(args.param)
    queries = load_queries([args.query], text_label="the query text")
    if args.name and len(queries) > 1:
        err("error: --name needs a single query")
        return 2
    if args.name is None and os.path.isfile(args.query):
        with open(args.query, encoding="utf-8") as handle:      # errors name file lines
            todo = handle.read()
    else:
        todo = [(q.text, args.name or (q.name if declares_name(q) else None))
                for _, q in queries]
    try:
        done = client.register_many(todo, params=params or None, mode=args.disorder_mode)
    except CepError as exc:
        if isinstance(exc, UnavailableError):
            raise
        err(f"error: {exc}")
        note("nothing was registered")
        return 2
    for qid in done:
        print(f"registered {qid}")
    return 0


def run_matches(args) -> int:
    client = client_for(args)
    if args.follow:
        try:
            for m in client.subscribe(args.id, since=args.since):
                print(json.dumps(m), flush=True)
        except KeyboardInterrupt:
            return 0
        return 0
    page = client.matches(args.id, since=args.since, limit=args.limit)
    for m in page.matches:
        print(json.dumps(m))
    retracted = sum(1 for m in page.matches if m.get("retracted"))
    note(f"{len(page.matches) - retracted} matches"
         + (f", {retracted} retractions" if retracted else "") + f"; next cursor {page.next}"
         + (f"; {page.missed} dropped before this read" if page.missed else ""))
    return 0


def run_late(args) -> int:
    page = client_for(args).late_events(since=args.since, limit=args.limit)
    for record in page.matches:
        print(json.dumps(record))
    note(f"{len(page.matches)} late events; next cursor {page.next}"
         + (f"; {page.missed} dropped before this read" if page.missed else ""))
    return 0


def run_explain(args) -> int:
    info = client_for(args).explain(args.id)
    if args.json:
        from raycep.gateway.client import strict_json
        print(strict_json(info, indent=2))
    else:
        from raycep.planner.explain import render
        print(render(info))
    return 0


def run_advance(args) -> int:
    out = client_for(args).advance(args.watermark, force=args.force)
    print(f"advanced the watermark to {out['watermark']:g}; {out['matches']} deferred "
          f"matches released")
    return 0


def query_table(rows: list) -> str:
    """``raycep query ls``: per query its scope, status, out-of-order mode, matches stored,
    retractions, late events, plan order and version (and its warnings after the table)."""
    header = ("QUERY", "SCOPE", "STATUS", "MODE", "MATCHES", "RETRACTED", "LATE", "PLAN",
              "VERSION")
    lines = []
    for q in rows:
        plan = q.get("plan") or {}
        stats = q.get("stats") or {}
        order = ",".join(plan.get("order") or []) or "tree-nfa"
        lines.append((q["id"], q.get("scope") or "-", q.get("status", "-"),
                      stats.get("mode", "-"), q.get("matches", {}).get("total", 0),
                      stats.get("retractions", 0), stats.get("late_events", 0), order,
                      plan.get("version", "-")))
    notes = [f"warning: query {q['id']}: {w}" for q in rows for w in q.get("warnings") or ()]
    return "\n".join([table(header, lines)] + notes)
