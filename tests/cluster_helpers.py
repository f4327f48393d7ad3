"""Helpers shared by the gateway tests (in-process) and the cluster tests (Ray)."""
import json
import random
import time
import urllib.error
import urllib.request

PAIR = "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 seconds"
NEG = "PATTERN SEQ(A a, B b, ~C c) WHERE [k] WITHIN 5 seconds"
# no [k]: runs on the global actor and pairs events across keys
GLOBAL_AC = "PATTERN SEQ(A a, C c) WHERE a.x + c.x > 15 WITHIN 3 seconds"
SEQ3 = """PATTERN SEQ(A a, B b, C c)
WHERE [k] AND a.x < b.x AND b.x > c.x
WITHIN 10 seconds"""


def read_all(client, qid, since=0, limit=1000) -> list:
    """Every stored match of ``qid`` after ``since``, paging with the cursor."""
    got = []
    while True:
        page = client.matches(qid, since=since, limit=limit)
        got.extend(page.matches)
        if not page.matches:
            return got
        since = page.next


def ids_of(matches) -> list:
    return [m["id"] for m in matches]


def wait_for(predicate, timeout=30.0, what="condition", every=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def send_in_slices(client, events, size=100):
    for i in range(0, len(events), size):
        ack = client.send(events[i:i + size])
        assert ack["bad_rows"] == [] and ack["events"] == len(events[i:i + size])


def http(method, url, body=None, headers=None, timeout=30.0):
    """(status, headers, decoded JSON body) of a raw request with urllib."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read() or b"null")


def make_stream(n, seed, keys, t0, gaps):
    """Events A/B/C with attribute x and key attribute k (also the event key)."""
    from raycep.cep import Event
    rng = random.Random(seed)
    out, ts = [], t0
    for _ in range(n):
        ts += rng.choice(gaps)
        k = f"k{rng.randrange(keys)}"
        out.append(Event(rng.choice("ABC"), ts, {"x": rng.randint(0, 9), "k": k}, key=k))
    return out


def check_concurrent_sends(client, query: str, producers: int = 8, n: int = 800) -> None:
    """Producers (threads, a Client each, a key each) send their events in slices of 10 at
    once, each reading the matches after every answer: every match its events completed so
    far (an Engine per key) is readable then (issue 36: sends to one actor share drains;
    each answer still waits for its own matches). Then the gateway's send stages count every
    send. The cluster needs a slack that keeps the interleaved keys from being late."""
    import threading

    from raycep.cep import Engine
    from raycep.cep.match import match_id
    client.register(query, name="pair")
    events = make_stream(n, 31, producers, 0.0, gaps=(0.25, 0.5, 1.0))
    by_key: dict = {}
    for ev in events:
        by_key.setdefault(ev.key, []).append(ev)
    expected = {}                                  # key -> [(events to send, ids so far)]
    for key, evs in by_key.items():
        eng = Engine(key_attr="k")
        eng.add_query(query, name="pair")
        steps, found = [], []
        for i in range(0, len(evs), 10):
            for ev in evs[i:i + 10]:
                found += [match_id(m) for m in eng.process(ev)]
            steps.append((evs[i:i + 10], list(found)))
        expected[key] = steps
    missing, errors = [], []

    def producer(key):
        own = type(client)(client.address, client.token)
        try:
            for part, ids in expected[key]:
                own.send(part)
                stored = set(ids_of(read_all(own, "pair")))
                missing.extend(i for i in ids if i not in stored)
        except Exception as exc:               # reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=producer, args=(k,)) for k in expected]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and not any(t.is_alive() for t in threads), errors
    assert sum(len(steps[-1][1]) for steps in expected.values()) > 20     # not vacuous
    assert missing == []
    stages = client.stats()["gateway"]["send_stages"]
    sends = sum(len(steps) for steps in expected.values())
    assert stages["sends"] == sends and stages["total"]["n"] == sends
    for stage in ("route", "wait", "actor", "checkpoint", "drain"):
        assert 0 <= stages[stage]["max"] <= stages["total"]["max"] + 1e-9, stage
    assert stages["total"]["p50"] <= stages["total"]["p99"] <= stages["total"]["max"]


def while_it_runs(work, act, wait: float = 90.0) -> None:
    """Run ``work(started)`` in a thread (it sets ``started``, a threading.Event, once under
    way), ``act()`` once it has started, then wait for it; its exception is raised here."""
    import threading
    started, errors = threading.Event(), []

    def run():
        try:
            work(started)
        except Exception as exc:           # noqa: BLE001 (raised below)
            errors.append(exc)
        finally:
            started.set()
    thread = threading.Thread(target=run)
    thread.start()
    started.wait(wait)
    act()
    thread.join(wait)
    assert not thread.is_alive()
    if errors:
        raise errors[0]
