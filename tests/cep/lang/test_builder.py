"""raycep.cep.lang.builder builds the same AST as the parser."""
import pytest

from raycep.cep.errors import QueryValidationError
from raycep.cep.lang.ast import (Aggregate, Attr, BinOp, BoolAnd, BoolNot, BoolOr, Compare,
                                 Duration, KIndex, Len, Literal, Neg, Param)
from raycep.cep.lang.builder import (E, and_, agg, attr, avg, count, duration, first, kleene, last,
                                     length, lit, max_, min_, neg, next_, nth, or_, param, query,
                                     seq, sum_, var)
from raycep.cep.lang.parser import parse_query

# The paper queries, with their sources, live in tests/cep/lang/test_paper_queries.py.
from test_paper_queries import SASE_Q1, SASE_Q2, SASE_Q3, RCEP_Q1, LIME_Q1, LIME_Q2, LIME_Q3  # noqa: E402
VLDB_FOUR_CAMERAS = ("PATTERN SEQ(A a,B b,C c,D d)WHERE(a.vehicleID=b.vehicleID="
                     "c.vehicleID=d.vehicleID)WITHIN W")
VLDB_CONJUNCTION = ("PATTERN AND(MSFTStock m, GOOGStock g, INTCStock i)WHERE "
                    "(m.difference < g.difference)WITHIN 20 minutes")


def test_sase_query1():
    q = query(seq(var("Shelf", "a"), neg("Register", "b"), var("Exit", "c")),
              where=(attr("a", "tag_id") == attr("b", "tag_id"))
              & (attr("a", "tag_id") == attr("c", "tag_id")),
              within=(12, "hours"), strategy="skip_till_next_match")
    assert q == parse_query(SASE_Q1)


def test_sase_query2():
    q = query(seq(var("Alert", "a"), kleene("Shipment", "b")),
              where=(attr("a", "type") == "contaminated")
              & (first("b", "from") == attr("a", "site"))
              & (attr("b", "from", i=0) == attr("b", "to", i=-1)),
              within=(3, "hours"))
    assert q == parse_query(SASE_Q2)


def test_sase_query3():
    q = query(seq(kleene("Stock", "a"), var("Stock", "b")),
              where=(nth("a", "volume", 1) > 1000)
              & (attr("a", "price", i=0) > avg("a", "price", upto=-1))
              & (attr("b", "volume") < 0.8 * last("a", "volume")),
              equivalence="symbol", within=(1, "hour"), strategy="skip_till_next_match")
    assert q == parse_query(SASE_Q3)


def test_rcep_query1():
    q = query(seq(var(None, "a"), kleene(None, "b"), var(None, "c")),
              where=(attr("a", "price") < attr("b", "price"))
              & (attr("b", "price") < next_("b", "price"))
              & (attr("c", "price") < first("b", "price")),
              equivalence=("companyID",), within=(30, "minutes"), slide=(2, "minutes"))
    assert q == parse_query(RCEP_Q1)


def test_limecep_queries():
    q1 = query(seq(neg("ROOM", "a"), kleene("STEPS", "b")),
               where=attr("b", "value", i=1) > attr("b", "value", i=0), within=(10, "minutes"))
    assert q1 == parse_query(LIME_Q1)
    q2 = query(seq(kleene("HR", "a"), var("SWEAT", "b")),
               where=(attr("a", "value", i=0) < attr("a", "value", i=1))
               & (attr("b", "levelIncreased") == True),  # noqa: E712 (builds a Compare)
               within=(5, "minutes"))
    assert q2 == parse_query(LIME_Q2)
    q3 = query(seq(var("GasLeakSensor", "a"), kleene("TemperatureSensor", "b"),
                   var("SmokeDetector", "c")),
               where=(attr("a", "percentage") > param("thresholdGas"))
               & (attr("b", "temperature", i=1) > attr("b", "temperature", i=0))
               & (attr("c", "percentage") >= param("thresholdSmoke")),
               within=30)
    assert q3 == parse_query(LIME_Q3)


def test_vldb_queries():
    a, b, c, d = (attr(v, "vehicleID") for v in "abcd")
    q = query(seq(var("A", "a"), var("B", "b"), var("C", "c"), var("D", "d")),
              where=(a == b) & (b == c) & (c == d), within="W")
    assert q == parse_query(VLDB_FOUR_CAMERAS)
    q = query(and_(var("MSFTStock", "m"), var("GOOGStock", "g"), var("INTCStock", "i")),
              where=attr("m", "difference") < attr("g", "difference"), within=(20, "minutes"))
    assert q == parse_query(VLDB_CONJUNCTION)


def test_nested_patterns_or_not_arithmetic_and_names():
    text = ("NAME mix PATTERN SEQ(A a, OR(B b, AND(C c, D+ d[])), ~E e) "
            "WHERE ((a.x + 1) * 2 >= -c.y OR NOT d.LEN <> 3 AND sum(d[..i-1].v) / count(d) > 0.5)"
            " AND e.k = a.k WITHIN 90 STRATEGY partition_contiguity")
    built = query(
        seq(var("A", "a"), or_(var("B", "b"), and_(var("C", "c"), kleene("D", "d"))),
            neg("E", "e")),
        where=(((attr("a", "x") + 1) * 2 >= -attr("c", "y"))
               | (~(length("d") != 3) & (sum_("d", "v", upto=-1) / count("d") > 0.5)))
        & (attr("e", "k") == attr("a", "k")),
        within=90, strategy="partition_contiguity", name="mix")
    assert built == parse_query(text)


def test_operators_build_the_expected_nodes():
    x = attr("a", "x")
    assert (x == 1).node == Compare("=", Attr("a", "x"), Literal(1))
    assert (x != "s").node == Compare("!=", Attr("a", "x"), Literal("s"))
    assert (x <= 1.5).node.op == "<=" and (x > 1).node.op == ">" and (x >= 1).node.op == ">="
    c1, c2, c3 = (x > 1).node, (x < 9).node, (x == 5).node
    assert ((x > 1) & (x < 9) & (x == 5)).node == BoolAnd((c1, c2, c3))
    assert ((x > 1) | ((x < 9) | (x == 5))).node == BoolOr((c1, c2, c3))
    assert (~(x > 1)).node == BoolNot(c1)
    assert (1 - x).node == BinOp("-", Literal(1), Attr("a", "x"))
    assert (2 / x).node == BinOp("/", Literal(2), Attr("a", "x"))
    assert (3 + x).node == BinOp("+", Literal(3), Attr("a", "x"))
    assert (-x).node == Neg(Attr("a", "x"))
    assert (-lit(4)).node == Literal(-4)
    assert (True & (x > 1)).node == BoolAnd((Literal(True), c1))


def test_index_and_aggregate_helpers():
    assert attr("b", "x", i=-1).node == Attr("b", "x", KIndex("i", -1))
    assert attr("b", "x", index=KIndex("last", -1)).node == Attr("b", "x", KIndex("last", -1))
    assert nth("b", "x", 2).node == Attr("b", "x", KIndex("first", 1))
    assert first("b", "x").node == Attr("b", "x", KIndex("first", 0))
    assert last("b", "x", -1).node == Attr("b", "x", KIndex("last", -1))
    assert next_("b", "x").node == Attr("b", "x", KIndex("i", 1))
    assert length("b").node == Len("b")
    assert avg("b", "p").node == Aggregate("avg", "b", "p", None)
    assert min_("b", "p", upto=-1).node == Aggregate("min", "b", "p", KIndex("i", -1))
    assert max_("b", "p").node.func == "max"
    assert count("b", upto=KIndex("i", -1)).node == Aggregate("count", "b", None, KIndex("i", -1))
    assert agg("sum", "b", "p").node == Aggregate("sum", "b", "p", None)
    assert param("W").node == Param("W")


def test_python_boolean_operators_are_refused():
    x = attr("a", "x")
    with pytest.raises(TypeError, match="use & | ~"):
        bool(x > 1)
    with pytest.raises(TypeError):
        1 < x < 5                                     # chained: needs bool(1 < x)
    with pytest.raises(TypeError):
        x == object()


@pytest.mark.parametrize("given, expected", [
    (60, Duration(Literal(60), 1.0)), (2.5, Duration(Literal(2.5), 1.0)),
    ("W", Duration(Param("W"), 1.0)), ((30, "minutes"), Duration(Literal(30), 60.0)),
    (("W", "hours"), Duration(Param("W"), 3600.0)), ((250, "ms"), Duration(Literal(250), 0.001)),
    (duration(1, "day"), Duration(Literal(1), 86400.0)),
])
def test_durations(given, expected):
    assert query(var("A", "a"), within=given).within == expected


def test_duration_units_must_match_the_text_for_equality():
    sixty = parse_query("PATTERN A a WITHIN 60 seconds")
    assert query(var("A", "a"), within=60) == sixty
    assert query(var("A", "a"), within=60) != parse_query("PATTERN A a WITHIN 1 minute")
    assert query(var("A", "a"), within=(1, "minute")) == parse_query("PATTERN A a WITHIN 1 minute")


def test_builder_validates():
    with pytest.raises(QueryValidationError, match="missing WITHIN"):
        query(seq(var("A", "a"), var("B", "b")))
    with pytest.raises(QueryValidationError, match="variable 'z' is not declared"):
        query(var("A", "a"), where=attr("z", "x") > 1, within=5)
    with pytest.raises(QueryValidationError, match="unknown time unit 'parsecs'"):
        query(var("A", "a"), within=(5, "parsecs"))
    with pytest.raises(QueryValidationError, match="unknown selection strategy"):
        query(var("A", "a"), within=5, strategy="greedy")


def test_equivalence_deduplicated_and_where_accepts_nodes():
    q = query(var("A", "a"), where=Compare(">", Attr("a", "x"), Literal(1)),
              equivalence=["k", "s", "k"], within=5)
    assert q.equivalence == ("k", "s")
    assert q == parse_query("PATTERN A a WHERE [k] AND a.x > 1 AND [s, k] WITHIN 5")
    assert isinstance(E(Literal(1)).node, Literal)
