"""Every query printed in the seed papers parses, with the AST facts the paper intends.

Texts are copied verbatim from the papers listed in docs/references.md, except for obvious
PDF-extraction damage (noted per query).
"""
from raycep.cep.event import Event
from raycep.cep.lang.ast import (Aggregate, And, Attr, BinOp, BoolAnd, Compare, EventVar, KIndex,
                                 Literal, Param, Seq, event_vars)
from raycep.cep.lang.parser import parse_query
from raycep.cep.lang.validate import conjuncts
from raycep.cep.runtime.engine import Engine

from oracle import oracle_matches


def unit_of(duration):
    """Seconds per unit of a WITHIN/SLIDE clause."""
    return duration.unit_seconds


def window_length(duration):
    return duration.amount.value * duration.unit_seconds


def flags(query):
    return [(v.type, v.name, v.kleene, v.negated) for v in event_vars(query.pattern)]


# ------------------------------------------------------------- SASE+ (Agrawal et al., SIGMOD 2008)

# SASE+ (Agrawal et al., SIGMOD 2008), Figure 1 (a) Query 1.
SASE_Q1 = """PATTERN SEQ(Shelf a, \u223c(Register b), Exit c)
WHERE    skip_till_next_match(a, b, c) { 
                  a.tag_id = b.tag_id 
       and     a.tag_id = c.tag_id 
                  /* equivalently, [tag_id] */     } 
WITHIN    12 hours"""

# SASE+, Figure 1 (b) Query 2.
SASE_Q2 = """PATTERN SEQ(Alert a, Shipment+ b[ ])
WHERE    skip_till_any_match(a, b[ ]) {
                    a.type = 'contaminated'   
       and       b[1].from = a.site
       and       b[i].from = b[i-1].to }
WITHIN    3 hours"""

# SASE+, Figure 1 (c) Query 3.
SASE_Q3 = """PATTERN SEQ(Stock+ a[ ], Stock b)
WHERE    skip_till_next_match(a[ ], b) {
                    [symbol]  
       and       a[1].volume > 1000
       and       a[i].price > avg(a[..i-1].price) 
       and       b.volume < 80%*a[a.LEN].volume } 
WITHIN    1 hour"""


def test_sase_query1_negation_and_comment():
    q = parse_query(SASE_Q1)
    assert flags(q) == [("Shelf", "a", False, False), ("Register", "b", False, True),
                        ("Exit", "c", False, False)]
    assert isinstance(q.pattern, Seq)
    assert q.strategy == "skip_till_next_match"
    assert window_length(q.within) == 12 * 3600
    assert unit_of(q.within) == 3600.0
    # the comment "equivalently, [tag_id]" is a comment, not an equivalence test
    assert q.equivalence == ()
    assert conjuncts(q.where) == [
        Compare("=", Attr("a", "tag_id"), Attr("b", "tag_id")),
        Compare("=", Attr("a", "tag_id"), Attr("c", "tag_id")),
    ]
    assert q.text == SASE_Q1


def test_sase_query2_kleene_indices():
    q = parse_query(SASE_Q2)
    assert flags(q) == [("Alert", "a", False, False), ("Shipment", "b", True, False)]
    assert q.strategy == "skip_till_any_match"
    assert window_length(q.within) == 3 * 3600
    assert conjuncts(q.where) == [
        Compare("=", Attr("a", "type"), Literal("contaminated")),
        Compare("=", Attr("b", "from", KIndex("first", 0)), Attr("a", "site")),
        Compare("=", Attr("b", "from", KIndex("i", 0)), Attr("b", "to", KIndex("i", -1))),
    ]


def test_sase_query3_equivalence_aggregate_percent():
    q = parse_query(SASE_Q3)
    assert flags(q) == [("Stock", "a", True, False), ("Stock", "b", False, False)]
    assert q.strategy == "skip_till_next_match"
    assert q.equivalence == ("symbol",)
    assert window_length(q.within) == 3600
    c1, c2, c3 = conjuncts(q.where)
    assert c1 == Compare(">", Attr("a", "volume", KIndex("first", 0)), Literal(1000))
    assert c2 == Compare(">", Attr("a", "price", KIndex("i", 0)),
                         Aggregate("avg", "a", "price", KIndex("i", -1)))
    assert c3 == Compare("<", Attr("b", "volume"),
                         BinOp("*", Literal(0.8), Attr("a", "volume", KIndex("last", 0))))
    assert c3.right.left.value == 0.8


# ------------------------------------------------- RCEP ("All that Incremental is not Efficient")

# RCEP (recomputation-based CEP), Query 1, copied with its line breaks (the missing space in
# "(a, b+, c)WHERE" is in the paper).
RCEP_Q1 = """PATTERN SEQ (a, b+, c)WHERE [companyID]

AND a.price < b.price AND
b.price < NEXT(b.price) AND c.price < FIRST(b.price)

WITHIN 30 minutes SLIDE 2 minutes"""


def test_rcep_query1_untyped_leaves_next_first_slide():
    q = parse_query(RCEP_Q1)
    assert flags(q) == [(None, "a", False, False), (None, "b", True, False),
                        (None, "c", False, False)]
    assert q.equivalence == ("companyID",)
    assert window_length(q.within) == 1800
    assert unit_of(q.within) == 60.0
    assert window_length(q.slide) == 120
    assert q.strategy == "skip_till_any_match"
    assert conjuncts(q.where) == [
        Compare("<", Attr("a", "price"), Attr("b", "price")),
        Compare("<", Attr("b", "price"), Attr("b", "price", KIndex("i", 1))),
        Compare("<", Attr("c", "price"), Attr("b", "price", KIndex("first", 0))),
    ]


# ----------------------------------------------------------------- LimeCEP (Kyrama & Gounaris)

# LimeCEP, Query 1: Impending anxiety crisis.
LIME_Q1 = """PATTERN SEQ(!ROOM a, STEPS+ b[])
WHERE b[i+1].value > b[i].value
WITHIN 10 minutes"""

# LimeCEP, Query 2: Early signs of a cardiac event.
LIME_Q2 = """PATTERN SEQ(HR+ a[], SWEAT b)
WHERE a[i].value < a[i+1].value
AND b.levelIncreased == true
WITHIN 5 minutes"""

# LimeCEP, Query 3: Q-Smart Home (thresholdGas / thresholdSmoke are parameters).
LIME_Q3 = """PATTERN SEQ( GasLeakSensor a, TemperatureSensor+ b[], SmokeDetector c )
WHERE a.percentage > thresholdGas
AND b[i+1].temperature > b[i].temperature
AND c.percentage >= thresholdSmoke
WITHIN 30 seconds"""

# LimeCEP, section 6.1, Queries 4-6 ("W𝑊Witalic_W" is extraction damage for "W"); Query 5
# and 6 write a Kleene variable as "B[] b+".
LIME_Q4 = """PATTERN SEQ(A a, B b, C c)
WITHIN W"""
LIME_Q5 = """PATTERN SEQ(A a, B[] b+, C c)
WITHIN W"""
LIME_Q6 = """PATTERN SEQ(A[] a+, B[] b+, C c)
WITHIN W"""

# LimeCEP, section 5 (example of out-of-order input), in running text.
LIME_EXAMPLE = "PATTERN SEQ(A, B+, C) WITHIN 10 secs"


def test_limecep_query1_bang_negation_next_index():
    q = parse_query(LIME_Q1)
    assert flags(q) == [("ROOM", "a", False, True), ("STEPS", "b", True, False)]
    assert window_length(q.within) == 600
    assert q.where == Compare(">", Attr("b", "value", KIndex("i", 1)),
                              Attr("b", "value", KIndex("i", 0)))


def test_limecep_query2_double_equals_true():
    q = parse_query(LIME_Q2)
    assert flags(q) == [("HR", "a", True, False), ("SWEAT", "b", False, False)]
    assert window_length(q.within) == 300
    assert conjuncts(q.where) == [
        Compare("<", Attr("a", "value", KIndex("i", 0)), Attr("a", "value", KIndex("i", 1))),
        Compare("=", Attr("b", "levelIncreased"), Literal(True)),
    ]
    assert conjuncts(q.where)[1].right.value is True


def test_limecep_query3_parameters():
    q = parse_query(LIME_Q3)
    assert [v.name for v in event_vars(q.pattern)] == ["a", "b", "c"]
    assert event_vars(q.pattern)[1].kleene
    assert window_length(q.within) == 30
    c1, c2, c3 = conjuncts(q.where)
    assert c1 == Compare(">", Attr("a", "percentage"), Param("thresholdGas"))
    assert c2 == Compare(">", Attr("b", "temperature", KIndex("i", 1)),
                         Attr("b", "temperature", KIndex("i", 0)))
    assert c3 == Compare(">=", Attr("c", "percentage"), Param("thresholdSmoke"))


def test_limecep_evaluation_queries():
    q4, q5, q6 = (parse_query(t) for t in (LIME_Q4, LIME_Q5, LIME_Q6))
    assert q4.within.amount == Param("W") and q4.where is None
    assert flags(q5) == [("A", "a", False, False), ("B", "b", True, False),
                         ("C", "c", False, False)]
    assert flags(q6) == [("A", "a", True, False), ("B", "b", True, False),
                         ("C", "c", False, False)]
    ex = parse_query(LIME_EXAMPLE)
    assert flags(ex) == [(None, "A", False, False), (None, "B", True, False),
                         (None, "C", False, False)]
    assert window_length(ex.within) == 10


# ------------------------------------------------------------ VLDB 2018 (Kolchinsky & Schuster)

# Kolchinsky & Schuster, VLDB 2018, section 2.1, the "four cameras" pattern. The paper's line
# break duplicates '=' ("=\n\n=c.vehicleID") and the sentence ends in '.': extraction damage.
VLDB_FOUR_CAMERAS = ("PATTERN SEQ(A a,B b,C c,D d)WHERE(a.vehicleID=b.vehicleID="
                     "c.vehicleID=d.vehicleID)WITHIN W")

# VLDB 2018, the ZStream example next to Figure 2; final '.' dropped.
VLDB_ZSTREAM = "PATTERN SEQ(A a,B b,C c)WHERE(a.x=c.x) WITHIN W"

# VLDB 2018, section 6 (a conjunction pattern of size 3); final '.' dropped.
VLDB_CONJUNCTION = ("PATTERN AND(MSFTStock m, GOOGStock g, INTCStock i)WHERE "
                    "(m.difference < g.difference)WITHIN 20 minutes")


def test_vldb_four_cameras_chained_equality():
    q = parse_query(VLDB_FOUR_CAMERAS)
    assert [v.type for v in event_vars(q.pattern)] == ["A", "B", "C", "D"]
    assert q.within.amount == Param("W") and unit_of(q.within) == 1.0
    assert isinstance(q.where, BoolAnd)
    assert q.where.items == (
        Compare("=", Attr("a", "vehicleID"), Attr("b", "vehicleID")),
        Compare("=", Attr("b", "vehicleID"), Attr("c", "vehicleID")),
        Compare("=", Attr("c", "vehicleID"), Attr("d", "vehicleID")),
    )


def test_vldb_zstream_example():
    q = parse_query(VLDB_ZSTREAM)
    assert q.where == Compare("=", Attr("a", "x"), Attr("c", "x"))


def test_vldb_conjunction_with_variable_named_i():
    q = parse_query(VLDB_CONJUNCTION)
    assert isinstance(q.pattern, And)
    assert q.pattern.children == (EventVar("MSFTStock", "m"), EventVar("GOOGStock", "g"),
                                  EventVar("INTCStock", "i"))
    assert q.where == Compare("<", Attr("m", "difference"), Attr("g", "difference"))
    assert window_length(q.within) == 1200


# VLDB 2018, section 4, "Kleene closure patterns" (the unary operators NOT and KL are defined
# in section 2.1); the sentence goes on after the query (", the pattern to be utilized ..."):
# the ',' is dropped.
VLDB_KLEENE = "PATTERN AND(A a,KL(B b),C c)WHERE (true ) WITHIN 10 seconds"

# VLDB 2018, section 4, "Negation patterns": the pattern SEQ(A,NOT(B),C,D), printed without
# variables or clauses. As a query it needs a window; with names only, A..D are untyped
# variables in raycep (as in LimeCEP's "SEQ(A, B+, C)"), so the typed form is tested as well.
VLDB_NEGATION = "SEQ(A,NOT(B),C,D)"


def engine_keys(query, events):
    engine = Engine()
    engine.add_query(query, name="q")
    out = []
    for ev in events:
        out += engine.process(ev)
    out += engine.advance(float("inf"))
    return [m.key() for m in out]


def stream(types: str, step: float = 2.0) -> list:
    return [Event(t, i * step, {"x": i % 3}, id=f"e{i:02d}") for i, t in enumerate(types)]


def test_vldb_kleene_closure_and_true_condition_run():
    q = parse_query(VLDB_KLEENE)
    assert isinstance(q.pattern, And)
    assert flags(q) == [("A", "a", False, False), ("B", "b", True, False),
                        ("C", "c", False, False)]
    assert q.where == Literal(True) and window_length(q.within) == 10
    # the same query as the SASE+ notation
    assert q == parse_query("PATTERN AND(A a, B+ b[], C c) WHERE true WITHIN 10 seconds")
    events = stream("ABBCABCBACBBAC")
    keys = engine_keys(q, events)
    assert len(keys) == len(set(keys)) > 0
    assert set(keys) == oracle_matches(q, events)
    # WHERE false matches nothing; true combined with a comparison is that comparison
    assert engine_keys(parse_query(VLDB_KLEENE.replace("true", "false")), events) == []
    filtered = parse_query(VLDB_KLEENE.replace("(true )", "(true AND a.x = 0)"))
    assert set(engine_keys(filtered, events)) == oracle_matches(filtered, events) == \
        {k for k in keys if dict(k)["a"] in ("e00", "e12")}


def test_vldb_negation_operator_runs():
    q = parse_query(f"PATTERN {VLDB_NEGATION} WITHIN 10 seconds")
    assert flags(q) == [(None, "A", False, False), (None, "B", False, True),
                        (None, "C", False, False), (None, "D", False, False)]
    typed = parse_query("PATTERN SEQ(A a,NOT(B b),C c,D d) WHERE (true) WITHIN 10 seconds")
    assert typed == parse_query("PATTERN SEQ(A a, ~B b, C c, D d) WHERE true "
                                "WITHIN 10 seconds")
    events = stream("ACDABCDACBDCD")
    for query in (q, typed):
        keys = engine_keys(query, events)
        assert len(keys) == len(set(keys))
        assert set(keys) == oracle_matches(query, events)
    # B between a and c rules a match out: (e03 A, e05 C) has e04 B between them
    typed_keys = set(engine_keys(typed, events))
    assert typed_keys and not any(dict(k)["a"] == "e03" and dict(k)["c"] == "e05"
                                  for k in typed_keys)
