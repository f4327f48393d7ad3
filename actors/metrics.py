"""What a partition actor counts, as metrics (issue 37).

The names are shared by the two exports:
- the gateway's ``GET /metrics`` (gateway/server/metrics.py) reads every actor's stats at
  each scrape and sums the per-query counts over the actors;
- inside a Ray actor, ``ActorMetrics`` publishes the same figures through
  ``ray.util.metrics`` (its counters and gauges, labelled with the actor), which Ray's
  metrics agent exports to Prometheus with its ``ray_`` prefix (``ray_raycep_query_matches_total``)
  and Ray's dashboard shows. Published from the actor's stats at most every
  ``PUBLISH_SECONDS`` of wall time, when the actor takes a batch or is drained.

Names follow Prometheus conventions: ``raycep_`` prefix, counters end in ``_total`` once
exported, seconds as the base unit.
"""
from __future__ import annotations

import time

#: per query, summed over the actors: (metric, help, the query stats' key)
QUERY_COUNTERS = (
    ("raycep_query_events", "Events of the query's types that reached it (considered)",
     "events"),
    ("raycep_query_triggers", "Triggers evaluated", "triggers"),
    ("raycep_query_matches", "Matches found", "matches"),
    ("raycep_query_retractions", "Matches retracted by a late event", "retractions"),
    ("raycep_query_late_events", "Late events that reached the query", "late_events"),
    ("raycep_query_truncated_triggers",
     "Triggers whose matches hit the per-trigger cap", "truncated_triggers"),
    ("raycep_query_plan_switches", "Plans installed that changed the query's order",
     "plan_switches"),
)
#: per query, summed over the actors: (metric, help, the query stats' key)
QUERY_GAUGES = (
    ("raycep_query_pending_bindings", "Partial work held: bindings waiting for the clock (a "
     "trailing negation, SLIDE, a pessimistic query)", "pending"),
    ("raycep_query_window_events", "Events of the query's types held within its window "
     "before the clock (what its next triggers read)", "window_events"),
)
#: per actor: (metric, help, the actor stats' key, counter?)
ACTOR_SERIES = (
    ("raycep_actor_events", "Events the actor processed", "events", True),
    ("raycep_actor_duplicates", "Duplicate events dropped", "duplicates", True),
    ("raycep_actor_evicted_events", "Events evicted from the index", "evicted", True),
    ("raycep_actor_late_events", "Events that arrived late", "late_events", True),
    ("raycep_actor_refused_batches", "Batches refused for backpressure", "refused_batches",
     True),
    ("raycep_actor_buffered_events", "Events held in the shared index", "buffered", False),
    ("raycep_actor_outbox_records", "Match records not yet delivered", "outbox", False),
    ("raycep_actor_event_time_seconds", "The actor's event-time clock", "clock", False),
    ("raycep_actor_checkpoint_age_seconds", "Seconds since the actor's last checkpoint",
     "checkpoint_age", False),
)
#: seconds of wall time between two publications of an actor's Ray metrics
PUBLISH_SECONDS = 5.0


def number(value) -> bool:
    """Whether a stats value is a number a metric can take."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class ActorMetrics:
    """One actor's figures as ``ray.util.metrics`` counters and gauges (``types``: their
    classes, actors.handles.ray_metric_types)."""

    def __init__(self, actor: str, types):
        counter, gauge = types
        self.actor = actor
        self._query = {key: (counter if i < len(QUERY_COUNTERS) else gauge)(
            name, description=text, tag_keys=("query", "actor"))
            for i, (name, text, key) in enumerate((*QUERY_COUNTERS, *QUERY_GAUGES))}
        self._seconds = counter("raycep_query_evaluation_seconds",
                                description="Seconds spent evaluating the query (a query "
                                            "group's members: the group's)",
                                tag_keys=("query", "actor"))
        self._actor = {key: (counter if is_counter else gauge)(
            name, description=text, tag_keys=("actor",))
            for name, text, key, is_counter in ACTOR_SERIES}
        self._counted: dict = {}        # (key, query) -> the value last published
        self._next = 0.0                # monotonic time of the next publication

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def publish(self, stats: dict) -> None:
        """Publish an actor's ``stats`` (PartitionWorker.stats)."""
        self._next = time.monotonic() + PUBLISH_SECONDS
        for name, q in stats.get("queries", {}).items():
            tags = {"query": name, "actor": self.actor}
            for _, _, key in QUERY_COUNTERS:
                self._count(self._query[key], (key, name), q.get(key), tags)
            for _, _, key in QUERY_GAUGES:
                if number(q.get(key)):
                    self._query[key].set(q[key], tags=tags)
        for name, spent in (stats.get("seconds") or {}).items():
            self._count(self._seconds, ("seconds", name), spent,
                        {"query": name, "actor": self.actor})
        tags = {"actor": self.actor}
        for _, _, key, is_counter in ACTOR_SERIES:
            value = stats.get(key)
            if not number(value):
                continue
            if is_counter:
                self._count(self._actor[key], (key, None), value, tags)
            else:
                self._actor[key].set(value, tags=tags)

    def _count(self, metric, key: tuple, value, tags: dict) -> None:
        """A counter's increase since its last publication (a count that went back, as
        after a restore from an older checkpoint, starts over from it)."""
        if not number(value):
            return
        last = self._counted.get(key, 0)
        if value > last:
            metric.inc(value - last, tags=tags)
        self._counted[key] = value
