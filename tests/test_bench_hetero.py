"""benchmarks.hetero_rules and ``bench_multiquery --part hetero`` at tiny sizes: the stream and
the rule set are deterministic and cover what issue 35 asks for, every rule compiles, and the
part's output has its rows and checks (identical matches with and without sharing); no
timing."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_hetero as bh  # noqa: E402
from benchmarks import bench_multiquery as bm  # noqa: E402
from benchmarks import hetero_rules as hr  # noqa: E402
from benchmarks.local_paths import KEPT  # noqa: E402
from raycep.gateway.cli import load_queries  # noqa: E402

ROWS = 3_000


def template(text: str) -> str:
    """A rule with its constants (numbers, quoted strings) blanked out."""
    return re.sub(r"'[^']*'|\b\d+(\.\d+)?\b", "#", text)


def test_stream_is_seeded_multi_type_and_keyed(tmp_path):
    a, b, c = (hr.make_stream(str(tmp_path / f"{n}.csv"), ROWS, seed)
               for n, seed in (("a", hr.SEED_A), ("b", hr.SEED_A), ("c", hr.SEED_B)))
    assert open(a, "rb").read() == open(b, "rb").read()
    assert open(a, "rb").read() != open(c, "rb").read()
    with open(a, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == ROWS
    assert {r["type"] for r in rows} == set(hr.TYPES)
    assert 50 <= len({r["symbol"] for r in rows}) <= 200
    assert {r["venue"] for r in rows} <= set(hr.VENUES)
    times = [float(r["ts"]) for r in rows]
    assert all(x < y for x, y in zip(times, times[1:]))     # in order, no ties
    assert all(float(r["price"]) > 0 and int(r["volume"]) > 0 for r in rows)


def test_rule_set_covers_the_issue_and_compiles(tmp_path):
    import raycep
    rules = hr.rule_set(hr.SEED_A)
    assert hr.rule_set(hr.SEED_A) == rules
    assert len(rules) == len(hr.STRUCTURES) * hr.PER >= 200 and len(hr.STRUCTURES) >= 10
    assert len({name for name, _ in rules}) == len({text for _, text in rules}) == len(rules)
    other = dict(hr.rule_set(hr.SEED_B))
    assert sum(other[name] != text for name, text in rules) > len(rules) // 2   # seed: constants
    for k, (name, *_rest) in enumerate(hr.STRUCTURES):
        texts = [text for _, text in rules[k::len(hr.STRUCTURES)]]
        assert len({template(t) for t in texts}) == 1, name            # only constants vary
        assert len(set(texts)) == hr.PER, name
    assert hr.first_of_each(rules) == rules[:len(hr.STRUCTURES)]
    for _, text in rules:
        raycep.compile(raycep.parse(text))
    loaded = load_queries([bm.write_queries(str(tmp_path / "h.cep"), rules)])
    assert [q.name for _, q in loaded] == [name for name, _ in rules]
    every = "\n".join(text for _, text in rules)
    for feature in ("~C n", "~F n", "B+ b[]", "AND(", "OR(", "skip_till_next_match",
                    "partition_contiguity", "strict_contiguity", "[symbol]"):
        assert feature in every, feature
    assert any("[symbol]" not in t for _, t in rules)                   # global rules too
    types = [len(set(re.findall(r"\b([A-F])\+? [a-z]\w*\b", t))) for _, t in rules]
    assert min(types) == 2 and max(types) == 4
    windows = {int(w) for w in re.findall(r"WITHIN (\d+) seconds", every)}
    assert min(windows) == 10 and max(windows) == 60


def test_local_paths_adds_each_querys_stats(tmp_path):
    events = hr.make_stream(str(tmp_path / "e.csv"), ROWS, hr.SEED_A)
    qfile = bm.write_queries(str(tmp_path / "q.cep"), hr.rule_set(hr.SEED_A, per=1)[:2])
    s = bm.run_local(qfile, events, str(tmp_path / "m.jsonl"), workers=1, query_stats=True)
    assert s["events"] == ROWS and s["queries"] == 2
    assert set(s["query_stats"]) == {"seq2_00", "seq4_00"}
    for q in s["query_stats"].values():
        assert set(q) == set(KEPT)
    with open(tmp_path / "m.jsonl") as handle:
        by = [json.loads(line)["query"] for line in handle]
    assert all(s["query_stats"][q]["matches"] == by.count(q) for q in s["query_stats"])
    assert bh._path({"path": None}) == "n/a" == bh._path(None)
    assert bh._path({"path": {"bulk": 3, "per_trigger": 1}}) == "bulk 3, per_trigger 1"


def test_hetero_part_reports_every_row_and_identical_matches(tmp_path):
    result = bh.bench_hetero(str(tmp_path), ROWS, hr.SEED_A, 1, per=2, by_structure=True)
    assert result["identical"] is True
    assert all(a == b for a, b in result["alone_vs_set"].values())
    text = "\n".join(bh.hetero_table(result))
    assert "identical (sorted lines): yes" in text and "NO" not in text
    assert "ratio set / first rule:" in text and "first rule seq2_00: path" in text
    for name, *_rest in hr.STRUCTURES:
        assert re.search(rf"^ *{name} .* \| 2 rules: ", text, re.M), name
    rows = {line[:14].strip(): line[14:].split() for line in text.splitlines()[1:4]}
    assert set(rows) == {"set", "seq2_00 alone", "set, no-share"}
    assert rows["set"][0] == str(2 * len(hr.STRUCTURES)) and rows["seq2_00 alone"][0] == "1"
    assert rows["set"][4] == rows["set, no-share"][4]                   # matches
    # --by-structure: a row per structure, its figures or the engine's failure
    part = text.split("as a set of their own")[1]
    for name, *_rest in hr.STRUCTURES:
        assert re.search(rf"^ *{name} +(\d+ .*%|failed \(an engine bug\): .+)$", part, re.M), name


@pytest.mark.parametrize("argv", [["--part", "hetero", "--help"]])
def test_cli_names_the_part(argv):
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_multiquery"] + argv,
                          capture_output=True, text=True, cwd=bm.ROOT)
    assert done.returncode == 0 and "hetero" in done.stdout and "--per" in done.stdout
