"""Queries that read an event type or attribute the input never had (issue 13: a misspelt type,
an equivalence attribute no event has, a misspelt attribute) are valid and match nothing;
the engine says so in ``stats()`` and ``warnings()``, and ``raycep local`` in its summary."""
import json

from raycep.cep import Engine, Event
from raycep.gateway import cli
from raycep.gateway.client import connect


def tick(ts, **attrs):
    return Event("Stock", float(ts), {"symbol": "X", "price": 1.0, **attrs})


def test_misspelt_type_attribute_and_equivalence_are_warned_about():
    eng = Engine(key_attr="symbol")
    eng.add_query("PATTERN SEQ(Stok a, Stock b) WITHIN 10 seconds", name="type")
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WHERE [sym] WITHIN 10 seconds", name="equiv")
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WHERE b.prcie > a.price WITHIN 10 seconds",
                  name="attr")
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price "
                  "WITHIN 10 seconds", name="good")
    assert eng.warnings() == {}                      # nothing said before any input
    for ts in range(50):
        eng.process(tick(ts))
    warnings = eng.warnings()
    assert set(warnings) == {"type", "equiv", "attr"}
    assert "'Stok'" in warnings["type"][0] and "misspelt event type" in warnings["type"][0]
    assert "'sym'" in warnings["equiv"][0]
    assert "'prcie'" in warnings["attr"][0]
    stats = eng.stats()["queries"]
    assert stats["attr"]["warnings"] == warnings["attr"] and "warnings" not in stats["good"]


def test_an_attribute_seen_only_in_events_already_evicted_is_not_warned_about():
    eng = Engine()
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WHERE b.rare > 0 WITHIN 1 seconds", name="q")
    eng.process(tick(0, rare=1))                     # the only event with `rare`
    for ts in range(1, 20_000):                      # it leaves the index long before the end
        eng.process(tick(ts))
    assert eng.index.evicted > 0 and all("rare" not in e.attrs for e in eng.index.events())
    assert eng.warnings() == {}


def test_the_warning_goes_away_once_the_type_arrives():
    eng = Engine()
    eng.add_query("PATTERN SEQ(Stock a, Trade b) WITHIN 10 seconds", name="q")
    eng.process(tick(1))
    assert "'Trade'" in eng.warnings()["q"][0]
    eng.process(Event("Trade", 2.0, {}))
    assert eng.warnings() == {}


def test_a_condition_on_a_missing_attribute_names_the_reason(tmp_path, capsys):
    """The warning about a condition that could not be evaluated has a reason (it was empty)."""
    events = tmp_path / "ev.csv"
    events.write_text("type,ts,price\n" + "".join(f"Stock,{t},{t}\n" for t in range(10)))
    code = cli.main(["local", "--query",
                     "PATTERN SEQ(Stock a, Stock b) WHERE a.price < b.prcie WITHIN 5 seconds",
                     "--query", "PATTERN SEQ(Stok a, Stock b) WITHIN 5 seconds",
                     "--events", str(events)])
    out, err = capsys.readouterr()
    assert code == 0
    line = next(x for x in err.splitlines() if "could not be evaluated" in x)
    assert "'prcie'" in line.split("(counted as false):")[1], line
    assert "no 'Stock' event had attribute 'prcie'" in err
    assert "no event of type 'Stok'" in err
    summary = json.loads(out.splitlines()[-1])
    assert summary["warnings"]["q2"] == ["no event of type 'Stok' seen in the input so far "
                                         "(misspelt event type?)"]


def test_the_gateway_describes_what_a_query_reads_and_the_input_never_had(make_cluster,
                                                                          capsys):
    cluster = make_cluster(key_attr="symbol")
    client = connect(cluster.url)
    client.register("PATTERN SEQ(Stock a, Stock b) WHERE [sym] AND b.price > a.price "
                    "WITHIN 10 seconds", name="typo")
    client.register("PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price "
                    "WITHIN 10 seconds", name="fine")
    assert client.query("typo")["warnings"] == []          # no input yet: nothing to say
    client.send([tick(t, price=float(t)) for t in range(20)])
    assert client.query("typo")["warnings"] == [
        "no 'Stock' event had attribute 'sym' so far (misspelt attribute?)"]
    assert client.query("fine")["warnings"] == []
    assert cli.main(["query", "ls", "--gateway", cluster.url]) == 0
    assert "warning: query typo: no 'Stock' event had attribute 'sym'" in \
        capsys.readouterr().out
