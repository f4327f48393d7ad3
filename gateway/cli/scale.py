"""``raycep scale``: change the number of partition actors of a running cluster; the keys'
state moves with their key groups (``POST /v1/scale``). Without ``--partitions``: the
current number, the rescales so far and the autoscaler's decisions (``raycep serve
--autoscale``)."""
from __future__ import annotations

from raycep.gateway.cli.common import add_gateway_arguments, client_for, note, table


def add_parser(commands) -> None:
    scale = commands.add_parser(
        "scale", help="change the number of partition actors of a running cluster",
        description="Re-partition a running cluster: new partition actors are started (or "
                    "surplus ones stopped) and the state of the keys (the events in their "
                    "windows, pending matches, duplicate memory) moves with their key "
                    "groups. Sends wait meanwhile; none is lost or processed twice. Without "
                    "--partitions: the current number and the rescales so far.")
    scale.add_argument("--partitions", type=int, default=None, metavar="N",
                       help="the new number of partition actors (1 to the cluster's key "
                            "groups)")
    add_gateway_arguments(scale)
    scale.set_defaults(func=run_scale)


def run_scale(args) -> int:
    client = client_for(args)
    if args.partitions is None:
        info = client.scaling()
        print(f"{info['partitions']} partition actors, {info['key_groups']} key groups, "
              f"routing version {info['version']}")
        rows = [(r["before"], r["partitions"], r["moved_key_groups"], f"{r['buffered']:,}",
                 f"{r['seconds']:.3f}") for r in info["history"]]
        if rows:
            print(table(("FROM", "TO", "GROUPS MOVED", "EVENTS MOVED", "SECONDS"), rows,
                        right=(0, 1, 2, 3, 4)))
        auto = info.get("autoscale")
        if auto:
            print(f"autoscaling between {auto['minimum']} and {auto['maximum']} actors, a "
                  f"look every {auto['interval']:g} s; decisions:" if auto["decisions"] else
                  f"autoscaling between {auto['minimum']} and {auto['maximum']} actors, a "
                  f"look every {auto['interval']:g} s; no decision yet")
            for d in auto["decisions"]:
                print(f"  {d['from']} -> {d['to']}: {d['reason']}"
                      + (f" (failed: {d['error']})" if d.get("error") else ""))
        return 0
    if args.partitions < 1:
        note(f"error: --partitions must be at least 1, got {args.partitions}")
        return 2
    note(f"re-partitioning to {args.partitions} partition actors ...")
    r = client.scale(args.partitions)
    if r["before"] == r["partitions"]:
        print(f"already {r['partitions']} partition actors: nothing moved")
        return 0
    print(f"{r['before']} -> {r['partitions']} partition actors: {r['moved_key_groups']} of "
          f"{r['key_groups']} key groups moved with {r['buffered']:,} buffered events in "
          f"{r['seconds']:.3f} s (routing version {r['version']})")
    return 0
