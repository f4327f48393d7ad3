"""Compile WHERE expressions to closures (never eval): ``fn(env, p) -> value``.

``env`` maps a variable name to its Event, or to the tuple of Events of a Kleene variable;
``p`` is the 0-based position of the current element of the conjunct's Kleene variable (the
``i`` of SASE+ minus one), or None for conjuncts without ``i``. Any failure (missing attribute,
a string compared with a number, division by zero) raises EvalFailure; the caller turns it into
"conjunct is false" and counts it.
"""
from __future__ import annotations

import operator

from raycep.cep.errors import QueryValidationError, short_repr
from raycep.cep.lang import ast
from raycep.cep.lang.validate import finite


NUMERIC = frozenset((int, float))
#: kinds that compare with their own kind under every operator without a further check
PLAIN = frozenset((int, float, str))
#: the kinds of value a comparison accepts (and a parameter may have); anything else (null, a
#: list, a map, bytes) is data that no comparison accepts
COMPARABLE = frozenset((int, float, str, bool))
#: attribute names that may fall back to the event's own fields
FIELDS = frozenset(("type", "ts", "id", "key"))


class EvalFailure(Exception):
    """A conjunct could not be evaluated on the given events (internal control flow)."""


def _is_number(v) -> bool:
    return v.__class__ in NUMERIC


def event_attr(event, name: str):
    """``x.name``: ``ts`` is the event time; otherwise the attribute, else the event's own
    ``type``/``id``/``key``."""
    if name == "ts":
        return event.ts
    attrs = event.attrs
    if name in attrs:
        return attrs[name]
    if name == "type":
        return event.type
    if name == "id":
        return event.id
    if name == "key" and event.key is not None:
        return event.key
    raise EvalFailure(f"event {event.type} has no attribute {name!r}")


def field_value(event, name: str, default=None):
    """``event_attr`` that returns ``default`` instead of failing (equivalence tests)."""
    try:
        return event_attr(event, name)
    except EvalFailure:
        return default


ORDERING = frozenset(("<", "<=", ">", ">="))


def kinds_clash(x, y, ordering: bool) -> bool:
    """Values of different kinds (string, boolean, number) are not comparable, booleans have
    no order, and null, lists, maps and bytes compare with nothing: such a comparison fails
    instead of being false."""
    cx, cy = x.__class__, y.__class__
    if cx is not cy and not (cx in NUMERIC and cy in NUMERIC):
        return True
    return (ordering and cx is bool) or cx not in COMPARABLE


def compare_values(op, x, y, ordering: bool):
    """``op(x, y)``, or EvalFailure when the values cannot be compared (kinds_clash)."""
    if (x.__class__ is not y.__class__ or x.__class__ not in PLAIN) and kinds_clash(
            x, y, ordering):
        raise EvalFailure(f"cannot compare {x!r} with {y!r}")
    try:
        return op(x, y)
    except TypeError as exc:
        raise EvalFailure(str(exc)) from None


RAW_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
           ">": operator.gt, ">=": operator.ge}
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _arith(op):
    def apply(a, b):
        if not (_is_number(a) and _is_number(b)):
            raise EvalFailure("arithmetic on a non-number")
        try:
            return op(a, b)
        except ZeroDivisionError:
            raise EvalFailure("division by zero") from None
        except OverflowError:               # an int too large for a float
            raise EvalFailure("number out of range") from None
    return apply


RAW_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul,
                  "/": operator.truediv}
ARITHMETIC = {op: _arith(f) for op, f in RAW_ARITHMETIC.items()}


def _aggregate(func: str, values: list):
    if func == "count":
        return len(values)
    if not values:
        raise EvalFailure(f"{func} over no events")
    if not all(_is_number(v) for v in values):
        raise EvalFailure(f"{func} over a non-number")
    try:
        if func == "sum":
            return sum(values)
        if func == "avg":
            return sum(values) / len(values)
    except OverflowError:                   # ints too large for a float
        raise EvalFailure("number out of range") from None
    if func == "min":
        return min(values)
    return max(values)


def kleene_offset_shift(expr) -> int:
    """The largest ``i`` offset used in ``expr`` (0 if none): ``b[i+1]`` is normalised to ``b[i]``."""
    offsets = [0]
    for node in ast.walk_expr(expr):
        idx = getattr(node, "index", None) if isinstance(node, ast.Attr) else None
        if isinstance(node, ast.Attr) and idx is not None and idx.base == "i":
            offsets.append(idx.offset)
    return max(offsets)


def compile_expr(expr, kleene: frozenset, params: dict, shift: int = 0, text: str | None = None):
    """Closure for ``expr``. ``kleene`` names the Kleene variables; ``shift`` is subtracted from
    every ``i`` offset (see kleene_offset_shift)."""

    def element_attr(var, name, off):
        """``var[i+off].name``: the element ``off`` after the current one."""
        plain = name != "ts"                # the event time is a field, never an attribute

        def attr(env, p):
            seq = env[var]
            if p is None:
                raise EvalFailure("index i used outside an element-wise conjunct")
            k = p + off
            if k < 0 or k >= len(seq):
                raise EvalFailure(f"{var}[{k + 1}] is out of range")
            ev = seq[k]
            if plain:
                try:
                    return ev.attrs[name]
                except KeyError:
                    pass
            return event_attr(ev, name)
        return attr

    def fixed_attr(var, name, index):
        """``var[FIRST+off].name`` / ``var[LAST+off].name``."""
        def attr(env, p):
            seq = env[var]
            k = index.offset if index.base == "first" else len(seq) - 1 + index.offset
            if k < 0 or k >= len(seq):
                raise EvalFailure(f"{var}[{k + 1}] is out of range")
            return event_attr(seq[k], name)
        return attr

    def build(node):
        if isinstance(node, ast.Literal):
            value = node.value
            return lambda env, p: value
        if isinstance(node, ast.Param):
            if node.name not in params:
                line, col = node.pos or (None, None)
                raise QueryValidationError(
                    f"parameter {node.name!r} has no value (pass params={{'{node.name}': ...}}"
                    f" or --param {node.name}=VALUE)", text, line, col)
            value = params[node.name]
            if value.__class__ not in COMPARABLE or (value.__class__ in NUMERIC
                                                      and not finite(value)):
                line, col = node.pos or (None, None)
                raise QueryValidationError(
                    f"parameter {node.name!r} must be a finite number, a string or a boolean, "
                    f"got {short_repr(value)} ({type(value).__name__})", text, line, col)
            return lambda env, p: value
        if isinstance(node, ast.Attr):
            var, name = node.var, node.attr
            if var in kleene:
                index = node.index
                if index is None or index.base == "i":
                    return element_attr(var, name, (index.offset if index else 0) - shift)
                return fixed_attr(var, name, index)

            def simple_attr(env, p):
                ev = env[var]
                try:
                    return ev.attrs[name]
                except KeyError:
                    return event_attr(ev, name)
            return simple_attr
        if isinstance(node, ast.Len):
            var = node.var
            return lambda env, p: len(env[var])
        if isinstance(node, ast.Aggregate):
            return build_aggregate(node)
        if isinstance(node, ast.BinOp):
            f, left, right = ARITHMETIC[node.op], build(node.left), build(node.right)
            return lambda env, p: f(left(env, p), right(env, p))
        if isinstance(node, ast.Neg):
            inner = build(node.operand)

            def negate(env, p):
                v = inner(env, p)
                if not _is_number(v):
                    raise EvalFailure("unary minus on a non-number")
                return -v
            return negate
        if isinstance(node, ast.Compare):
            return build_compare(node)
        if isinstance(node, ast.BoolAnd):
            items = [build(i) for i in node.items]
            return lambda env, p: all(truth(f(env, p)) for f in items)
        if isinstance(node, ast.BoolOr):
            items = [build(i) for i in node.items]
            return lambda env, p: any(truth(f(env, p)) for f in items)
        if isinstance(node, ast.BoolNot):
            inner = build(node.item)
            return lambda env, p: not truth(inner(env, p))
        raise QueryValidationError(f"unsupported expression {type(node).__name__}")

    def build_compare(node):
        op = RAW_OPS[node.op]
        ordering = node.op in ORDERING
        left, right = node.left, node.right
        if isinstance(right, ast.Attr) and not isinstance(left, ast.Attr):
            left, right, op = right, left, RAW_OPS[FLIPPED[node.op]]
        if (isinstance(left, ast.Attr) and left.var not in kleene and left.attr != "ts"
                and isinstance(right, (ast.Attr, ast.Literal)) and not (
                    isinstance(right, ast.Attr) and (right.var in kleene or right.attr == "ts"))):
            # the common case, one closure: var.attr OP (var.attr | literal)
            lvar, lname = left.var, left.attr
            if isinstance(right, ast.Literal):
                value = right.value

                def compare_literal(env, p):
                    ev = env[lvar]
                    try:
                        x = ev.attrs[lname]
                    except KeyError:
                        x = event_attr(ev, lname)
                    return compare_values(op, x, value, ordering)
                return compare_literal
            rvar, rname = right.var, right.attr

            def compare_attrs(env, p):
                a, b = env[lvar], env[rvar]
                try:
                    x = a.attrs[lname]
                except KeyError:
                    x = event_attr(a, lname)
                try:
                    y = b.attrs[rname]
                except KeyError:
                    y = event_attr(b, rname)
                return compare_values(op, x, y, ordering)
            return compare_attrs
        lf, rf, raw = build(node.left), build(node.right), RAW_OPS[node.op]
        return lambda env, p: compare_values(raw, lf(env, p), rf(env, p), ordering)

    def build_aggregate(node):
        func, var, name, upto = node.func, node.var, node.attr, node.upto

        def aggregate(env, p):
            seq = env[var]
            if upto is None:
                items = seq
            elif upto.base == "i":
                if p is None:
                    raise EvalFailure("prefix aggregate used outside an element-wise conjunct")
                items = seq[:max(0, p + upto.offset - shift + 1)]
                if not items:
                    raise EvalFailure("aggregate over an empty prefix")
            elif upto.base == "first":
                items = seq[:upto.offset + 1]
            else:
                items = seq[:len(seq) + upto.offset]
            if name is None:
                return _aggregate(func, list(items))
            return _aggregate(func, [event_attr(e, name) for e in items])
        return aggregate

    return build(expr)


def truth(value) -> bool:
    if isinstance(value, bool):
        return value
    raise EvalFailure(f"expected a boolean, got {value!r}")


def separable(expr, kleene: frozenset, variables: dict, params: dict, text=None) -> dict:
    """For a comparison ``f(x) OP g(others)`` where ``x`` is a simple positive variable: the
    pieces that let the join filter all candidates of ``x`` against one value of ``g``.

    Returns ``{x: (attr_name_or_None, getter, op, ordering, other_fn)}`` for each such ``x``;
    ``getter(event)`` computes ``f`` when ``f`` is not a plain attribute.
    """
    if not isinstance(expr, ast.Compare):
        return {}
    out = {}
    for side, other, op in ((expr.left, expr.right, expr.op),
                            (expr.right, expr.left, FLIPPED[expr.op])):
        names = _vars_of(side)
        rest = _vars_of(other)
        if len(names) != 1:
            continue
        (x,) = names
        if x in kleene or x in rest or any(variables[v].negated for v in rest):
            continue
        other_fn = compile_expr(other, kleene, params, 0, text)
        if isinstance(other, ast.Attr):      # an attribute may hold a list, a map, null...
            other_fn = _comparable(other_fn)
        if isinstance(side, ast.Attr) and side.attr != "ts":
            attr, getter = side.attr, None
        else:
            attr, getter = None, attr_arith(side, params)
            if getter is None:
                fn = compile_expr(side, kleene, params, 0, text)
                getter = (lambda ev, fn=fn, x=x: fn({x: ev}, None))
        out[x] = (attr, getter, RAW_OPS[op], op in ORDERING, other_fn)
    return out


def attr_arith(side, params: dict):
    """``getter(event)`` for ``x.attr OP number`` or ``number OP x.attr`` (the usual
    threshold: ``a.price * 1.02``) computed straight from the event, with the semantics of
    ``compile_expr`` (a missing attribute or a non-number fails); None for other forms. The
    getter carries ``(attr, op, number, number_on_the_left)`` as ``attr_arith``."""
    if not isinstance(side, ast.BinOp):
        return None
    for var_side, const_side, left in ((side.left, side.right, False),
                                       (side.right, side.left, True)):
        if isinstance(var_side, ast.Attr) and var_side.index is None and \
                var_side.attr != "ts":
            const = const_side
            if isinstance(const, ast.Param):
                if const.name not in params:
                    return None
                c = params[const.name]
            elif isinstance(const, ast.Literal):
                c = const.value
            else:
                return None
            if not _is_number(c):
                return None
            getter = arith_getter(var_side.attr, side.op, (c,), left)
            getter.attr_arith = (var_side.attr, side.op, c, left)
            return getter
    return None


def arith_getter(name: str, op: str, consts: tuple, left: bool, pick=None):
    """``getter(event)``: ``event.name OP c`` (``c OP event.name`` when ``left``) for the one
    constant in ``consts``, or ``pick`` (min or max) of it over two constants, with the
    semantics of ``compile_expr``: a missing attribute or a non-number fails."""
    f = RAW_ARITHMETIC[op]
    if pick is None:
        (c,) = consts
        compute = (lambda v: f(c, v)) if left else (lambda v: f(v, c))
    else:
        lo, hi = consts
        compute = (lambda v: pick(f(lo, v), f(hi, v))) if left else \
            (lambda v: pick(f(v, lo), f(v, hi)))

    def getter(ev):
        attrs = ev.attrs
        v = attrs[name] if name in attrs else event_attr(ev, name)
        if v.__class__ not in NUMERIC:
            raise EvalFailure("arithmetic on a non-number")
        try:
            return compute(v)
        except ZeroDivisionError:
            raise EvalFailure("division by zero") from None
        except OverflowError:
            raise EvalFailure("number out of range") from None
    return getter


def _comparable(fn):
    """``fn`` whose value fails unless a comparison can use it (the candidates' side is then
    compared with a plain value only)."""
    def value(env, p):
        v = fn(env, p)
        if v.__class__ not in COMPARABLE:
            raise EvalFailure(f"cannot compare {v!r}")
        return v
    return value


def _vars_of(expr) -> set:
    return {n.var for n in ast.walk_expr(expr) if isinstance(n, (ast.Attr, ast.Len, ast.Aggregate))}
