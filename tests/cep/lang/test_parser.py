"""The query parser: every construct of the grammar (docs/language.md), normalisations and error positions."""
import pytest

from raycep.cep.errors import QuerySyntaxError, QueryValidationError
from raycep.cep.lang.ast import (Aggregate, And, Attr, BinOp, BoolAnd, BoolNot, BoolOr, Compare,
                                 Duration, EventVar, KIndex, Len, Literal, Neg, Or, Param, Seq,
                                 event_vars, walk_expr, walk_pattern)
from raycep.cep.lang.parser import parse_queries, parse_query, tokenize

HEAD = "PATTERN SEQ(A a, B+ b[], C c, ~N n)"


def where(cond):
    """The WHERE expression of a query over a, b[] (Kleene), c and the negated n."""
    return parse_query(f"{HEAD} WHERE {cond} WITHIN 5 seconds").where


def pattern(p):
    return parse_query(f"PATTERN {p} WITHIN 1 s").pattern


def syntax_error(text):
    with pytest.raises(QuerySyntaxError) as info:
        parse_query(text)
    return info.value


def caret_char(err, text):
    """The source character the caret excerpt points at (checks excerpt and line/column)."""
    src, caret = err.excerpt.split("\n")
    col = caret.index("^") - 1            # excerpt lines are indented by two spaces
    assert src[2:] == text.splitlines()[err.line - 1]
    assert col == err.column
    return src[2:][col - 1] if col - 1 < len(src) - 2 else ""


# --------------------------------------------------------------------------- patterns

def test_operators_and_nesting():
    p = pattern("SEQ(A a, AND(B b, OR(C c, D d)), E e)")
    assert p == Seq((EventVar("A", "a"),
                     And((EventVar("B", "b"), Or((EventVar("C", "c"), EventVar("D", "d"))))),
                     EventVar("E", "e")))


def test_operator_keywords_case_insensitive_and_space_before_paren():
    assert pattern("seq (A a, and ( B b ), Or(C c))") == \
        Seq((EventVar("A", "a"), And((EventVar("B", "b"),)), Or((EventVar("C", "c"),))))


def test_single_child_operator_and_single_leaf_pattern():
    assert pattern("SEQ(A a)") == Seq((EventVar("A", "a"),))
    assert pattern("A a") == EventVar("A", "a")
    assert pattern("a") == EventVar(None, "a")


@pytest.mark.parametrize("leaf, expected", [
    ("A a", EventVar("A", "a")),
    ("A+ a[]", EventVar("A", "a", kleene=True)),
    ("A+ a[ ]", EventVar("A", "a", kleene=True)),
    ("A + a [ ]", EventVar("A", "a", kleene=True)),
    ("A[] a+", EventVar("A", "a", kleene=True)),
    ("a", EventVar(None, "a")),
    ("a+", EventVar(None, "a", kleene=True)),
])
def test_positive_leaf_forms(leaf, expected):
    assert pattern(f"SEQ(X x, {leaf})").children[1] == expected


@pytest.mark.parametrize("leaf", ["~N n", "!N n", "~(N n)", "!(N n)", "\u223cN n",
                                  "\u223c(N n)", "~ ( N n )"])
def test_negated_leaf_forms(leaf):
    assert pattern(f"SEQ(X x, {leaf})").children[1] == EventVar("N", "n", negated=True)


def test_untyped_negation_and_types_named_like_keywords():
    assert pattern("SEQ(x, ~n)").children[1] == EventVar(None, "n", negated=True)
    # operator keywords are contextual: a type may be called Seq/And/Or
    assert pattern("SEQ(Seq s, And a, Or o)") == \
        Seq((EventVar("Seq", "s"), EventVar("And", "a"), EventVar("Or", "o")))


@pytest.mark.parametrize("leaf, expected", [
    ("KL(B b)", EventVar("B", "b", kleene=True)),
    ("kl ( B b )", EventVar("B", "b", kleene=True)),
    ("KL(b)", EventVar(None, "b", kleene=True)),
    ("NOT(B b)", EventVar("B", "b", negated=True)),
    ("not(b)", EventVar(None, "b", negated=True)),
])
def test_vldb_unary_operators(leaf, expected):
    """Kolchinsky & Schuster, VLDB 2018, 2.1: KL(...) is the Kleene closure, NOT(...) negation."""
    assert pattern(f"SEQ(X x, {leaf}, Y y)").children[1] == expected
    # the same AST as the SASE+ forms, position at the operator
    q = parse_query(f"PATTERN SEQ(X x, {leaf}, Y y) WITHIN 1 s")
    assert q.pattern.children[1].pos == (1, len("PATTERN SEQ(X x, ") + 1)
    # KL / NOT stay contextual: a type may be called KL or NOT
    assert pattern("SEQ(KL k, NOT n)").children == (EventVar("KL", "k"), EventVar("NOT", "n"))


@pytest.mark.parametrize("leaf, message, char", [
    ("KL(SEQ(B b))", r"KL\(\.\.\.\) applies to one event variable", "S"),
    ("NOT(AND(B b, C c))", r"NOT\(\.\.\.\) applies to one event variable", "A"),
    ("KL(B+ b[])", "KL\\(...\\) of a Kleene variable: write 'KL\\(B b\\)'", "B"),
    ("NOT(~B b)", "NOT\\(...\\) of a negated variable", "~"),
    ("KL(B b C c)", r"expected '\)' \(end of KL\(\.\.\.\)\) but found 'C'", "C"),
])
def test_vldb_unary_operator_errors(leaf, message, char):
    text = f"PATTERN SEQ(X x, {leaf}) WITHIN 1 s"
    with pytest.raises(QuerySyntaxError, match=message) as info:
        parse_query(text)
    assert caret_char(info.value, text) == char


def test_vldb_negated_kleene_is_a_validation_error():
    with pytest.raises(QueryValidationError, match="cannot be a Kleene variable"):
        parse_query("PATTERN SEQ(X x, KL(NOT(B b)), Y y) WITHIN 1 s")


def test_identifiers_are_case_sensitive():
    vs = event_vars(pattern("SEQ(Stock s, stock S)"))
    assert [(v.type, v.name) for v in vs] == [("Stock", "s"), ("stock", "S")]


def test_pattern_positions():
    q = parse_query("PATTERN SEQ(A a,\n  ~(B b), C+ c[])\nWITHIN 5 s")
    seq_node = q.pattern
    assert seq_node.pos == (1, 9)
    a, b, c = seq_node.children
    assert (a.pos, b.pos, c.pos) == ((1, 13), (2, 3), (2, 11))
    assert all(n.pos is not None for n in walk_pattern(q.pattern))


# --------------------------------------------------------------------------- attributes

@pytest.mark.parametrize("text, expected", [
    ("a.price", Attr("a", "price")),
    ("b.price", Attr("b", "price")),
    ("b[i].x", Attr("b", "x", KIndex("i", 0))),
    ("b[i-1].x", Attr("b", "x", KIndex("i", -1))),
    ("b[ i - 1 ].x", Attr("b", "x", KIndex("i", -1))),
    ("b[i+1].x", Attr("b", "x", KIndex("i", 1))),
    ("b[1].x", Attr("b", "x", KIndex("first", 0))),
    ("b[2].x", Attr("b", "x", KIndex("first", 1))),
    ("b[b.LEN].x", Attr("b", "x", KIndex("last", 0))),
    ("b[b.len].x", Attr("b", "x", KIndex("last", 0))),
    ("b[b.LEN-1].x", Attr("b", "x", KIndex("last", -1))),
    ("FIRST(b.x)", Attr("b", "x", KIndex("first", 0))),
    ("FIRST(b).x", Attr("b", "x", KIndex("first", 0))),
    ("first(b.x)", Attr("b", "x", KIndex("first", 0))),
    ("LAST(b.x)", Attr("b", "x", KIndex("last", 0))),
    ("LAST(b).x", Attr("b", "x", KIndex("last", 0))),
    ("NEXT(b.x)", Attr("b", "x", KIndex("i", 1))),
    ("NEXT(b).x", Attr("b", "x", KIndex("i", 1))),
    ("b.LEN", Len("b")),
    ("b.len", Len("b")),
    ("a.type", Attr("a", "type")),
    ("b[1].from", Attr("b", "from", KIndex("first", 0))),
])
def test_attribute_and_index_forms(text, expected):
    assert where(f"{text} = 1").left == expected


@pytest.mark.parametrize("text, expected", [
    ("avg(b[..i-1].price)", Aggregate("avg", "b", "price", KIndex("i", -1))),
    ("avg(b.price)", Aggregate("avg", "b", "price", None)),
    ("avg(b[].price)", Aggregate("avg", "b", "price", None)),
    ("AVG(b[ ].price)", Aggregate("avg", "b", "price", None)),
    ("sum(b.v)", Aggregate("sum", "b", "v", None)),
    ("Min(b.v)", Aggregate("min", "b", "v", None)),
    ("MAX(b[..i].v)", Aggregate("max", "b", "v", KIndex("i", 0))),
    ("max(b[..b.LEN-1].v)", Aggregate("max", "b", "v", KIndex("last", -1))),
    ("count(b)", Aggregate("count", "b", None, None)),
    ("count(b[])", Aggregate("count", "b", None, None)),
    ("count(b[..i-1])", Aggregate("count", "b", None, KIndex("i", -1))),
])
def test_aggregate_forms(text, expected):
    assert where(f"{text} > 0").left == expected


def test_variable_named_i_is_only_special_inside_brackets():
    q = parse_query("PATTERN AND(A i, B+ b[]) WHERE i.x < b[i].x WITHIN 1 s")
    assert q.where == Compare("<", Attr("i", "x"), Attr("b", "x", KIndex("i", 0)))


def test_bare_identifier_is_a_parameter():
    assert where("a.x > thresholdGas") == Compare(">", Attr("a", "x"), Param("thresholdGas"))


# --------------------------------------------------------------------------- literals

@pytest.mark.parametrize("text, value", [
    ("42", 42), ("3.5", 3.5), ("1e3", 1000.0), ("2.5E-1", 0.25), ("80%", 0.8), ("5%", 0.05),
    ("'abc'", "abc"), ('"abc"', "abc"), (r"'it\'s'", "it's"), (r'"say \"hi\""', 'say "hi"'),
    (r"'a\\b'", "a\\b"), (r"'tab\there'", "tab\there"), ("'a;b'", "a;b"), ("''", ""),
    ("true", True), ("FALSE", False), ("True", True), ("-7", -7), ("-2.5", -2.5),
])
def test_literals(text, value):
    lit = where(f"a.x = {text}").right
    assert isinstance(lit, Literal)
    assert lit.value == value and type(lit.value) is type(value)


def test_unary_minus_on_expression_is_neg():
    assert where("a.x = -a.y").right == Neg(Attr("a", "y"))
    assert where("a.x = - -3").right == Literal(3)


def test_percent_times_attribute():
    assert where("a.x < 80%*b[b.LEN].v").right == \
        BinOp("*", Literal(0.8), Attr("b", "v", KIndex("last", 0)))


# --------------------------------------------------------------------------- operators

def test_arithmetic_precedence_and_associativity():
    assert where("a.x = 1 + 2 * 3").right == \
        BinOp("+", Literal(1), BinOp("*", Literal(2), Literal(3)))
    assert where("a.x = (1 + 2) * 3").right == \
        BinOp("*", BinOp("+", Literal(1), Literal(2)), Literal(3))
    assert where("a.x = 8 - 4 - 2").right == \
        BinOp("-", BinOp("-", Literal(8), Literal(4)), Literal(2))
    assert where("a.x = 8 / 4 * 2").right == \
        BinOp("*", BinOp("/", Literal(8), Literal(4)), Literal(2))


@pytest.mark.parametrize("op, norm", [("=", "="), ("==", "="), ("!=", "!="), ("<>", "!="),
                                      ("<", "<"), ("<=", "<="), (">", ">"), (">=", ">=")])
def test_comparison_operators_normalised(op, norm):
    assert where(f"a.x {op} c.x") == Compare(norm, Attr("a", "x"), Attr("c", "x"))


def test_boolean_precedence_or_and_not():
    x, y, z = (Compare(">", Attr(v, "x"), Literal(0)) for v in "acb")
    assert where("a.x > 0 or c.x > 0 and b.x > 0") == BoolOr((x, BoolAnd((y, z))))
    assert where("(a.x > 0 or c.x > 0) and b.x > 0") == BoolAnd((BoolOr((x, y)), z))
    assert where("not a.x > 0 and c.x > 0") == BoolAnd((BoolNot(x), y))
    assert where("NOT (a.x > 0 OR c.x > 0)") == BoolNot(BoolOr((x, y)))
    assert where("a.x > 0 && c.x > 0 || b.x > 0") == BoolOr((BoolAnd((x, y)), z))
    assert where("!(a.x > 0)") == BoolNot(x)


def test_nested_and_or_are_flattened():
    x, y, z = (Compare(">", Attr(v, "x"), Literal(0)) for v in "acb")
    assert where("(a.x > 0 AND c.x > 0) AND b.x > 0") == BoolAnd((x, y, z))
    assert where("a.x > 0 OR (c.x > 0 OR b.x > 0)") == BoolOr((x, y, z))


def test_chained_comparisons():
    ax, bx, cx = Attr("a", "x"), Attr("b", "x"), Attr("c", "x")
    assert where("a.x = b.x = c.x") == BoolAnd((Compare("=", ax, bx), Compare("=", bx, cx)))
    assert where("a.x < b.x <= c.x") == BoolAnd((Compare("<", ax, bx), Compare("<=", bx, cx)))
    # a chain inside AND is flattened into the top-level conjuncts
    w = where("a.x == b.x == c.x AND a.y > 1")
    assert isinstance(w, BoolAnd) and len(w.items) == 3


@pytest.mark.parametrize("cond, expected", [
    ("true", Literal(True)), ("(true)", Literal(True)), ("a.flag", Attr("a", "flag")),
    ("not a.flag", BoolNot(Attr("a", "flag"))),
])
def test_bare_boolean_terms(cond, expected):
    assert where(cond) == expected


def test_expression_positions():
    q = parse_query("PATTERN SEQ(A a, B b)\nWHERE a.x + 1 > b.x\n  AND NOT b.y = 'z'\nWITHIN 5 s")
    c1, c2 = q.where.items
    assert c1.pos == (2, 7) and c1.left.pos == (2, 7) and c1.left.right.pos == (2, 13)
    assert c1.right.pos == (2, 17)
    assert c2.pos == (3, 7) and c2.item.pos == (3, 11) and c2.item.right.pos == (3, 17)
    assert q.within.pos == (4, 8) and q.within.amount.pos == (4, 8)
    assert all(n.pos is not None for n in walk_expr(q.where))


# --------------------------------------------------------------------------- equivalence

def test_equivalence_removed_from_where():
    q = parse_query(f"{HEAD} WHERE [symbol] AND a.price < c.price WITHIN 5 s")
    assert q.equivalence == ("symbol",)
    assert q.where == Compare("<", Attr("a", "price"), Attr("c", "price"))


def test_several_equivalence_tests_deduplicated_in_order():
    q = parse_query(f"{HEAD} WHERE a.x > 1 AND [k, symbol] AND [symbol] AND [z] WITHIN 5 s")
    assert q.equivalence == ("k", "symbol", "z")
    assert q.where == Compare(">", Attr("a", "x"), Literal(1))


def test_only_equivalence_leaves_no_where():
    q = parse_query(f"{HEAD} WHERE [symbol] WITHIN 5 s")
    assert q.where is None and q.equivalence == ("symbol",)
    q = parse_query(f"{HEAD} WHERE skip_till_next_match(a, b[ ], c) {{ [symbol] }} WITHIN 5 s")
    assert q.where is None and q.equivalence == ("symbol",)


@pytest.mark.parametrize("cond", ["[symbol] OR a.x > 1", "NOT [symbol]",
                                  "a.x > 1 AND (c.x > 1 OR [symbol])", "[symbol] = 1"])
def test_nested_equivalence_rejected(cond):
    with pytest.raises(QueryValidationError, match=r"\[symbol\].*top-level conjunct"):
        where(cond)


# --------------------------------------------------------------------------- clauses

@pytest.mark.parametrize("text, amount, unit", [
    ("30 minutes", 30, 60.0), ("1 minute", 1, 60.0), ("2 min", 2, 60.0),
    ("12 hours", 12, 3600.0), ("1 hour", 1, 3600.0), ("3 h", 3, 3600.0),
    ("2 days", 2, 86400.0), ("1 day", 1, 86400.0), ("1 d", 1, 86400.0),
    ("60 seconds", 60, 1.0), ("1 second", 1, 1.0), ("5 sec", 5, 1.0), ("5s", 5, 1.0),
    ("5", 5, 1.0), ("250 ms", 250, 0.001), ("250 milliseconds", 250, 0.001),
    ("1.5 Hours", 1.5, 3600.0), ("10 MINUTES", 10, 60.0),
])
def test_durations(text, amount, unit):
    q = parse_query(f"PATTERN A a WITHIN {text}")
    assert q.within == Duration(Literal(amount), unit)


def test_parameter_windows():
    assert parse_query("PATTERN A a WITHIN W").within == Duration(Param("W"), 1.0)
    assert parse_query("PATTERN A a WITHIN W minutes SLIDE S").within == Duration(Param("W"), 60.0)
    assert parse_query("PATTERN A a WITHIN W SLIDE S").slide == Duration(Param("S"), 1.0)


def test_clause_order_after_where_may_vary():
    a = parse_query("PATTERN A a WHERE a.x > 1 WITHIN 1 hour SLIDE 1 minute "
                    "STRATEGY strict_contiguity")
    b = parse_query("PATTERN A a WHERE a.x > 1 STRATEGY strict_contiguity SLIDE 1 minute "
                    "WITHIN 1 hour")
    assert a == b
    assert a.strategy == "strict_contiguity" and a.slide == Duration(Literal(1), 60.0)


def test_keywords_case_insensitive():
    q = parse_query("pattern seq(Stock s, Stock t) where s.price < t.price AND not s.x "
                    "within 5 Minutes slide 1 MINUTE strategy SKIP_TILL_NEXT_MATCH")
    assert q.strategy == "skip_till_next_match"
    unit = q.within.unit_seconds
    assert isinstance(q.where, BoolAnd) and unit == 60.0


def test_strategy_forms():
    base = "PATTERN SEQ(A a, B b) "
    assert parse_query(base + "WITHIN 5 s").strategy == "skip_till_any_match"
    assert parse_query(base + "WITHIN 5 s STRATEGY partition_contiguity").strategy == \
        "partition_contiguity"
    q = parse_query(base + "WHERE strict_contiguity(a, b) { a.x = b.x } WITHIN 5 s")
    assert q.strategy == "strict_contiguity"
    assert q.where == Compare("=", Attr("a", "x"), Attr("b", "x"))
    q = parse_query(base + "WHERE skip_till_next_match() { } WITHIN 5 s "
                    "STRATEGY skip_till_next_match")
    assert q.strategy == "skip_till_next_match" and q.where is None


def test_strategy_conflict_and_unknown():
    with pytest.raises(QueryValidationError, match="conflicting selection strategies") as info:
        parse_query("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b) { a.x = b.x }\n"
                    "WITHIN 5 s STRATEGY strict_contiguity")
    assert (info.value.line, info.value.column) == (2, 12)
    with pytest.raises(QueryValidationError, match="unknown selection strategy 'fastest'"):
        parse_query("PATTERN SEQ(A a, B b) WITHIN 5 s STRATEGY fastest")
    with pytest.raises(QueryValidationError, match="unknown selection strategy 'skip_till_x'"):
        parse_query("PATTERN SEQ(A a, B b) WHERE skip_till_x(a, b) { a.x = b.x } WITHIN 5 s")


def test_strategy_argument_list_is_checked():
    with pytest.raises(QueryValidationError, match="variable 'z' in the strategy argument list"):
        parse_query("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, z) { true } WITHIN 5 s")
    with pytest.raises(QueryValidationError, match="'a' is not a Kleene variable"):
        parse_query("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a[ ], b) { true } "
                    "WITHIN 5 s")


def test_comments():
    q = parse_query("-- leading comment\nPATTERN /* the pattern */ SEQ(A a, -- first\n"
                    "  B b) /* multi\n line\n comment */ WHERE a.x -- trailing\n < b.x\n"
                    "WITHIN 5 s -- done")
    assert q.where == Compare("<", Attr("a", "x"), Attr("b", "x"))
    assert q.where.pos == (5, 19)
    assert q.pattern.children[1].pos == (3, 3)


def test_trailing_semicolon_and_text():
    text = "PATTERN A a WITHIN 5 s;"
    q = parse_query(text)
    assert q.text == text and q.name is None


def test_name_prefix_in_single_query():
    assert parse_query("NAME rise PATTERN A a WITHIN 5 s").name == "rise"


def test_tokenizer_kinds_and_positions():
    toks = tokenize("a.x >= 80% -- c\n 'q'")
    assert [(t.kind, t.value, t.line, t.col) for t in toks] == [
        ("ident", "a", 1, 1), ("op", ".", 1, 2), ("ident", "x", 1, 3), ("op", ">=", 1, 5),
        ("number", 0.8, 1, 8), ("string", "q", 2, 2), ("eof", None, 2, 5)]


# --------------------------------------------------------------------------- parse_queries

FILE = """-- two named queries and an unnamed one
NAME rise PATTERN SEQ(Stock a, Stock b)
WHERE a.price < b.price AND a.note != 'x;y' /* ; */
WITHIN 5 minutes;

PATTERN SEQ(Stock a, Stock b) WHERE a.tag = "-- not a comment;" WITHIN 1 s;
NAME fall
PATTERN SEQ(Stock a, Stock b) WHERE a.price > b.price WITHIN 5 minutes
;;
"""


def test_parse_queries_names_and_semicolons_in_strings():
    qs = parse_queries(FILE)
    assert [q.name for q in qs] == ["rise", "q2", "fall"]
    assert qs[0].where.items[1] == Compare("!=", Attr("a", "note"), Literal("x;y"))
    assert qs[1].where.right == Literal("-- not a comment;")
    assert qs[2].where == Compare(">", Attr("a", "price"), Attr("b", "price"))
    assert qs[1].text == ('PATTERN SEQ(Stock a, Stock b) WHERE a.tag = "-- not a comment;" '
                          'WITHIN 1 s')
    assert qs[0].text.startswith("NAME rise PATTERN") and qs[0].text.endswith("5 minutes")
    # node positions are relative to each query's own text
    assert qs[1].pattern.pos == (1, 9)
    assert qs[2].where.pos == (2, 37)


def test_parse_queries_equals_parse_query():
    qs = parse_queries("PATTERN A a WITHIN 1 s; PATTERN B b WITHIN 2 s")
    assert qs[0] == parse_query("NAME q1 PATTERN A a WITHIN 1 s")
    assert qs[1].within == Duration(Literal(2), 1.0)


def test_parse_queries_duplicate_names():
    with pytest.raises(QueryValidationError, match="query name 'x' is used twice") as info:
        parse_queries("NAME x PATTERN A a WITHIN 1 s;\nNAME x PATTERN B b WITHIN 1 s")
    assert (info.value.line, info.value.column) == (2, 6)
    with pytest.raises(QueryValidationError, match="'q2' is used twice"):
        parse_queries("NAME q2 PATTERN A a WITHIN 1 s; PATTERN B b WITHIN 1 s")


def test_parse_queries_errors_report_file_positions():
    text = "PATTERN A a WITHIN 1 s;\nPATTERN SEQ(A a, B b)\n  WHERE a.x > q.y WITHIN 1 s"
    with pytest.raises(QueryValidationError, match="'q' is not declared") as info:
        parse_queries(text)
    assert (info.value.line, info.value.column) == (3, 15)
    assert caret_char(info.value, text) == "q"
    text = "PATTERN A a WITHIN 1 s;  PATTERN SEQ(A a, B b WITHIN 1 s"
    err = pytest.raises(QuerySyntaxError, parse_queries, text).value
    assert (err.line, err.column) == (1, 47)
    assert "expected ',' or ')' but found 'WITHIN'" in str(err)
    text = "PATTERN A a WITHIN 1 s;\nPATTERN SEQ(A a, B b)  WHERE a.x > b.x;"
    err = pytest.raises(QueryValidationError, parse_queries, text).value
    assert "query 2" in str(err) and "missing WITHIN" in str(err)


def test_parse_queries_empty_and_single_query_rejects_two():
    with pytest.raises(QuerySyntaxError, match="expected PATTERN but found end of input"):
        parse_queries(" -- nothing here\n ;")
    err = syntax_error("PATTERN A a WITHIN 1 s; PATTERN B b WITHIN 1 s")
    assert (err.line, err.column) == (1, 25) and "end of input" in err.reason


# --------------------------------------------------------------------------- syntax errors

@pytest.mark.parametrize("text, line, col, char, message", [
    ("PATTERN SEQ(A a, B b WHERE a.x > 1 WITHIN 5 s", 1, 22, "W",
     "expected ',' or ')' but found 'WHERE'"),
    ("PATTERN SEQ(A a) WHERE (a.x > 1 WITHIN 5 s", 1, 33, "W",
     "expected ')' but found 'WITHIN'"),
    ("PATTERN SEQ(A a)\nWHERE a.x >\n  WITHIN 5 s", 3, 3, "W",
     "expected an expression but found 'WITHIN'"),
    ("PATTERN SEQ(A a)\n  WHERE a.x > 'oops\nWITHIN 5 s", 2, 15, "'", "unterminated string"),
    ("PATTERN SEQ(A a) /* never\nclosed", 1, 18, "/", "unterminated comment"),
    ("PATTERN SEQ(A a)\n WHERE a.x # 2", 2, 12, "#", "unexpected character '#'"),
    ("PATTERN SEQ(A a) WITHIN 5 fortnights", 1, 27, "f", "unknown time unit 'fortnights'"),
    ("SEQ(A a) WITHIN 5 s", 1, 1, "S", "expected PATTERN but found 'SEQ'"),
    ("PATTERN SEQ() WITHIN 5 s", 1, 13, ")", "expected an event variable"),
    ("PATTERN SEQ(A a,) WITHIN 5 s", 1, 17, ")", "expected an event variable"),
    ("PATTERN SEQ(A a[]) WITHIN 5 s", 1, 16, "[", "'[]' marks a Kleene variable: write 'A+ a[]'"),
    ("PATTERN SEQ(A+ a[) WITHIN 5 s", 1, 18, ")", "expected ']'"),
    ("PATTERN SEQ(A a, B b) WHERE a.x > 1 b.y < 2 WITHIN 5 s", 1, 37, "b",
     "expected AND, OR, a comparison, WITHIN, SLIDE, STRATEGY, ';' or the end of the query"),
    ("PATTERN SEQ(A a, B+ b[])\nWHERE b[j].x > 1 WITHIN 5 s", 2, 9, "j", "expected an index"),
    ("PATTERN SEQ(A a, B+ b[]) WHERE b[0].x > 1 WITHIN 5 s", 1, 34, "0",
     "Kleene indices start at 1"),
    ("PATTERN SEQ(A a, B+ b[]) WHERE b[a.LEN].x > 1 WITHIN 5 s", 1, 34, "a",
     "expected 'b.LEN'"),
    ("PATTERN SEQ(A a, B+ b[]) WHERE b[i].x > 1 WITHIN 5 s WITHIN 6 s", 1, 54, "W",
     "WITHIN is given twice"),
    ("PATTERN SEQ(A a) WHERE a.x > 'a\\qb' WITHIN 5 s", 1, 32, "\\", "unknown escape"),
    ("PATTERN SEQ(A a) WHERE a. > 1 WITHIN 5 s", 1, 27, ">", "expected an attribute name"),
    ("PATTERN SEQ(A a, ~SEQ(B b)) WITHIN 5 s", 1, 19, "S", "negation applies to one event"),
    ("PATTERN SEQ(A a, B+ b[]) WHERE avg(b[i].x) > 1 WITHIN 5 s", 1, 38, "i",
     "expected ']' or '..'"),
    ("PATTERN SEQ(A a) WHERE a.x > 1 WITHIN", 1, 38, "", "expected a duration after WITHIN"),
    ("PATTERN SEQ(A a) WHERE a.x > 1 WITHIN 5 s STRATEGY", 1, 51, "",
     "expected a strategy name"),
])
def test_syntax_errors(text, line, col, char, message):
    err = syntax_error(text)
    assert message in str(err)
    assert (err.line, err.column) == (line, col)
    assert caret_char(err, text) == char


def test_syntax_error_message_format():
    err = syntax_error("PATTERN SEQ(A a) WHERE (a.x > 1\nWHERE")
    assert err.reason == "expected ')' but found 'WHERE'"
    assert str(err).startswith("expected ')' but found 'WHERE' at line 2, column 1\n")
    assert err.excerpt == "  WHERE\n  ^"


def test_deep_nesting_is_a_syntax_error():
    text = "PATTERN A a WHERE " + "(" * 3000 + "a.x > 1" + ")" * 3000 + " WITHIN 5 s"
    err = syntax_error(text)
    assert "nested too deeply" in err.reason and err.line == 1


# --------------------------------------------------------------------------- property: layout

_KEYWORDS = {"pattern", "seq", "and", "or", "not", "where", "within", "slide", "strategy",
             "true", "false", "first", "last", "next", "avg", "len", "hour", "hours", "minutes",
             "seconds", "skip_till_next_match", "skip_till_any_match"}
_SAMPLES = [
    "PATTERN SEQ(Stock+ a[ ], Stock b) WHERE skip_till_next_match(a[ ], b) { [symbol] and "
    "a[1].volume > 1000 and a[i].price > avg(a[..i-1].price) and b.volume < 80%*a[a.LEN].volume"
    " } WITHIN 1 hour",
    "PATTERN SEQ (a, b+, c)WHERE [companyID] AND a.price < b.price AND b.price < NEXT(b.price) "
    "AND c.price < FIRST(b.price) WITHIN 30 minutes SLIDE 2 minutes",
    "PATTERN SEQ(A a, OR(B b, C c), ~(N n)) WHERE NOT (a.x = b.x = c.x) OR a.s != 'x y' "
    "WITHIN 12 seconds STRATEGY skip_till_any_match",
    "PATTERN SEQ(HR+ a[], SWEAT b) WHERE a[i].value < a[i+1].value AND b.ok == true "
    "AND -a.LEN <= 2 * (b.v - 1) / 3 WITHIN 5 minutes",
]


def _relayout(text, data):
    """Same tokens, random keyword case and random whitespace/comments between tokens."""
    from hypothesis import strategies as st
    gaps = st.sampled_from([" ", "  ", "\n", "\t", " /* c; 'x' */ ", " -- c; \"\n", "\n\n  "])
    out = []
    for tok in tokenize(text)[:-1]:
        word = tok.text
        if tok.kind == "ident" and word.lower() in _KEYWORDS:
            word = "".join(ch.upper() if data.draw(st.booleans()) else ch.lower() for ch in word)
        out.append(word)
        out.append(data.draw(gaps))
    return "".join(out)


def test_layout_and_keyword_case_do_not_change_the_ast():
    import hypothesis
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(st.sampled_from(_SAMPLES), st.data())
    def check(text, data):
        assert parse_query(_relayout(text, data)) == parse_query(text)

    check()


def test_a_digit_that_is_not_decimal_is_an_unexpected_character():
    """``str.isdigit`` holds for '²' but no number starts with it (the tokenizer read it as
    the start of a number and failed with AttributeError)."""
    with pytest.raises(QuerySyntaxError, match=r"unexpected character '²' at line 1, column 5"):
        tokenize("a < ²")
    assert [t.text for t in tokenize("x² < 1")][:1] == ["x²"]       # inside a name it is a letter
