"""A cell of text typed from its text, as every input path types it: CSV cells (cep.io.sources,
cep.io.csv_columns and, in bulk, cep.io.columns.typed_column), text columns read by ``raycep
ingest`` (spark_ingest.mapping) and ``--param`` values.

An integer (``42``, ``-7``; more digits than ``int`` reads stay text), a float (``4.2``,
``1e3``), ``true``/``false`` in any case as a boolean, anything else the text itself.
"""
from __future__ import annotations

import re

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def parse_cell(text: str):
    """Type a CSV cell: int, float, bool (true/false) or the text itself."""
    stripped = text.strip()
    if _INT.fullmatch(stripped):
        try:
            return int(stripped)
        except ValueError:                  # more digits than int() reads: keep the text
            return text
    if _FLOAT.fullmatch(stripped):
        return float(stripped)
    lowered = stripped.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return text


__all__ = ["parse_cell"]
