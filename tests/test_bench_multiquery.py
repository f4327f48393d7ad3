"""benchmarks.bench_multiquery at tiny sizes: the query sets, the structure of its output and
the sharing properties it reports (groups, identical matches); no timing."""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_multiquery as bm  # noqa: E402
from raycep.gateway.cli import load_queries  # noqa: E402

ROWS = 2_000


@pytest.fixture(scope="module")
def ticks(tmp_path_factory):
    return bm.make_ticks(str(tmp_path_factory.mktemp("ticks") / "ticks.csv"), ROWS, 42)


def template(text: str) -> str:
    """A query text with its constants (numbers, quoted strings) blanked out."""
    return re.sub(r"'[^']*'|\b\d+(\.\d+)?\b", "#", text)


def test_variants_are_deterministic_distinct_and_parse(tmp_path):
    big = bm.query_variants(1000)
    assert bm.query_variants(1000) == big
    assert bm.query_variants(10) == big[:10]
    assert len({name for name, _ in big}) == len({text for _, text in big}) == 1000
    parsed = load_queries([bm.write_queries(str(tmp_path / "q.cep"), big)])
    assert [q.name for _, q in parsed] == [name for name, _ in big]
    # four shapes in turn, each over Stock with [symbol]; within a shape only constants vary
    for k, shape in enumerate(bm.SHAPES):
        texts = [text for name, text in big[k::4]]
        assert all(name.startswith(shape + "_") for name, _ in big[k::4])
        assert len({template(t) for t in texts}) == 1, shape
        assert all("[symbol]" in t and "Stock a" in t for t in texts)
    assert "~Stock n" in big[1][1] and "a.symbol = 'AAPL'" in big[3][1]
    windows = {re.search(r"WITHIN (\d+)", t).group(1) for _, t in big[2::4]}
    assert len(windows) >= 3                        # the SEQ-2 shape has several windows
    symbols = {re.search(r"a.symbol = '(\w+)'", t).group(1) for _, t in big[3::4]}
    assert symbols == set(bm.SYMBOLS)
    # the 1-query set is the sample dip_recovery
    sample = {q.name: q.text for _, q in load_queries([os.path.join(bm.ROOT, "examples",
                                                                    "queries.cep")])}
    assert " ".join(big[0][1].split()) in " ".join(sample["dip_recovery"].split())


def test_ticks_come_from_make_ticks(ticks):
    events = bm.read_ticks(ticks)
    assert len(events) == ROWS
    assert {e.attrs["symbol"] for e in events} == set(bm.SYMBOLS)
    assert all(e.key == e.attrs["symbol"] for e in events)


def test_same_lines_compares_sorted_lines(tmp_path):
    a, b, c = (str(tmp_path / n) for n in "abc")
    with open(a, "w") as f:
        f.write('{"x":1}\n{"x":2}\n{"x":2}\n')
    with open(b, "w") as f:
        f.write('{"x":2}\n{"x":1}\n{"x":2}\n')
    with open(c, "w") as f:
        f.write('{"x":2}\n{"x":1}\n{"x":1}\n')
    assert bm.same_lines(a, b) and not bm.same_lines(a, c)


def test_targets_and_table_report_what_was_run():
    rows = [{"queries": n, "mode": "on", "groups": g, "rate": r, "ratio": r / 1000.0,
             "matches": 5, "seconds": 1.0, "peak_rss_mb": 50.0}
            for n, g, r in ((1, 1, 1000.0), (100, 4, 350.0), (1000, 4, 40.0))]
    assert bm.targets(rows) == [(100, 0.3, 0.35, "met"), (1000, 0.05, 0.04, "not met")]
    assert bm.targets(rows[:1])[0][3] == "not run"
    text = "\n".join(bm.e2e_table({"rows": rows, "identical": {1: True, 100: False},
                                   "skipped": [(1000, "off", "slow: run with --full")]}))
    assert "N=1: matches of sharing on and off identical: yes" in text
    assert "N=100: matches of sharing on and off identical: no" in text
    assert "N=1000: sharing off not run (slow: run with --full)" in text
    assert "1000 variants >= 0.05x of 1 query, end to end, sharing on: not met" in text


# ------------------------------------------------------------------ needs the engine side

@pytest.mark.parametrize("shape", bm.SHAPES)
def test_one_shape_is_one_group_with_sharing_and_n_without(shape, ticks, tmp_path):
    queries = bm.query_variants(8, shapes=(shape,))
    qfile = bm.write_queries(str(tmp_path / "q.cep"), queries)
    on = bm.run_local(qfile, ticks, str(tmp_path / "on.jsonl"), sharing=True)
    off = bm.run_local(qfile, ticks, str(tmp_path / "off.jsonl"), sharing=False)
    assert on["queries"] == off["queries"] == 8
    assert on["groups"] == 1
    assert off["groups"] == 8
    assert on["events"] == off["events"] == ROWS
    assert on["matches"] == off["matches"]
    assert bm.same_lines(str(tmp_path / "on.jsonl"), str(tmp_path / "off.jsonl"))


def test_worker_groups_and_matches_with_sharing_on_and_off(ticks):
    from benchmarks.bench_cluster import encode_partitions
    batches = encode_partitions(bm.read_ticks(ticks), 1, 500)[0]
    queries = bm.query_variants(10)
    on = bm.run_worker(batches, queries, sharing=True)
    off = bm.run_worker(batches, queries, sharing=False)
    assert on["groups"] == 4 and off["groups"] == 10
    assert on["matches"] == off["matches"] > 0


def test_quick_run_prints_every_cell(capsys):
    assert bm.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "has no --no-sharing" not in out and "sharing on only" not in out
    sections = out.split("=== ")
    e2e = next(s for s in sections if s.startswith("end to end"))
    worker = next(s for s in sections if s.startswith("one PartitionWorker"))
    for section, counts in ((e2e, bm.QUICK["counts"]), (worker, bm.QUICK["worker_counts"])):
        rows = {}
        for line in section.splitlines():
            cells = line.split()
            if len(cells) >= 7 and cells[0].isdigit() and cells[1] in bm.MODES:
                rows[(int(cells[0]), cells[1])] = cells
        assert set(rows) == {(n, mode) for n in counts for mode in bm.MODES}
        for (n, mode), cells in rows.items():
            groups = int(cells[2])                  # "-" (not reported) fails here
            assert 1 <= groups <= n
            assert groups == (n if mode == "off" else min(n, len(bm.SHAPES)))
            # same matches with sharing on and off
            assert cells[5] == rows[(n, "on" if mode == "off" else "off")][5]
    for n in bm.QUICK["counts"]:
        assert f"N={n}: matches of sharing on and off identical: yes" in e2e
    assert "identical: no" not in out
    for n in bm.QUICK["worker_counts"]:
        assert f"N={n}: match counts of sharing on and off equal: yes" in worker
    assert "target: 100 variants" in e2e and "not run" in e2e


def test_serve_path_stores_every_match(ticks):
    """--cluster's raycep serve part: gateway + 2 Ray actors, Client register/send/advance;
    it raises unless the gateway stores exactly the in-process engine's matches."""
    events = bm.read_ticks(ticks)
    want = bm.expected_matches(events, 10)
    assert want > bm.expected_matches(events, 1) > 0
    lines = bm.bench_serve(events, (1, 10), timeout=120.0)
    rows = [line.split() for line in lines[1:-1]]
    assert [int(r[0]) for r in rows] == [1, 10]
    assert int(rows[1][3].replace(",", "")) == want
    assert lines[-1].startswith("matches: equal")


def test_prefix_part_shares_plan_prefixes_and_keeps_the_matches(tmp_path):
    """--part prefix: the 8 queries form 8 evaluators (no group), sharing on reuses plan
    prefixes, --no-sharing none; bench_prefix raises unless the match files are identical."""
    lines = bm.bench_prefix(str(tmp_path), ROWS, 42, 1, planners=("tree-nfa",))
    rows = {line.split()[1]: line.split() for line in lines[1:3]}
    assert set(rows) == {"on", "off"}
    assert rows["on"][2] == rows["off"][2] == str(len(bm.prefix_queries()))
    assert int(rows["on"][6].replace(",", "")) > 0 and rows["off"][6] == "0"
    assert rows["on"][4] == rows["off"][4] and int(rows["on"][4].replace(",", "")) > 0
    assert lines[-1].endswith("identical: yes")
