"""Prometheus metrics of the gateway (issue 37): ``GET /metrics``, text exposition format 0.0.4
made by prometheus-client.

Two kinds:
- what the gateway measures itself, kept in its own registry (``GatewayMetrics``): each
  send's seconds by stage (gateway/server/send_stages.py), and each request's seconds by
  route and method;
- what the cluster counts, read on every scrape from the stats of the gateway and of each
  actor, and exposed by a collector: per query (its counts summed over the actors), per
  actor, and per stored query.

Names and labels follow Prometheus conventions: ``raycep_`` prefix, ``_total`` for counters,
seconds as the base unit.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from raycep.actors.metrics import ACTOR_SERIES, QUERY_COUNTERS, QUERY_GAUGES, number
from raycep.cep.evaluation.timing import BUCKETS as EVAL_BUCKETS
from raycep.cep.evaluation.timing import merged
from raycep.gateway.server.send_stages import STAGES

#: the content type of the exposition (prometheus_client.exposition.CONTENT_TYPE_LATEST)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: histogram buckets of request and send seconds (1 ms .. 10 s)
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

class GatewayMetrics:
    """What the gateway measures itself (one per gateway)."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        self.send_stage = Histogram(
            "raycep_send_stage_seconds", "Seconds of each stage of a send (POST /v1/events)",
            ["stage"], registry=self.registry, buckets=BUCKETS)
        self.request = Histogram(
            "raycep_http_request_seconds", "Seconds to answer an HTTP request",
            ["method", "route"], registry=self.registry, buckets=BUCKETS)
        self.readable = Histogram(
            "raycep_send_to_readable_seconds", "Seconds from a send's arrival until the "
            "matches it completed could be read (sends that completed matches)",
            registry=self.registry, buckets=BUCKETS)
        self.subscribers = Gauge(
            "raycep_sse_subscribers", "Readers following a query's live stream (SSE)",
            ["query"], registry=self.registry)

    def observe_send(self, stages: tuple, matched: bool = False) -> None:
        """One send's stage seconds, in the order of send_stages.STAGES; ``matched``: it
        completed matches, readable when it was answered."""
        for stage, seconds in zip(STAGES, stages):
            self.send_stage.labels(stage).observe(seconds)
        if matched:
            self.readable.observe(stages[-1])

    def observe_request(self, method: str, route: str, seconds: float) -> None:
        self.request.labels(method, route).observe(seconds)

    def exposition(self, snapshot: dict) -> bytes:
        """The exposition: this registry's metrics and those of ``snapshot``
        (``Snapshot``'s input: the gateway's, the actors' and the store's stats)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Own(self.registry))
        registry.register(Snapshot(snapshot))
        return generate_latest(registry)


class _Own:
    """The gateway's own registry, collected into a scrape's."""

    def __init__(self, registry):
        self.registry = registry

    def collect(self):
        return self.registry.collect()


class Snapshot:
    """A collector of the cluster's counts at one scrape: ``stats`` holds ``gateway`` (the
    gateway's figures), ``actors`` (actor label -> its stats, with ``queries``) and
    ``store`` (query -> the store's stats of it)."""

    def __init__(self, stats: dict):
        self.stats = stats

    def collect(self):
        gateway, actors = self.stats["gateway"], self.stats["actors"]
        yield _counter("raycep_gateway_events", "Events the gateway took in",
                       gateway["events"])
        yield _counter("raycep_gateway_bad_rows", "Rows the gateway refused",
                       gateway["bad_rows"])
        yield _counter("raycep_gateway_late_events", "Late events reported to readers",
                       gateway["late_events"])
        yield _counter("raycep_gateway_orphan_matches",
                       "Matches of queries no longer registered", gateway["orphan_matches"])
        yield from self._scaling(gateway)
        yield from self._queries(actors)
        yield from self._actors(actors)
        yield from self._store(self.stats.get("store", {}))

    @staticmethod
    def _scaling(gateway: dict):
        if "partitions" not in gateway:
            return
        yield GaugeMetricFamily("raycep_partition_actors", "Partition actors now (raycep "
                                "scale, --autoscale)", value=gateway["partitions"])
        yield _counter("raycep_rescales", "Re-partitionings done", gateway["rescales"])
        yield _counter("raycep_rescale_held_seconds", "Seconds sends were held by "
                       "re-partitionings", gateway["rescale_held_seconds"])
        yield _counter("raycep_autoscale_decisions", "Decisions of the autoscaler "
                       "(--autoscale)", gateway["autoscale_decisions"])

    @staticmethod
    def _queries(actors: dict):
        totals: dict = {}
        plans: dict = {}
        paths: dict = {}
        timings: dict = {}
        info: dict = {}
        keys = [k for _, _, k in (*QUERY_COUNTERS, *QUERY_GAUGES)]
        for stats in actors.values():
            groups = {m: g["name"] for g in stats.get("groups", ()) for m in g["queries"]}
            for name, q in stats.get("queries", {}).items():
                sums = totals.setdefault(name, dict.fromkeys(keys, 0))
                for key in keys:
                    value = q.get(key)
                    sums[key] += value if number(value) else 0
                plans[name] = max(plans.get(name, 0), q.get("plan_version") or 0)
                info[name] = (groups.get(name, name), q.get("mode") or "")
            for name, path in stats.get("paths", {}).items():
                got = paths.setdefault(name, [0, 0])
                got[0] += path.get("bulk", 0) or 0
                got[1] += path.get("per_trigger", 0) or 0
            for name, times in (stats.get("timings") or {}).items():
                timings.setdefault(name, []).append(times)
        for metric, text, key in QUERY_COUNTERS:
            family = CounterMetricFamily(metric, text, labels=["query"])
            for name, sums in totals.items():
                family.add_metric([name], sums[key])
            yield family
        for metric, text, key in QUERY_GAUGES:
            family = GaugeMetricFamily(metric, text, labels=["query"])
            for name, sums in totals.items():
                family.add_metric([name], sums[key])
            yield family
        family = CounterMetricFamily("raycep_query_evaluated_triggers",
                                     "Triggers evaluated, by path: in bulk over columns or "
                                     "one at a time", labels=["query", "path"])
        for name, (bulk, one) in paths.items():
            family.add_metric([name, "bulk"], bulk)
            family.add_metric([name, "per_trigger"], one)
        yield family
        family = HistogramMetricFamily(
            "raycep_query_evaluation_seconds", "Seconds of each evaluation of the query: one "
            "trigger, or a chunk of triggers evaluated in bulk (a query group's members: "
            "the group's)", labels=["query"])
        for name, parts in timings.items():
            times = merged(parts)
            running, buckets = 0, []
            for bound, count in zip((*map(str, EVAL_BUCKETS), "+Inf"), times["buckets"]):
                running += count
                buckets.append((bound, running))
            family.add_metric([name], buckets, times["seconds"])
        yield family
        family = GaugeMetricFamily("raycep_query_plan_version",
                                   "The newest plan version of the query on any actor",
                                   labels=["query"])
        for name, version in plans.items():
            family.add_metric([name], version)
        yield family
        family = GaugeMetricFamily("raycep_query_info", "A registered query: the group it is "
                                   "evaluated with and its out-of-order mode (always 1)",
                                   labels=["query", "group", "mode"])
        for name, (group, mode) in info.items():
            family.add_metric([name, group, mode], 1)
        yield family

    @staticmethod
    def _actors(actors: dict):
        for metric, text, key, counter in ACTOR_SERIES:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            family = kind(metric, text, labels=["actor"])
            for label, stats in actors.items():
                value = stats.get(key)
                if number(value):
                    family.add_metric([label], value)
            yield family

    @staticmethod
    def _store(store: dict):
        stored = GaugeMetricFamily("raycep_store_matches",
                                   "Matches the gateway holds for readers", labels=["query"])
        dropped = CounterMetricFamily("raycep_store_dropped_matches",
                                      "Matches dropped from the bounded store before a "
                                      "reader got them", labels=["query"])
        for name, st in store.items():
            stored.add_metric([name], st["stored"])
            dropped.add_metric([name], st["dropped"])
        yield stored
        yield dropped


def _counter(name: str, text: str, value) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)
