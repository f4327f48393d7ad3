"""``raycep local``'s engine run, for the command line (gateway.cli.local) and for Python
(``local.match.match``): the queries over a whole input in one process, with the planner's
defaults, the chunks and the bulk evaluation of the command.

Imports point one way: cep <- planner <- local <- gateway. Nothing is imported here (the
command line imports ``local.run`` before it knows whether it will read a file in bulk):
``from raycep.local.match import match`` (or ``raycep.match``) through this package's attribute.
"""
from __future__ import annotations

__all__ = ["match"]


def __getattr__(name: str):
    if name == "match":
        from raycep.local.match import match
        return match
    raise AttributeError(f"module 'local' has no attribute {name!r}")
