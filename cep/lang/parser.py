"""Query text -> :class:`cep.lang.ast.Query`: a hand-written lexer and recursive-descent parser.

The grammar is the one of docs/language.md: SASE+ (SIGMOD 2008, Figure 1)
with the RCEP and LimeCEP variants (untyped leaves ``SEQ(a, b+, c)``, ``NEXT``/``FIRST``,
``SLIDE``, ``!Type var``) and VLDB 2018's unary operators ``KL(T e)``/``NOT(T e)``.
Keywords are case-insensitive and contextual (a type or variable may be called ``Seq``, ``KL``
or ``i``); identifiers are case-sensitive. Query text is data: it is never
handed to ``eval``/``exec``.

Normalisations the rest of the engine relies on (the builder produces the same):

* ``==`` -> ``=``, ``<>`` -> ``!=``; a chain ``a = b = c`` is ``BoolAnd`` of adjacent pairs;
* ``BoolAnd`` never directly contains a ``BoolAnd`` (same for ``BoolOr``): nested ones are
  flattened, so ``(x AND y) AND z`` is ``BoolAnd((x, y, z))``;
* unary minus on a number literal is folded: ``-5`` is ``Literal(-5)``;
* ``80%`` is ``Literal(0.8)``; a number without a unit in a duration means seconds;
* ``[attr]`` conjuncts are moved out of WHERE into ``Query.equivalence``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import NamedTuple

from raycep.cep.errors import QuerySyntaxError, QueryValidationError
from raycep.cep.lang.ast import (STRATEGIES, Aggregate, And, Attr, BinOp, BoolAnd, BoolNot, BoolOr,
                                 Compare, Duration, EventVar, KIndex, Len, Literal, Neg, Or, Param,
                                 Query, Seq, walk_expr)
from raycep.cep.lang.validate import check_strategy_vars, conjuncts, validate

__all__ = ["parse_query", "parse_queries", "tokenize", "Token", "UNITS"]

#: time units of WITHIN / SLIDE -> seconds (case-insensitive)
UNITS = {
    "ms": 0.001, "msec": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}

_CLAUSES = ("where", "within", "slide", "strategy")
# identifiers that cannot be a parameter name inside an expression
_RESERVED = frozenset(("and", "or", "not", "true", "false", "pattern") + _CLAUSES)
_INDEX_FUNCS = {"first": ("first", 0), "last": ("last", 0), "next": ("i", 1)}
_CMP = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_NEGATION_SIGNS = {"~": "~", "\u223c": "~", "!": "!"}   # U+223C TILDE OPERATOR (SASE+ paper)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}


# --------------------------------------------------------------------------- lexer

class Token(NamedTuple):
    """kind: 'ident' | 'number' | 'string' | 'op' | 'eof'; ``text`` is the source text.
    Immutable; a named tuple because building one costs a third of a frozen dataclass (a
    query file is tens of thousands of tokens)."""
    kind: str
    text: str
    value: object
    line: int
    col: int
    start: int
    end: int


#: one pattern for every token and everything between tokens, tried in this order at each
#: position (the order decides: ``--`` is a comment, not two minus signs; ``!`` before ``=``
#: is ``!=``); ``quote`` / ``open_comment`` / ``other`` are the errors. It matches
#: everywhere (``other`` takes any one character), so the matches cover the whole text.
_SCAN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<open_comment>/\*)
  | (?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<quote>['"])
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?%?)
  | (?P<ident>[^\W\d]\w*)
  | (?P<negation>[~\u223c]|!(?!=))
  | (?P<op>\.\.|==|!=|<>|<=|>=|&&|\|\||[()\[\]{},.;+\-*/=<>])
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def tokenize(text: str) -> list:
    """Split query text into tokens (comments and whitespace dropped), ending with 'eof'.

    One pass of ``_SCAN.finditer`` (the regular expression engine finds each token; Python
    looks at tokens, not characters); a string with a backslash, and the errors, go to
    ``_string`` for their escapes and messages."""
    toks: list = []
    append = toks.append
    line, line_start = 1, 0
    for m in _SCAN.finditer(text):
        kind = m.lastgroup
        i = m.start()
        if kind == "space" or kind == "comment":
            newlines = text.count("\n", i, m.end())
            if newlines:
                line += newlines
                line_start = text.rfind("\n", i, m.end()) + 1
            continue
        col = i - line_start + 1
        word = m.group()
        if kind == "ident":
            if word[0].isdigit():            # a digit that is not decimal (superscript two)
                raise QuerySyntaxError(f"unexpected character {word[0]!r}", text, line, col)
            append(Token("ident", word, word, line, col, i, m.end()))
        elif kind == "op":
            append(Token("op", word, word, line, col, i, m.end()))
        elif kind == "number":
            append(Token("number", word, _number(word, text, line, col), line, col, i,
                         m.end()))
        elif kind == "string":
            value = _string(text, i, line, line_start)[0] if "\\" in word else word[1:-1]
            append(Token("string", word, value, line, col, i, m.end()))
        elif kind == "quote":                   # no closing quote on the line: the error
            _string(text, i, line, line_start)
            raise QuerySyntaxError(f"unterminated string: no closing {word} on this line",
                                   text, line, col)
        elif kind == "negation":
            append(Token("op", word, _NEGATION_SIGNS[word], line, col, i, i + 1))
        elif kind == "open_comment":
            raise QuerySyntaxError("unterminated comment: '/*' has no closing '*/'",
                                   text, line, col)
        else:
            raise QuerySyntaxError(f"unexpected character {word!r}", text, line, col)
    if toks:
        last = toks[-1]
        eof_line, eof_col = last.line, last.col + len(last.text)
    else:
        eof_line, eof_col = 1, 1
    n = len(text)
    append(Token("eof", "", None, eof_line, eof_col, n, n))
    return toks


def _number(word: str, text: str, line: int, col: int):
    """The value of a number token (``80%`` is 0.8)."""
    body = word.rstrip("%")
    try:
        value = float(body) if ("." in body or "e" in body or "E" in body) else int(body)
        return value / 100 if word[-1] == "%" else value
    except (ValueError, OverflowError):     # more digits than int() reads
        shown = word if len(word) <= 20 else word[:20] + "..."
        raise QuerySyntaxError(f"number {shown} is out of range", text, line, col) from None


def _string(text, i, line, line_start):
    """Read the string literal starting at ``text[i]``; return (value, end offset)."""
    quote, j, out = text[i], i + 1, []
    while True:
        if j >= len(text) or text[j] == "\n":
            raise QuerySyntaxError(f"unterminated string: no closing {quote} on this line",
                                   text, line, i - line_start + 1)
        c = text[j]
        if c == quote:
            return "".join(out), j + 1
        if c == "\\":
            nxt = text[j + 1] if j + 1 < len(text) else ""
            if nxt not in _ESCAPES:
                raise QuerySyntaxError(f"unknown escape '\\{nxt}' in string", text, line,
                                       j - line_start + 1)
            out.append(_ESCAPES[nxt])
            j += 2
            continue
        out.append(c)
        j += 1


def _describe(tok: Token) -> str:
    return "end of input" if tok.kind == "eof" else repr(tok.text)


# --------------------------------------------------------------------------- parser

@dataclass(frozen=True)
class _Equiv:
    """``[attr, ...]`` while parsing; moved into Query.equivalence, never left in the AST."""
    attrs: tuple
    pos: tuple = dataclasses.field(default=None, compare=False)


def _pos(tok: Token) -> tuple:
    return (tok.line, tok.col)


def _flatten(cls, items) -> list:
    out = []
    for item in items:
        out.extend(item.items if isinstance(item, cls) else (item,))
    return out


class _Parser:
    """Recursive descent over a token list; every method consumes one grammar construct."""

    def __init__(self, text: str, tokens: list):
        self.text = text
        self.toks = tokens
        self.k = 0

    # ---- token helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.k]

    def ahead(self, n: int = 1) -> Token:
        return self.toks[min(self.k + n, len(self.toks) - 1)]

    def advance(self) -> Token:
        tok = self.toks[self.k]
        if tok.kind != "eof":
            self.k += 1
        return tok

    def is_op(self, *ops, tok: Token | None = None) -> bool:
        tok = tok or self.tok
        return tok.kind == "op" and tok.value in ops

    def is_kw(self, *words, tok: Token | None = None) -> bool:
        tok = tok or self.tok
        return tok.kind == "ident" and tok.value.lower() in words

    def error(self, message: str, tok: Token | None = None) -> QuerySyntaxError:
        tok = tok or self.tok
        return QuerySyntaxError(message, self.text, tok.line, tok.col)

    def expected(self, what: str, tok: Token | None = None) -> QuerySyntaxError:
        tok = tok or self.tok
        return self.error(f"expected {what} but found {_describe(tok)}", tok)

    def invalid(self, message: str, tok: Token) -> QueryValidationError:
        return QueryValidationError(message, self.text, tok.line, tok.col)

    def expect_op(self, op: str, what: str | None = None) -> Token:
        if not self.is_op(op):
            raise self.expected(what or repr(op))
        return self.advance()

    def expect_ident(self, what: str) -> Token:
        if self.tok.kind != "ident":
            raise self.expected(what)
        return self.advance()

    # ---- query
    def query(self) -> Query:
        """``[NAME n] PATTERN p [WHERE] [WITHIN] [SLIDE] [STRATEGY]``, clauses in any order."""
        name = None
        if self.is_kw("name"):
            self.advance()
            name = self.expect_ident("a query name after NAME").value
        if not self.is_kw("pattern"):
            raise self.expected("PATTERN")
        self.advance()
        pattern = self.pattern()
        seen: dict = {}
        where, equivalence, where_strategy = None, (), None
        within = slide = strategy = None
        last = None
        while self.is_kw(*_CLAUSES):
            kw_tok = self.advance()
            kw = kw_tok.value.lower()
            if kw in seen:
                raise self.error(f"{kw.upper()} is given twice", kw_tok)
            seen[kw] = kw_tok
            last = kw
            if kw == "where":
                where, equivalence, where_strategy = self.where(pattern)
            elif kw == "within":
                within = self.duration("WITHIN")
            elif kw == "slide":
                slide = self.duration("SLIDE")
            else:
                strategy = self.strategy_name(self.expect_ident("a strategy name after STRATEGY"))
        if not (self.is_op(";") or self.tok.kind == "eof"):
            remaining = [c.upper() for c in _CLAUSES if c not in seen]
            lead = "AND, OR, a comparison, " if last == "where" else ""
            options = ", ".join(remaining) + (", " if remaining else "")
            raise self.expected(f"{lead}{options}';' or the end of the query")
        if where_strategy and strategy and where_strategy != strategy:
            raise self.invalid(f"conflicting selection strategies: '{where_strategy}' in WHERE and "
                               f"'{strategy}' in STRATEGY", seen["strategy"])
        return Query(pattern=pattern, where=where, equivalence=equivalence, within=within,
                     slide=slide, strategy=strategy or where_strategy or STRATEGIES[0],
                     name=name, text=self.text)

    def parse_one(self) -> Query:
        """One query; deep nesting is a syntax error, not a RecursionError."""
        try:
            return self.query()
        except RecursionError:
            raise self.error("query nested too deeply") from None

    def strategy_name(self, tok: Token) -> str:
        low = tok.value.lower()
        if low not in STRATEGIES:
            raise self.invalid(f"unknown selection strategy {tok.value!r} "
                               f"(expected one of {', '.join(STRATEGIES)})", tok)
        return low

    def duration(self, clause: str) -> Duration:
        """``<number> [unit]`` or ``<param> [unit]``; no unit means seconds."""
        start = self.tok
        sign = 1
        if self.is_op("-"):
            self.advance()
            sign = -1
        tok = self.tok
        if tok.kind == "number":
            amount = Literal(sign * tok.value, pos=_pos(start))
        elif self.is_kw("inf", "infinity", "nan"):
            raise self.invalid(f"{clause} must be a finite number of seconds, "
                               f"not {'-' if sign < 0 else ''}{tok.value}", start)
        elif tok.kind == "ident" and not self.is_kw(*_CLAUSES) and sign == 1:
            amount = Param(tok.value, pos=_pos(tok))
        else:
            raise self.expected(f"a duration after {clause} (a number with a unit, or a parameter)")
        self.advance()
        unit = 1.0
        if self.tok.kind == "ident" and not self.is_kw(*_CLAUSES):
            u = self.advance()
            if u.value.lower() not in UNITS:
                raise self.error(f"unknown time unit {u.value!r} "
                                 "(expected seconds, minutes, hours, days or milliseconds)", u)
            unit = UNITS[u.value.lower()]
        return Duration(amount, unit, pos=_pos(start))

    # ---- pattern
    def pattern(self):
        tok = self.tok
        if self.is_kw("seq", "and", "or") and self.is_op("(", tok=self.ahead()):
            self.advance()
            self.advance()
            children = [self.pattern()]
            while self.is_op(","):
                self.advance()
                children.append(self.pattern())
            self.expect_op(")", "',' or ')'")
            cls = {"seq": Seq, "and": And, "or": Or}[tok.value.lower()]
            return cls(tuple(children), pos=_pos(tok))
        if self.is_kw("kl", "not") and self.is_op("(", tok=self.ahead()):
            return self.unary_operator()
        return self.leaf()

    def unary_operator(self) -> EventVar:
        """The notation of Kolchinsky & Schuster, VLDB 2018 (section 2.1): ``KL(T e)`` is the
        Kleene closure ``T+ e[]`` and ``NOT(T e)`` the negation ``~T e``; both apply to one
        event variable."""
        op = self.advance()
        name = op.value.upper()
        self.advance()
        inner = self.tok
        if self.is_kw("seq", "and", "or") and self.is_op("(", tok=self.ahead()):
            raise self.error(f"{name}(...) applies to one event variable ('{name}(Type var)'), "
                             f"not to {inner.value.upper()}(...)", inner)
        var = self.pattern()
        self.expect_op(")", f"')' (end of {name}(...))")
        if name == "KL":
            if var.kleene:
                raise self.error(f"KL(...) of a Kleene variable: write 'KL({var.type or ''}"
                                 f"{' ' if var.type else ''}{var.name})'", inner)
            return dataclasses.replace(var, kleene=True, pos=_pos(op))
        if var.negated:
            raise self.error("NOT(...) of a negated variable", inner)
        return dataclasses.replace(var, negated=True, pos=_pos(op))

    def leaf(self) -> EventVar:
        start = self.tok
        if self.is_op("~", "!"):
            self.advance()
            if self.is_op("("):
                self.advance()
                var = self.leaf_body(True, start)
                self.expect_op(")")
                return var
            return self.leaf_body(True, start)
        return self.leaf_body(False, start)

    def leaf_body(self, negated: bool, start: Token) -> EventVar:
        """``Type var``, ``Type+ var[]`` (``Type[] var+``), or an untyped ``var`` / ``var+``."""
        first = self.tok
        if negated and self.is_kw("seq", "and", "or") and self.is_op("(", tok=self.ahead()):
            raise self.error("negation applies to one event variable ('~Type var'), "
                             f"not to {first.value.upper()}(...)", first)
        if first.kind != "ident" or self.is_kw(*_CLAUSES):
            raise self.expected("an event variable ('Type var') or SEQ/AND/OR(...)")
        self.advance()
        if (self.is_op("[") and self.is_op("]", tok=self.ahead())
                and self.ahead(2).kind == "ident" and not self.is_kw(*_CLAUSES, tok=self.ahead(2))):
            self.advance()                   # LimeCEP's experiments write 'B[] b+'
            self.advance()
            name = self.advance().value
            self.expect_op("+", "'+' (a Kleene variable is 'Type+ var[]' or 'Type[] var+')")
            return EventVar(first.value, name, True, negated, pos=_pos(start))
        kleene = self.is_op("+")
        if kleene:
            self.advance()
        if self.tok.kind == "ident" and not self.is_kw(*_CLAUSES):
            type_, name = first.value, self.advance().value
        else:
            type_, name = None, first.value
        if self.is_op("["):
            bracket = self.advance()
            self.expect_op("]", "']' (a Kleene variable is declared as 'Type+ var[]')")
            if not kleene:
                decl = f"{type_}+ {name}[]" if type_ else f"{name}+"
                raise self.error(f"'[]' marks a Kleene variable: write '{decl}'", bracket)
        return EventVar(type_, name, kleene, negated, pos=_pos(start))

    # ---- WHERE
    def where(self, pattern):
        """Return (where, equivalence, strategy or None)."""
        tok, strategy = self.tok, None
        if tok.kind == "ident" and self.is_op("(", tok=self.ahead()) and self._call_then_brace():
            strategy = self.strategy_name(tok)
            self.advance()
            self.advance()
            args = []
            while not self.is_op(")"):
                if args:
                    self.expect_op(",", "',' or ')'")
                arg = self.expect_ident("a variable name")
                bracketed = self.is_op("[")
                if bracketed:
                    self.advance()
                    self.expect_op("]")
                args.append((arg.value, bracketed, _pos(arg)))
            self.advance()
            check_strategy_vars(pattern, args, self.text)
            self.expect_op("{")
            expr = None if self.is_op("}") else self.expr()
            self.expect_op("}", "'}' (end of the predicates)")
        else:
            expr = self.expr()
        where, equivalence = self.split_equivalence(expr)
        return where, equivalence, strategy

    def _call_then_brace(self) -> bool:
        """At ``name (``: is the matching ``)`` followed by ``{`` (SASE+ strategy form)?"""
        depth, j = 0, self.k + 1
        while j < len(self.toks) and self.toks[j].kind != "eof":
            if self.is_op("(", tok=self.toks[j]):
                depth += 1
            elif self.is_op(")", tok=self.toks[j]):
                depth -= 1
                if depth == 0:
                    return self.is_op("{", tok=self.ahead(j + 1 - self.k))
            j += 1
        return False

    def split_equivalence(self, expr):
        if expr is None:
            return None, ()
        attrs, rest = [], []
        for item in conjuncts(expr):
            if isinstance(item, _Equiv):
                attrs.extend(a for a in item.attrs if a not in attrs)
            else:
                rest.append(item)
        for item in rest:
            for node in walk_expr(item):
                if isinstance(node, _Equiv):
                    raise QueryValidationError(
                        f"equivalence test [{', '.join(node.attrs)}] must be a top-level conjunct "
                        "of WHERE (not under OR/NOT or inside a comparison)",
                        self.text, *node.pos)
        if not rest:
            return None, tuple(attrs)
        where = rest[0] if len(rest) == 1 else BoolAnd(tuple(rest), pos=rest[0].pos)
        return where, tuple(attrs)

    # ---- expressions: OR < AND < NOT < comparison < + - < * / < unary
    def expr(self):
        first = self.and_expr()
        items = [first]
        while self.is_kw("or") or self.is_op("||"):
            self.advance()
            items.append(self.and_expr())
        return first if len(items) == 1 else BoolOr(tuple(_flatten(BoolOr, items)), pos=first.pos)

    def and_expr(self):
        first = self.not_expr()
        items = [first]
        while self.is_kw("and") or self.is_op("&&"):
            self.advance()
            items.append(self.not_expr())
        if len(items) == 1:
            return first
        return BoolAnd(tuple(_flatten(BoolAnd, items)), pos=first.pos)

    def not_expr(self):
        if self.is_kw("not") or self.is_op("!"):
            tok = self.advance()
            return BoolNot(self.not_expr(), pos=_pos(tok))
        return self.comparison()

    def comparison(self):
        left = self.additive()
        pairs = []
        while self.tok.kind == "op" and self.tok.value in _CMP:
            op = _CMP[self.advance().value]
            right = self.additive()
            pairs.append(Compare(op, left, right, pos=left.pos))
            left = right
        if not pairs:
            return left
        return pairs[0] if len(pairs) == 1 else BoolAnd(tuple(pairs), pos=pairs[0].pos)

    def additive(self):
        left = self.term()
        while self.is_op("+", "-"):
            op = self.advance().value
            left = BinOp(op, left, self.term(), pos=left.pos)
        return left

    def term(self):
        left = self.unary()
        while self.is_op("*", "/"):
            op = self.advance().value
            left = BinOp(op, left, self.unary(), pos=left.pos)
        return left

    def unary(self):
        if self.is_op("-"):
            tok = self.advance()
            operand = self.unary()
            if (isinstance(operand, Literal) and isinstance(operand.value, (int, float))
                    and not isinstance(operand.value, bool)):
                return Literal(-operand.value, pos=_pos(tok))
            return Neg(operand, pos=_pos(tok))
        if self.is_op("+"):
            self.advance()
            return self.unary()
        return self.primary()

    def primary(self):
        tok = self.tok
        if tok.kind in ("number", "string"):
            self.advance()
            return Literal(tok.value, pos=_pos(tok))
        if self.is_op("("):
            self.advance()
            inner = self.expr()
            self.expect_op(")")
            return inner
        if self.is_op("["):
            return self.equivalence()
        if tok.kind != "ident":
            raise self.expected("an expression")
        low = tok.value.lower()
        if low in ("true", "false"):
            self.advance()
            return Literal(low == "true", pos=_pos(tok))
        if low in _RESERVED:
            raise self.expected("an expression")
        nxt = self.ahead()
        if self.is_op("(", tok=nxt):
            return self.index_func() if low in _INDEX_FUNCS else self.aggregate()
        if self.is_op(".", tok=nxt):
            return self.dotted()
        if self.is_op("[", tok=nxt):
            return self.indexed()
        self.advance()
        return Param(tok.value, pos=_pos(tok))

    def equivalence(self) -> _Equiv:
        tok = self.advance()
        attrs = [self.expect_ident("an attribute name in the equivalence test [attr]").value]
        while self.is_op(","):
            self.advance()
            attrs.append(self.expect_ident("an attribute name").value)
        self.expect_op("]", "',' or ']'")
        return _Equiv(tuple(attrs), pos=_pos(tok))

    def attr_name(self) -> Token:
        self.expect_op(".", "'.' and an attribute name")
        return self.expect_ident("an attribute name after '.'")

    def dotted(self):
        """``var.attr`` or ``var.LEN``."""
        var = self.advance()
        name = self.attr_name()
        if name.value.lower() == "len":
            return Len(var.value, pos=_pos(var))
        return Attr(var.value, name.value, None, pos=_pos(var))

    def indexed(self) -> Attr:
        """``var[index].attr``."""
        var = self.advance()
        self.advance()
        index = self.kindex(var.value)
        self.expect_op("]")
        name = self.attr_name()
        if name.value.lower() == "len":
            raise self.error(f"LEN takes no index: write '{var.value}.LEN'", name)
        return Attr(var.value, name.value, index, pos=_pos(var))

    def kindex(self, var: str) -> KIndex:
        """Inside brackets: ``i``, ``i-1``, ``i+1``, ``1``, ``2``, ``var.LEN``, ``var.LEN-1``."""
        tok = self.tok
        if tok.kind == "ident" and tok.value == "i":
            self.advance()
            return KIndex("i", self.offset())
        if tok.kind == "number" and isinstance(tok.value, int):
            self.advance()
            if tok.value < 1:
                raise self.error(f"Kleene indices start at 1 ({var}[1] is the first event)", tok)
            return KIndex("first", tok.value - 1)
        if (tok.kind == "ident" and self.is_op(".", tok=self.ahead())
                and self.is_kw("len", tok=self.ahead(2))):
            if tok.value != var:
                raise self.error(f"expected '{var}.LEN' in an index of '{var}' "
                                 f"but found '{tok.value}.LEN'", tok)
            self.advance()
            self.advance()
            self.advance()
            off_tok = self.tok
            off = self.offset()
            if off > 0:
                raise self.error(f"index past the end: {var}[{var}.LEN+{off}]", off_tok)
            return KIndex("last", off)
        raise self.expected(f"an index (i, i-1, i+1, 1, 2, {var}.LEN, {var}.LEN-1)")

    def offset(self) -> int:
        if not self.is_op("+", "-"):
            return 0
        sign = 1 if self.advance().value == "+" else -1
        tok = self.tok
        if tok.kind != "number" or not isinstance(tok.value, int):
            raise self.expected("a whole number")
        self.advance()
        return sign * tok.value

    def index_func(self) -> Attr:
        """``FIRST(b.x)`` / ``FIRST(b).x``, ``LAST(..)``, ``NEXT(..)``."""
        fn = self.advance()
        self.advance()
        var = self.expect_ident("a Kleene variable name")
        if self.is_op("."):
            name = self.attr_name()
            self.expect_op(")")
        else:
            self.expect_op(")", "'.' or ')'")
            name = self.attr_name()
        if name.value.lower() == "len":
            raise self.error(f"LEN takes no index: write '{var.value}.LEN'", name)
        base, off = _INDEX_FUNCS[fn.value.lower()]
        return Attr(var.value, name.value, KIndex(base, off), pos=_pos(fn))

    def aggregate(self) -> Aggregate:
        """``f(b.x)``, ``f(b[].x)``, ``f(b[..i-1].x)``, ``count(b)``; f checked by validate."""
        fn = self.advance()
        self.advance()
        var = self.expect_ident("a Kleene variable name")
        upto = None
        if self.is_op("["):
            self.advance()
            if self.is_op(".."):
                self.advance()
                upto = self.kindex(var.value)
            elif not self.is_op("]"):
                raise self.expected(f"']' or '..' (aggregate over {var.value}[] or "
                                    f"{var.value}[..i-1])")
            self.expect_op("]")
        attr = None
        if self.is_op("."):
            name = self.attr_name()
            if name.value.lower() == "len":
                raise self.error("LEN is not an attribute to aggregate", name)
            attr = name.value
        self.expect_op(")", "'.' or ')'" if attr is None else "')'")
        return Aggregate(fn.value.lower(), var.value, attr, upto, pos=_pos(fn))


# --------------------------------------------------------------------------- public API

def parse_query(text: str) -> Query:
    """Parse and validate one query (an optional trailing ``;`` is allowed)."""
    parser = _Parser(text, tokenize(text))
    query = parser.parse_one()
    if parser.is_op(";"):
        parser.advance()
    if parser.tok.kind != "eof":
        raise parser.expected("the end of input (use parse_queries for several queries)")
    return validate(query)


def parse_queries(text: str) -> list:
    """Parse a query file: queries separated by ``;``, each optionally ``NAME n PATTERN ...``.

    Unnamed queries are called ``q1``, ``q2``, ... by position. Each Query's ``text`` is its
    own source (so node positions are relative to it); errors report file positions.
    """
    parser = _Parser(text, tokenize(text))
    spans = []
    while True:
        while parser.is_op(";"):
            parser.advance()
        if parser.tok.kind == "eof":
            break
        start = parser.k
        parser.parse_one()
        spans.append((start, parser.k))
    if not spans:
        raise parser.expected("PATTERN")
    queries, names = [], {}
    for index, (start, stop) in enumerate(spans, 1):
        first, last = parser.toks[start], parser.toks[stop - 1]
        try:
            query = parse_query(text[first.start:last.end])
        except (QuerySyntaxError, QueryValidationError) as exc:
            if isinstance(exc, QuerySyntaxError):
                raise QuerySyntaxError(exc.reason, text,
                                       *_shift(first, exc.line, exc.column)) from None
            if exc.line is None:
                raise QueryValidationError(f"query {index} (line {first.line}): {exc.reason}",
                                           ) from None
            line, col = _shift(first, exc.line, exc.column)
            raise QueryValidationError(exc.reason, text, line, col) from None
        name_tok = parser.toks[start + 1] if parser.is_kw("name", tok=first) else first
        name = query.name or f"q{index}"
        if name in names:
            raise QueryValidationError(f"query name {name!r} is used twice "
                                       f"(first at line {names[name]})",
                                       text, name_tok.line, name_tok.col)
        names[name] = name_tok.line
        queries.append(dataclasses.replace(query, name=name))
    return queries


def _shift(first: Token, line: int, col: int) -> tuple:
    """Position relative to a query's own text -> position in the file it came from."""
    return first.line + line - 1, (col + first.col - 1) if line == 1 else col
