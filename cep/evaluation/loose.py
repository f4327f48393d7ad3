"""What a query group's condition holds with when its members' constants differ by equality:
``x.attr = constant`` holds for a binding when its value is one of the members' constants
(cep.runtime.groups, an "equal" constant index). A bulk evaluation (cep.evaluation.bulk,
``plan_for``'s ``loose``) tests it over columns as set membership; the members that accept a
binding are those whose constant it equals (cep.runtime.members)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from raycep.cep.event import EXACT, kind_of
from raycep.cep.lang import ast
from raycep.cep.lang.expressions import FIELDS


@dataclass(frozen=True)
class OneOf:
    """``var.attr`` equals one of ``values`` (all texts, or all exact numbers; sorted)."""
    var: str
    attr: str
    values: tuple

    @property
    def texts(self) -> bool:
        return self.values[0].__class__ is str

    @cached_property
    def table(self) -> dict:
        """Each text's place in ``values`` (texts only); one dict, so the columns' text
        numbers made for it (cep.evaluation.bulk) serve the condition and the members."""
        return {v: i for i, v in enumerate(self.values)}


def one_of(expr, constants) -> OneOf | None:
    """``expr`` (``x.attr = literal``, either side, whose literal is the one that differs) as
    a OneOf of ``constants``, or None: another expression, or constants a bulk evaluation
    does not compare exactly (not all texts, a number float64 does not hold)."""
    if expr.__class__ is not ast.Compare or expr.op != "=":
        return None
    attr = expr.left if expr.right.__class__ is ast.Literal else expr.right
    if attr.__class__ is not ast.Attr or attr.index is not None or attr.attr in FIELDS:
        return None
    values = tuple(constants)
    if all(v.__class__ is str for v in values):
        return OneOf(attr.var, attr.attr, tuple(sorted(values)))
    if all(v.__class__ is not bool and v.__class__ is not str and kind_of(v) == EXACT
           for v in values):
        return OneOf(attr.var, attr.attr, tuple(sorted(values)))
    return None
