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
