"""raycep's CEP core: events, the query language, the shared index and the lazy evaluator.

Layers, bottom up (docs/architecture.md): errors, event and match here; ``lang`` (the query
language) and ``store`` (the index, column batches); ``io`` (readers, codec, output);
``evaluation`` (one query's lazy evaluation); ``runtime`` (the Engine). Pure Python: nothing
here imports Ray, Spark or an HTTP library.
"""
from raycep.cep.errors import (CepError, EvaluationError, IngestError, PlanningError,
                        QuerySyntaxError, QueryValidationError)
from raycep.cep.event import Event
from raycep.cep.match import Match
from raycep.cep.runtime.engine import Engine

__all__ = ["Engine", "Event", "Match", "CepError", "QuerySyntaxError", "QueryValidationError",
           "PlanningError", "IngestError", "EvaluationError", "parse_query", "compile_query"]


def parse_query(text: str):
    """Parse and validate one query (see cep.lang.parser)."""
    from raycep.cep.lang.parser import parse_query as parse
    return parse(text)


def compile_query(query, params=None):
    """Compile query text or a Query AST (see cep.lang.compiler)."""
    from raycep.cep.lang.compiler import compile_query as compile_
    return compile_(query, params)
