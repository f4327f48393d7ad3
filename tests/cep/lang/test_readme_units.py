"""The query language page (docs/language.md) lists exactly the time units the parser takes
(cep.lang.parser.UNITS)."""
import pathlib
import re

from raycep.cep.lang.compiler import compile_query
from raycep.cep.lang.parser import UNITS, parse_query

LANGUAGE = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text()


def test_language_page_lists_every_time_unit_and_each_parses():
    line = next(p for p in LANGUAGE.split("\n\n") if p.startswith("Keywords are case-insensitive"))
    listed = set()
    for word in re.findall(r"`([a-z]+(?:\(s\))?)`", line.split("Time units", 1)[1]):
        listed |= {word[:-3], word[:-3] + "s"} if word.endswith("(s)") else {word}
    assert listed == set(UNITS)
    for unit, seconds in UNITS.items():
        cq = compile_query(parse_query(f"PATTERN SEQ(A a, B b) WITHIN 3 {unit.upper()}"))
        assert cq.window == 3 * seconds, unit
