"""Lazy, recomputation-based evaluation of one query over the shared index: a plan order's
``steps``, the join of one trigger (``evaluator``) and of a block of triggers at once
(``bulk``), the selection ``strategies``, shared plan prefixes (``prefixes``) and the
``manager`` that runs them for one query.

Imports the base of ``raycep.cep``, the query language and the store.
"""
