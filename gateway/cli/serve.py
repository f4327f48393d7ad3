"""``raycep serve``: start (or join) Ray, the partition actors, the planner and the gateway,
and serve until Ctrl-C or SIGTERM."""
from __future__ import annotations

import os
import signal
import tempfile
import threading

from raycep.actors.recovery import CHECKPOINT_EVERY, CHECKPOINT_SECONDS
from raycep.actors.routing import KEY_GROUPS
from raycep.cep.errors import CepError
from raycep.cep.runtime.engine import check_retain
from raycep.gateway.cli.common import (add_disorder_arguments, disorder_settings, err, note,
                                       require)


def add_parser(commands) -> None:
    serve = commands.add_parser(
        "serve", help="start the partition actors, planner and gateway, and block",
        description="Start (or join, with --address) Ray, create the partition actors, the "
                    "planner and the gateway, print the gateway URL and serve until Ctrl-C.")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address the gateway listens on (default 127.0.0.1; 0.0.0.0 "
                            "for every interface)")
    serve.add_argument("--port", type=int, default=8470,
                       help="the gateway's HTTP port (default 8470; 0: any free port, printed)")
    serve.add_argument("--partitions", type=int, default=2, metavar="N",
                       help="partition actors, each holding the events of its keys and "
                            "evaluating the keyed queries on them (default 2)")
    serve.add_argument("--key-groups", type=int, default=KEY_GROUPS, metavar="G",
                       help=f"key groups (default {KEY_GROUPS}): a key's group is fixed for the "
                            "cluster's life and the partition actors own ranges of groups, "
                            "so G is the most partitions `raycep scale` can reach; a "
                            "checkpoint directory keeps it")
    serve.add_argument("--autoscale", default=None, metavar="MIN..MAX",
                       help="change the number of partition actors from their load, between "
                            "MIN and MAX (busy time, outboxes, refused batches; every "
                            "decision logged with its reason and listed by `raycep scale`)")
    serve.add_argument("--autoscale-interval", type=float, default=10.0, metavar="SECONDS",
                       help="seconds between two looks at the actors' load (default 10)")
    serve.add_argument("--key", default=None, metavar="ATTR",
                       help="the partition key attribute (queries with [ATTR] run per key "
                            "on every partition actor; others on the global actor)")
    serve.add_argument("--token", default=os.environ.get("RAYCEP_TOKEN"),
                       help="require 'Authorization: Bearer TOKEN' (default $RAYCEP_TOKEN)")
    serve.add_argument("--registry", default=None, metavar="FILE",
                       help="the persisted query registry (default $RAYCEP_REGISTRY, else "
                            "$XDG_STATE_HOME/raycep/registry.sqlite, i.e. "
                            "~/.local/state/raycep/registry.sqlite: the same whatever "
                            "directory raycep serve starts in)")
    serve.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                       help="where the partition actors keep their checkpoints and write-ahead "
                            "logs, so a crashed actor comes back with its state (default: "
                            "next to the registry, REGISTRY-checkpoints)")
    serve.add_argument("--checkpoint-every", type=int, default=CHECKPOINT_EVERY, metavar="N",
                       help=f"events an actor takes between two checkpoints (default "
                            f"{CHECKPOINT_EVERY})")
    serve.add_argument("--checkpoint-seconds", type=float, default=CHECKPOINT_SECONDS,
                       metavar="S", help=f"... or seconds, whichever comes first (default "
                                         f"{CHECKPOINT_SECONDS:g})")
    serve.add_argument("--fsync", action="store_true",
                       help="sync each logged batch to disk before acknowledging it (survives "
                            "a machine's power loss, not only a process crash; slower)")
    serve.add_argument("--no-checkpoints", action="store_true",
                       help="keep state in memory only: a crashed actor stays down and its "
                            "events and matches are lost")
    serve.add_argument("--retain", type=float, default=0.0, metavar="SECONDS",
                       help="seconds of event time each actor keeps behind its watermark "
                            "even when no query needs them, so a query registered later "
                            "finds that much history (its first matches may use events from "
                            "before its registration); default 0: only what the registered "
                            "queries' windows need, nothing with no query")
    serve.add_argument("--matches-jsonl", default=None, metavar="FILE",
                       help="also append every match to this JSON-lines file")
    serve.add_argument("--match-capacity", type=int, default=10_000, metavar="N",
                       help="matches kept per query for readers (oldest dropped beyond)")
    serve.add_argument("--outbox-capacity", type=int, default=100_000, metavar="N",
                       help="undelivered matches a partition actor holds before it refuses "
                            "new batches until the gateway has drained it (backpressure)")
    serve.add_argument("--address", default=None,
                       help="an existing Ray cluster ('auto' inside one); default: start a "
                            "local Ray")
    serve.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="where the Ray that raycep serve starts serves the partition "
                            "actors' Ray metrics (Prometheus text at /metrics; default: a "
                            "port Ray picks). With --address, the Ray cluster's own "
                            "setting applies (ray start --metrics-export-port)")
    serve.add_argument("--wait-for-nodes", type=int, default=1, metavar="N",
                       help="wait until the Ray cluster has N nodes (workers join after the "
                            "head), so the partition actors are spread over them; they go "
                            "round robin to the nodes other than this one (default 1: start "
                            "at once)")
    serve.add_argument("--wait-for-nodes-timeout", type=float, default=300.0, metavar="S",
                       help="... for at most S seconds, then start on the nodes there are "
                            "(default 300)")
    # defaults None: GatewaySettings has them (not imported here: every `raycep` command
    # builds this parser, and gateway.server.service pulls in asyncio and the actors)
    serve.add_argument("--max-body-bytes", type=int, default=None, metavar="N",
                       help="the largest request body; larger ones get 413 (default 16 MiB)")
    serve.add_argument("--max-depth", type=int, default=None, metavar="N",
                       help="the deepest nesting of arrays/maps in a request body "
                            "(default 32)")
    serve.add_argument("--max-window", type=float, default=None, metavar="SECONDS",
                       help="the largest query window (WITHIN) a registration may ask for "
                            "(default 604800: 7 days)")
    serve.add_argument("--max-advance-ahead", type=float, default=None, metavar="SECONDS",
                       help="how far past the latest event time seen `advance` may move the "
                            "watermark without --force (default 86400: 1 day)")
    serve.add_argument("--spark", action="store_true",
                       help="keep a warm Spark (RayDP on this Ray) for `raycep ingest`: its "
                            "jobs then skip Spark's start-up and a fresh session's first-job "
                            "costs (started in the background; holds its executors' CPUs and "
                            "memory while serve runs)")
    serve.add_argument("--spark-executors", type=int, default=1, metavar="N",
                       help="with --spark: Spark executors (default 1)")
    serve.add_argument("--spark-executor-cores", type=int, default=1, metavar="N",
                       help="with --spark: cores per executor (default 1)")
    serve.add_argument("--spark-executor-memory", default="1GB", metavar="SIZE",
                       help="with --spark: memory per executor (default 1GB)")
    add_disorder_arguments(serve)
    serve.set_defaults(func=run_serve)


LIMITS = ("max_body_bytes", "max_depth", "max_window", "max_advance_ahead")


def run_serve(args) -> int:
    from raycep.actors.recovery import CheckpointSettings, claim, saved_partitions
    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.registry import default_registry_path
    from raycep.gateway.server.service import GatewaySettings
    args.registry = os.path.abspath(args.registry) if args.registry else default_registry_path()
    from raycep.gateway.server.autoscale import AutoscaleSettings, parse_range
    try:
        autoscale = None
        if args.autoscale is not None:
            low, high = parse_range(args.autoscale)
            autoscale = AutoscaleSettings(low, high, interval=args.autoscale_interval)
    except CepError as exc:
        err(f"error: {str(exc).replace('autoscale interval', '--autoscale-interval')}")
        return 2
    try:
        settings = GatewaySettings(
            host=args.host, port=args.port, token=args.token, registry_path=args.registry,
            matches_jsonl=args.matches_jsonl, match_capacity=args.match_capacity,
            outbox_capacity=args.outbox_capacity, key_groups=args.key_groups,
            autoscale=autoscale,
            **{name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None})
    except CepError as exc:                     # name the option, not the settings' field
        option = str(exc).split(" ", 1)[0]
        err(f"error: --{option.replace('_', '-')} {str(exc).split(' ', 1)[1]}")
        return 2
    if not 1 <= args.partitions <= settings.key_groups:
        err(f"error: --partitions must be from 1 to --key-groups ({settings.key_groups}), got "
            f"{args.partitions}")
        return 2
    if args.wait_for_nodes < 1 or not args.wait_for_nodes_timeout >= 0:
        err("error: --wait-for-nodes must be >= 1 and --wait-for-nodes-timeout >= 0")
        return 2
    if args.spark_executors < 1 or args.spark_executor_cores < 1:
        err("error: --spark-executors and --spark-executor-cores must be >= 1")
        return 2
    try:
        check_retain(args.retain)
    except CepError as exc:
        err(f"error: --retain: {exc}")
        return 2
    checkpoint, start = None, args.partitions
    if not args.no_checkpoints:
        if args.checkpoint_every < 1 or not args.checkpoint_seconds > 0:
            err("error: --checkpoint-every must be >= 1 and --checkpoint-seconds > 0")
            return 2
        checkpoint = CheckpointSettings(
            os.path.abspath(args.checkpoint_dir or
                            os.path.splitext(args.registry)[0] + "-checkpoints"),
            args.checkpoint_every, args.checkpoint_seconds, args.fsync)
        # a directory with the state of another number of partitions (a changed --partitions,
        # a Helm upgrade of gateway.partitions): that number is restored, then re-partitioned
        saved = saved_partitions(checkpoint.directory, args.key, args.key_groups)
        if saved is not None:
            start = saved
        try:
            claim(checkpoint.directory, start, args.key, args.key_groups)
        except CepError as exc:
            err(f"error: --checkpoint-dir: {exc}")
            return 2
    spark, spark_log = None, None
    if args.spark:
        require("pyspark", "raydp")
        from raycep.spark_ingest.service import SparkSettings
        spark = SparkSettings(args.spark_executors, args.spark_executor_cores,
                              args.spark_executor_memory)
        spark_log = os.path.join(tempfile.gettempdir(),
                                 f"raycep-ingest-service-{os.getpid()}.log")
    cluster = RayCluster(start, args.key, settings, address=args.address,
                         disorder=disorder_settings(args), mode=args.disorder_mode,
                         checkpoint=checkpoint, retain=args.retain, spark=spark,
                         spark_log=spark_log, metrics_port=args.metrics_port)
    note(f"starting {start} partition actors, the global actor, the planner and "
         f"the gateway{' (and a warm Spark for raycep ingest)' if spark else ''} ...")
    url = cluster.start(args.wait_for_nodes, args.wait_for_nodes_timeout, note)
    if start != args.partitions:
        from raycep.gateway.client import connect
        note(f"the checkpoint directory held the state of {start} partition actors, restored; "
             f"re-partitioning to {args.partitions} ...")
        moved = connect(url, token=args.token).scale(args.partitions)
        note(f"{moved['moved_key_groups']} of {moved['key_groups']} key groups moved with "
             f"{moved['buffered']:,} buffered events in {moved['seconds']:.3f} s")
    if spark is not None:
        note(f"warm Spark for `raycep ingest` starting in the background ({spark.executors} "
             f"executor(s) x {spark.cores} core(s), {spark.memory}); its log: {spark_log}")
    # SIGTERM (kill, Kubernetes) stops as Ctrl-C does; set after Ray's start, whose own handler
    # would print a native stack dump instead
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    print(f"raycep gateway listening on {url} (registry {args.registry}; "
          f"{'checkpoints in ' + checkpoint.directory if checkpoint else 'no checkpoints'}"
          f"{', token required' if args.token else ''}); Ctrl-C or SIGTERM stops", flush=True)
    # the handler only sets a flag: an exception raised from it could land inside a Ray call
    # (heal), which would wrap it in a RaySystemError and end serve with status 1
    try:
        while not terminated.wait(1.0):     # the gateway comes back if its actor dies
            if cluster.heal():
                note(f"the gateway had died: a new one listens on {cluster.url}")
        note("SIGTERM: stopping ...")
    except KeyboardInterrupt:
        note("stopping ...")
    finally:
        cluster.stop()
    note("stopped")
    return 0

