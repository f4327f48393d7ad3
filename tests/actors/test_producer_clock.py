"""A Producer (raycep demo's path, pushing to the actors directly) gives each actor the
stream's event time before a row that came after a later row sent to another actor: the
actors score such rows as one engine fed the slices does (routing.event_steps)."""
from raycep.actors.handles import LocalHandle
from raycep.actors.partition import PartitionWorker
from raycep.actors.producer import Producer
from raycep.actors.routing import RoutingTable, event_steps, partition_of
from raycep.cep import Engine, Event
from raycep.cep.store.disorder import DisorderSettings

QUERY = "PATTERN SEQ(X a, X b) WHERE [k] WITHIN 100 seconds"


def slices():
    """Two small scores of X in the second slice (out of order only behind the other key's
    row) make the third slice's X late in one engine; an actor that saw them in order took
    it (the minimum slack keeps the watermark behind it: only X's threshold decides)."""
    k0 = 0
    k1 = next(k for k in range(1, 64) if partition_of(k, 2) != partition_of(k0, 2))

    def e(t, ts, k, i):
        return Event(t, float(ts), {"k": k}, id=f"{t}{i}")
    return [[e("Y", 10, k0, 0), e("Y", 2, k0, 1)],
            [e("X", 12, k1, 2), e("X", 11.9, k0, 3), e("X", 11.95, k0, 4)],
            [e("X", 7, k0, 5)]]


def test_the_actors_score_rows_behind_another_actors_row_as_one_engine():
    disorder = DisorderSettings(min_slack=4.5)
    engine = Engine(key_attr="k", disorder=disorder)
    engine.add_query(QUERY, name="q")
    for part in slices():
        engine.process_many(part)
    assert [x.event.id for x in engine.late] == ["X5"]
    workers = [PartitionWorker(f"p{i}", "k", disorder=disorder) for i in range(2)]
    for w in workers:
        w.add_query("q", QUERY)
    producer = Producer({i: LocalHandle(w) for i, w in enumerate(workers)},
                        RoutingTable(2, "k"), "test")
    for part in slices():
        producer.send(part)
    producer.flush()
    assert [w.engine.late_events for w in workers] == \
        [1 if w is workers[partition_of(0, 2)] else 0 for w in workers]


def test_event_steps_name_the_rows_behind_and_the_time_before_them():
    a, b, c, d = (Event("X", ts, {}, id=i) for ts, i in ((1.0, "a"), (5.0, "b"), (3.0, "c"),
                                                         (4.0, "d")))
    assert event_steps([a, b, c, d], {0: [a, c, d], 1: [b]}) == {0: [[1, 5.0], [2, 5.0]]}
    assert event_steps([a, c, d], {0: [a, c, d]}) == {}          # in time order: nothing
    assert event_steps([b, c], {0: [c], 1: [b]}) == {0: [[0, 5.0]]}


def test_a_restarted_worker_replays_the_times_before_its_rows(tmp_path):
    """The times before rows (``ingest(..., steps)``) are logged with the batch: a worker
    restored from its write-ahead log is where the one that took them was (its lateness
    statistics, its clock, the late event)."""
    from raycep.actors.partition import WorkerSettings
    from raycep.actors.recovery import CheckpointSettings
    from raycep.cep.io.codec import encode_batch
    disorder = DisorderSettings(min_slack=4.5)
    options = dict(worker=WorkerSettings(outbox=True), disorder=disorder,
                   checkpoint=CheckpointSettings(str(tmp_path), every_events=10**9))
    worker = PartitionWorker("p0", "k", **options)
    worker.add_query("q", QUERY)
    parts = slices()
    mine = [[e for e in part if partition_of(e.attrs["k"], 2) == partition_of(0, 2)]
            for part in parts]
    for n, (part, own) in enumerate(zip(parts, mine)):
        steps = event_steps(part, {0: own}).get(0)
        worker.ingest(encode_batch(own, "s", f"b{n}"), None, max(e.ts for e in part), None,
                      steps)
    again = PartitionWorker("p0", "k", **options)
    assert again.recovery["replayed"] == 4
    stats = [w.engine.disorder.stats()["streams"]["s/X"] for w in (worker, again)]
    assert stats[0] == stats[1] and stats[0]["out_of_order"] == 3 and stats[0]["late"] == 1
    assert list(again.outbox) == list(worker.outbox)
