"""Queries as text (``str(query)``, cep.lang.ast.query_text): the parser reads the text of any
query back as an equal query, so a query built in Python can be shown, stored in a query
file and registered with the client."""
import pytest
from hypothesis import HealthCheck, given, settings

from raycep.cep.lang.builder import (attr, avg, count, first, kleene, last, length, max_, neg,
                                     next_, param, query, seq, var)
from raycep.cep.lang.parser import parse_queries, parse_query

from strategies import queries

EXAMPLES = "examples/queries.cep"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(queries())
def test_the_text_of_any_query_parses_to_the_same_query(drawn):
    q, _ = drawn
    assert parse_query(str(q)) == q


def test_built_queries_print_as_text_that_reads_back():
    built = [
        query(seq(var(None, "a"), kleene(None, "b"), var(None, "c")),
              where=(attr("a", "price") < attr("b", "price"))
              & (attr("b", "price") < next_("b", "price"))
              & (attr("c", "price") < first("b", "price"))
              & (last("b", "price", -1) > avg("b", "price", upto=-1))
              & (max_("b", "price") > 3) & (count("b") > 1) & (length("b") <= param("n"))
              & ~(attr("a", "note") == "it's\n\t\\ \"quoted\"")
              & ((attr("a", "x") < 1) == True),                  # noqa: E712 (a comparison)
              equivalence=["companyID", "region"], within=(30, "minutes"),
              slide=(2, "minutes"), strategy="skip_till_next_match", name="rally"),
        query(seq(var("A", "a"), neg("B", "n"), var("C", "c")),
              where="a.x > c.x * 0.99 AND n.y = TRUE OR -a.x < -5", within="250 ms"),
        query(var("A", "a"), within="W hours"),
    ]
    for q in built:
        text = str(q)
        assert parse_query(text) == q, text
    assert str(built[0]).startswith("NAME rally\nPATTERN SEQ(a, b+, c)\nWHERE [companyID, "
                                    "region] AND ")
    assert "WITHIN 30 minutes\nSLIDE 2 minutes\nSTRATEGY skip_till_next_match" in str(built[0])
    assert "WITHIN 250 milliseconds" in str(built[1])


def test_parsed_queries_print_as_their_meaning():
    with open(EXAMPLES, encoding="utf-8") as handle:
        parsed = parse_queries(handle.read())
    again = parse_queries(";\n".join(map(str, parsed)))
    assert again == parsed and [q.name for q in again] == [q.name for q in parsed]


def test_the_client_registers_a_built_query(client):
    q = query(seq(var("A", "a"), var("B", "b")), where="[k] AND a.x < b.x", within=5,
              name="ab")
    assert client.register(q) == "ab"
    assert parse_query(client.query("ab")["text"]) == q
    client.send([{"type": "A", "ts": 1.0, "k": "x", "x": 1},
                 {"type": "B", "ts": 2.0, "k": "x", "x": 2}])
    assert client.matches("ab").matches
    with pytest.raises(TypeError, match="query text or a Query"):
        client.register(42)
