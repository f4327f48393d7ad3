"""The ``raycep local`` command: in-process and as a subprocess."""
import json
import re
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from raycep.gateway import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUMMARY_KEYS = {"events", "matches", "retractions", "late_events", "duplicates", "seconds",
                "events_per_s", "peak_rss_mb", "startup_seconds", "queries", "groups",
                "prefixes_reused", "bulk_share", "workers"}

# a.x < b.x holds for (A@1 x=1, B@4 x=10) and (A@3 x=5, B@4 x=10), not for (A@1, B@2 x=0)
EVENTS_CSV = "type,ts,x,sym\nA,1,1,s\nB,2,0,s\nA,3,5,s\nB,4,10,s\n"
SEQ_AB = "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 10 seconds"


@pytest.fixture
def events_csv(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text(EVENTS_CSV, encoding="utf-8")
    return str(path)


def run(capsys, *argv):
    """main(argv) -> (exit status, stdout lines, stderr text)."""
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def pairs(records, left="a", right="b"):
    return sorted((r["events"][left]["x"], r["events"][right]["x"]) for r in records)


def test_local_writes_matches_and_summary(capsys, tmp_path, events_csv):
    out = tmp_path / "deep" / "dir" / "matches.jsonl"
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", events_csv,
                             "--out", out)
    assert status == 0, err
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2
    assert pairs(records) == [(1, 10), (5, 10)]
    for record in records:
        assert set(record) == {"query", "events"}
        assert set(record["events"]) == {"a", "b"}
        for var, ev in record["events"].items():
            assert {"id", "type", "ts", "x", "sym"} <= set(ev)
            assert ev["type"] == var.upper()
    names = {r["query"] for r in records}
    assert len(names) == 1 and None not in names
    summary = json.loads(lines[-1])
    assert set(summary) == SUMMARY_KEYS
    assert summary["events"] == 4 and summary["matches"] == 2
    wall, rss = summary["seconds"], summary["peak_rss_mb"]     # reported, not judged
    assert isinstance(wall, float) and rss > 1
    assert len(lines) == 1                          # matches went to the file
    assert "Traceback" not in err


def test_local_shares_variants_and_no_sharing_evaluates_each_alone(capsys, tmp_path,
                                                                  events_csv):
    """Queries that differ only in a constant form one group; --no-sharing evaluates each on
    its own; every query gets the same matches either way (a.x < b.x * C: C = 0.2 keeps
    (1, 10), C = 1 keeps (1, 10) and (5, 10), C = 0.01 none)."""
    qfile = tmp_path / "variants.cep"
    qfile.write_text(";\n".join(
        f"NAME v{k}\nPATTERN SEQ(A a, B b) WHERE a.x < b.x * {c} WITHIN 10 seconds"
        for k, c in enumerate((0.2, 1, 0.01))), encoding="utf-8")
    got = {}
    for flags in ((), ("--no-sharing",)):
        out = tmp_path / f"m{len(flags)}.jsonl"
        status, lines, err = run(capsys, "local", "--query", qfile, "--events", events_csv,
                                 "--out", out, *flags)
        assert status == 0, err
        summary = json.loads(lines[-1])
        assert summary["queries"] == 3
        assert summary["groups"] == (3 if flags else 1)
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        got[flags] = {q: sorted(pairs([r for r in records if r["query"] == q]))
                      for q in ("v0", "v1", "v2")}
    assert got[()] == got[("--no-sharing",)] == {"v0": [(1, 10)], "v1": [(1, 10), (5, 10)],
                                                 "v2": []}


def test_local_says_how_each_querys_triggers_were_evaluated(capsys, tmp_path):
    """Per query on stderr: its triggers evaluated in bulk and one by one and, for one by
    one, what in the query keeps it from bulk (here a Kleene variable); the summary's
    ``bulk_share``. A group of variants goes bulk from its first events, on the planner's
    provisional plan (a file read in column batches: over 512 KiB)."""
    path = tmp_path / "ev.csv"
    pad = "p" * 24
    path.write_text("type,ts,x,pad\n" + "".join(f"{'AB'[j % 2]},{j},{j % 7},{pad}\n"
                                                for j in range(20000)), encoding="utf-8")
    qfile = tmp_path / "q.cep"
    qfile.write_text(";\n".join(
        [f"NAME v{k}\nPATTERN SEQ(A a, B b) WHERE a.x < b.x + {k} WITHIN 4 seconds"
         for k in range(3)] + ["NAME kl\nPATTERN SEQ(A a, B+ b[]) WITHIN 4 seconds"]),
        encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", qfile, "--events", path, "--out",
                             tmp_path / "m.jsonl", "--workers", "1")
    assert status == 0, err
    kleene = next(line for line in err.splitlines() if "query kl:" in line)
    assert "triggers: 0 in bulk, 10000 one by one: Kleene variable b" in kleene, kleene
    for k in range(3):
        line = next(line for line in err.splitlines() if f"query v{k}:" in line)
        bulk, one = map(int, re.search(r"triggers: (\d+) in bulk, (\d+) one by one",
                                       line).groups())
        assert (bulk, one) == (10000, 0), line     # a provisional plan from the start
    share = json.loads(lines[-1])["bulk_share"]
    assert share == 0.75
    # the evaluation time table: one row per evaluator (the variants are one group), the most
    # expensive first, shares adding up to 100 %, each row's matches and triggers its own
    text = err.split("evaluation time by query:\n")[1].splitlines()
    assert text[0].split() == ["SHARE", "SECONDS", "QUERIES", "MATCHES", "IN", "BULK", "ONE",
                               "BY", "ONE"]
    rows = []
    for line in text[1:]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    assert len(rows) == 2
    seconds = [float(r[1]) for r in rows]
    assert seconds == sorted(seconds, reverse=True) and min(seconds) > 0
    assert abs(sum(float(r[0].rstrip("%")) for r in rows) - 100.0) <= 0.2
    counts = {}
    for line in err.splitlines():
        got = re.search(r"query (\w+): (\d+) matches", line)
        if got:
            counts[got.group(1)] = int(got.group(2))
    by_name = {r[2]: r for r in rows}
    assert by_name["kl"][3:] == [f"{counts['kl']:,}", "0", "10,000"]
    group = next(r for r in rows if r[2] != "kl")
    assert group[3:5] == ["(3", "queries)"]
    assert group[5:] == [f"{sum(counts[f'v{k}'] for k in range(3)):,}", "10,000", "0"]


def test_local_matches_on_stdout_summary_last(capsys, events_csv):
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", events_csv)
    assert status == 0, err
    assert len(lines) == 3
    assert pairs(json.loads(line) for line in lines[:-1]) == [(1, 10), (5, 10)]
    summary = json.loads(lines[-1])
    assert set(summary) == SUMMARY_KEYS and summary["matches"] == 2


def test_query_file_with_named_queries(capsys, tmp_path, events_csv):
    qfile = tmp_path / "two.cep"
    qfile.write_text(
        "-- two queries\n"
        "NAME rising PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 10 seconds;\n"
        "NAME falling\nPATTERN SEQ(A a, B b)\nWHERE a.x > b.x\nWITHIN 10 seconds\n",
        encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", qfile, "--events", events_csv)
    assert status == 0, err
    records = [json.loads(line) for line in lines[:-1]]
    by_name = {}
    for record in records:
        by_name.setdefault(record["query"], []).append(record)
    assert set(by_name) == {"rising", "falling"}
    assert pairs(by_name["rising"]) == [(1, 10), (5, 10)]
    assert pairs(by_name["falling"]) == [(1, 0)]
    assert json.loads(lines[-1])["matches"] == 3


def test_several_query_options(capsys, events_csv):
    status, lines, err = run(
        capsys, "local", "--events", events_csv,
        "--query", "NAME q_lt " + SEQ_AB,
        "--query", "NAME q_gt PATTERN SEQ(A a, B b) WHERE a.x > b.x WITHIN 10 seconds")
    assert status == 0, err
    names = sorted(json.loads(line)["query"] for line in lines[:-1])
    assert names == ["q_gt", "q_lt", "q_lt"]


def test_unnamed_queries_are_numbered_across_options(capsys, events_csv):
    status, lines, err = run(
        capsys, "local", "--events", events_csv, "--query", SEQ_AB,
        "--query", "PATTERN SEQ(A a, B b) WHERE a.x > b.x WITHIN 10 seconds")
    assert status == 0, err
    names = sorted(json.loads(line)["query"] for line in lines[:-1])
    assert names == ["q1", "q1", "q2"]


def test_duplicate_query_name_across_options(capsys, events_csv):
    status, lines, err = run(capsys, "local", "--events", events_csv,
                             "--query", "NAME same " + SEQ_AB, "--query", "NAME same " + SEQ_AB)
    assert status == 2 and "'same'" in err and "twice" in err


def test_params(capsys, events_csv):
    query = "PATTERN SEQ(A a, B b) WHERE a.x < b.x AND a.x > lo WITHIN W"
    status, lines, err = run(capsys, "local", "--query", query, "--events", events_csv,
                             "--param", "lo=2", "--param", "W=5")
    assert status == 0, err
    assert pairs(json.loads(line) for line in lines[:-1]) == [(5, 10)]


def test_bad_param_syntax(capsys, events_csv):
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", events_csv,
                             "--param", "no-equals-sign")
    assert status == 2 and "NAME=VALUE" in err
    query = "PATTERN SEQ(A a, B b) WHERE a.x > lo WITHIN W"
    for value in ("nan", "-Infinity", "inf", "1e999"):
        status, lines, err = run(capsys, "local", "--query", query, "--events", events_csv,
                                 "--param", f"lo={value}", "--param", "W=5")
        assert status == 2 and "lo" in err and "finite" in err, (value, err)


def test_kleene_variable_is_a_list(capsys, tmp_path):
    path = tmp_path / "k.csv"
    path.write_text("type,ts,x\nA,1,0\nB,2,1\nB,3,2\nC,4,9\n", encoding="utf-8")
    query = ("PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_next_match(a, b, c) "
             "{ b[i].x > b[i-1].x AND b.LEN = 2 } WITHIN 10 seconds")
    status, lines, err = run(capsys, "local", "--query", query, "--events", path)
    assert status == 0, err
    records = [json.loads(line) for line in lines[:-1]]
    assert len(records) == 1
    kleene = records[0]["events"]["b"]
    assert isinstance(kleene, list) and [e["x"] for e in kleene] == [1, 2]


def test_trailing_negation_is_emitted_at_end_of_stream(capsys, tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("type,ts,x\nA,1,1\nB,2,2\nA,3,3\nB,4,4\nC,4.5,0\n", encoding="utf-8")
    query = "PATTERN SEQ(A a, B b, ~C c) WITHIN 10 seconds"
    status, lines, err = run(capsys, "local", "--query", query, "--events", path)
    assert status == 0, err
    # every (a, b) pair is followed by C@4.5 inside the window, so none survives ...
    assert json.loads(lines[-1])["matches"] == 0
    query = "PATTERN SEQ(A a, B b, ~C c) WITHIN 2 seconds"
    status, lines, err = run(capsys, "local", "--query", query, "--events", path)
    assert status == 0, err
    # ... with a 2 s window C@4.5 only rules out (A@3, B@4); (A@1, B@2) is confirmed when
    # the window has closed, i.e. by advance(), and (A@1, B@4) is too wide
    records = [json.loads(line) for line in lines[:-1]]
    assert pairs(records) == [(1, 2)]


def test_key_partitions_by_attribute(capsys, tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("type,ts,x,sym\nA,1,1,s1\nA,2,2,s2\nB,3,5,s1\n", encoding="utf-8")
    query = "PATTERN SEQ(A a, B b) WHERE [sym] AND a.x < b.x WITHIN 10 seconds"
    status, lines, err = run(capsys, "local", "--query", query, "--events", path,
                             "--key", "sym")
    assert status == 0, err
    assert pairs(json.loads(line) for line in lines[:-1]) == [(1, 5)]


def test_key_attribute_missing_is_a_row_error(capsys, tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("type,ts,x,sym\nA,1,1,s1\nB,3,5,\n", encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path,
                             "--key", "sym")
    assert status == 2
    assert "p.csv" in err and "line 3" in err and "'sym'" in err


# --------------------------------------------------------------------------- errors

def test_bad_query_syntax_exit_2_with_position(capsys, events_csv):
    query = "PATTERN SEQ(A a, B b)\nWHERE a.x < < b.x\nWITHIN 10 seconds"
    status, lines, err = run(capsys, "local", "--query", query, "--events", events_csv)
    assert status == 2
    assert "line 2, column 13" in err
    assert "WHERE a.x < < b.x" in err and "^" in err
    assert "Traceback" not in err
    assert lines == []


def test_bad_query_in_file_names_the_file(capsys, tmp_path, events_csv):
    qfile = tmp_path / "bad.cep"
    qfile.write_text("NAME ok PATTERN SEQ(A a, B b) WITHIN 10 seconds;\n"
                     "NAME broken PATTERN SEQ(A a, B b) WHERE a.x < < b.x WITHIN 10 seconds\n",
                     encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", qfile, "--events", events_csv)
    assert status == 2
    assert "bad.cep" in err and "line 2, column" in err and "^" in err


def test_invalid_query_exit_2(capsys, events_csv):
    query = "PATTERN SEQ(A a, B b) WHERE a.x < zz.x WITHIN 10 seconds"
    status, lines, err = run(capsys, "local", "--query", query, "--events", events_csv)
    assert status == 2
    assert "zz" in err and "Traceback" not in err


def test_missing_query_file(capsys, events_csv):
    status, lines, err = run(capsys, "local", "--query", "nowhere/q.cep", "--events",
                             events_csv)
    assert status == 2 and "not found" in err and "q.cep" in err


def test_bad_event_row_exit_2(capsys, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("type,ts,x\nA,1,1\nB,later,2\nB,3,5\n", encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path)
    assert status == 2
    assert "bad.csv" in err and "line 3" in err and "'ts'" in err
    assert "Traceback" not in err


def test_a_bad_row_after_matches_stops_with_a_summary_saying_where(capsys, tmp_path):
    """Matches before the bad row are on stdout, then the summary (with "stopped": the row,
    field and line), exit status 2, and stderr names --skip-bad-rows."""
    path = tmp_path / "late_bad.csv"
    path.write_text("type,ts,x\nA,1,1\nB,2,5\nA,3,2\nB,4,6\nA,x5,1\nB,6,9\n",
                    encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path)
    assert status == 2
    records = [json.loads(line) for line in lines[:-1]]
    assert pairs(records) == [(1, 5), (1, 6), (2, 6)]
    summary = json.loads(lines[-1])
    assert set(summary) == SUMMARY_KEYS | {"stopped"}
    assert summary["events"] == 4 and summary["matches"] == 3
    assert "line 6" in summary["stopped"] and "row " not in summary["stopped"]   # named once
    assert "'ts'" in summary["stopped"] and "late_bad.csv" in summary["stopped"]
    assert "stopped there after 4 events" in err and "--skip-bad-rows" in err


def test_skip_bad_rows_reports_and_continues(capsys, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("type,ts,x\nA,1,1\nB,later,2\nB,3,5\n,4,4\n", encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path,
                             "--skip-bad-rows")
    assert status == 0, err
    assert "line 3" in err and "line 5" in err and "skipped 2 bad row" in err
    summary = json.loads(lines[-1])
    assert summary["events"] == 2 and summary["matches"] == 1


def test_missing_required_column_exit_2(capsys, tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("kind,ts\nA,1\n", encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path)
    assert status == 2 and "'type'" in err and "h.csv" in err


@pytest.mark.parametrize("name,message", [("missing.csv", "not found"),
                                          ("events.txt", ".parquet")])
def test_unreadable_events_file(capsys, tmp_path, name, message):
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", tmp_path / name)
    assert status == 2 and message in err and "Traceback" not in err


def test_usage_errors(capsys):
    assert cli.main([]) == 2
    assert cli.main(["local", "--query", SEQ_AB]) == 2       # --events missing
    assert cli.main(["--help"]) == 0
    assert "local" in capsys.readouterr().out


def test_serve_limits_are_checked_before_anything_starts(capsys):
    for option, value in (("--max-window", "-5"), ("--max-advance-ahead", "inf"),
                          ("--max-body-bytes", "0"), ("--max-depth", "0")):
        assert cli.main(["serve", option, value]) == 2
        err = capsys.readouterr().err
        assert option in err and "positive finite number" in err and "Traceback" not in err
    assert cli.main(["serve", "--outbox-capacity", "0"]) == 2
    err = capsys.readouterr().err
    assert "--outbox-capacity" in err and "integer >= 1" in err
    for option, value in (("--wait-for-nodes", "0"), ("--wait-for-nodes-timeout", "-1")):
        assert cli.main(["serve", option, value]) == 2
        err = capsys.readouterr().err
        assert "--wait-for-nodes" in err and "Traceback" not in err
    for option in ("--spark-executors", "--spark-executor-cores"):
        assert cli.main(["serve", "--spark", option, "0"]) == 2
        err = capsys.readouterr().err
        assert option in err and ">= 1" in err and "Traceback" not in err
    # advance: a watermark that is not a finite number never reaches a gateway
    assert cli.main(["advance", "Infinity", "--gateway", "http://127.0.0.1:9"]) == 2
    assert "finite number" in capsys.readouterr().err


def test_progress_lines_on_stderr(capsys, monkeypatch, events_csv):
    import raycep.gateway.cli.local
    monkeypatch.setattr(raycep.gateway.cli.local, "PROGRESS_EVERY_S", 0.0)
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", events_csv)
    assert status == 0
    assert "events/s" in err
    assert len(lines) == 3                          # progress never goes to stdout


@pytest.fixture()
def sliced_csv(tmp_path):
    """A CSV that raycep local --workers 2 cuts in two."""
    path = tmp_path / "big.csv"
    path.write_text("type,ts,x\n" + "".join(f"{'AB'[k % 2]},{k},{k % 7}\n"
                                             for k in range(60_000)), encoding="utf-8")
    assert path.stat().st_size > 512 * 1024
    return path


def test_progress_of_time_slices_says_which_slice(capsys, monkeypatch, tmp_path, sliced_csv):
    """In time slices the progress line counts the first slice's events and says so."""
    import raycep.gateway.cli.local
    monkeypatch.setattr(raycep.gateway.cli.local, "PROGRESS_EVERY_S", 0.0)
    path = sliced_csv
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path,
                             "--out", tmp_path / "m.jsonl", "--workers", "2")
    assert status == 0, err
    assert json.loads(lines[-1])["workers"] == 2
    progress = [line for line in err.splitlines() if "events/s" in line]
    assert progress and all("slice 1 of 2: " in line for line in progress)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminated_sliced_run_ends_its_slices_and_removes_their_files(
        capsys, monkeypatch, tmp_path, sliced_csv, signum):
    """SIGTERM or SIGHUP while raycep local runs in time slices: exit status 128 + the
    signal, a message, the forked slices ended and their temporary files gone; the handlers
    are the ones before afterwards."""
    import raycep.gateway.cli.local
    monkeypatch.setattr(raycep.gateway.cli.local, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr(raycep.gateway.cli.local.Progress, "tick",
                        lambda self, events, counts: os.kill(os.getpid(), signum))
    before = signal.getsignal(signum)
    out = tmp_path / "out" / "m.jsonl"
    status, _, err = run(capsys, "local", "--query", SEQ_AB, "--events", sliced_csv,
                         "--out", out, "--workers", "2")
    assert status == 128 + signum, err
    assert f"raycep: terminated (signal {int(signum)})" in err
    assert os.listdir(out.parent) == ["m.jsonl"]               # no .raycep-slice-* left
    with pytest.raises(ChildProcessError):                     # the forked slice: reaped
        os.waitpid(-1, os.WNOHANG)
    assert signal.getsignal(signum) == before


def test_slices_to_a_device_keep_their_files_in_the_temporary_directory(
        capsys, tmp_path, sliced_csv, monkeypatch):
    """--out /dev/null: the slices' files go to the system's temporary directory (not /dev),
    and are removed."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", sliced_csv,
                             "--out", "/dev/null", "--workers", "2")
    assert status == 0, err
    assert json.loads(lines[-1])["workers"] == 2
    assert not [p for p in os.listdir("/dev") if p.startswith(".raycep-slice-")]
    assert os.listdir(tmp_path) == ["big.csv"]


def test_jsonl_events(capsys, tmp_path):
    path = tmp_path / "e.jsonl"
    rows = [{"type": t, "ts": ts, "x": x} for t, ts, x in
            [("A", 1, 1), ("B", 2, 0), ("A", 3, 5), ("B", 4, 10)]]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    status, lines, err = run(capsys, "local", "--query", SEQ_AB, "--events", path)
    assert status == 0, err
    assert json.loads(lines[-1])["matches"] == 2


# --------------------------------------------------------------------------- subprocess

def _subprocess(*argv, cwd=ROOT):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "raycep", *map(str, argv)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_subprocess_run(tmp_path, events_csv):
    out = tmp_path / "out" / "m.jsonl"
    proc = _subprocess("local", "--query", SEQ_AB, "--events", events_csv, "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert set(summary) == SUMMARY_KEYS and summary["matches"] == 2
    assert len(out.read_text().splitlines()) == 2


def test_subprocess_bad_query(events_csv):
    proc = _subprocess("local", "--query", "PATTERN SEQ(A a, B b)\nWHERE a.x < < b.x\nWITHIN 1 "
                       "seconds", "--events", events_csv)
    assert proc.returncode == 2
    assert "line 2, column 13" in proc.stderr and "Traceback" not in proc.stderr


def test_sample_queries_on_sample_ticks(tmp_path):
    """The README's main command: every sample query matches, none explodes."""
    out = tmp_path / "matches.jsonl"
    proc = _subprocess("local", "--query", ROOT / "examples" / "queries.cep",
                       "--events", ROOT / "examples" / "ticks.csv", "--key", "symbol",
                       "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["events"] == 20000
    counts = {}
    with open(out, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            counts[record["query"]] = counts.get(record["query"], 0) + 1
            symbols = {ev["symbol"] for value in record["events"].values()
                       for ev in (value if isinstance(value, list) else [value])}
            assert len(symbols) == 1
    assert set(counts) == {"dip_recovery", "rally", "clean_breakout"}
    assert all(10 <= n <= 20000 for n in counts.values()), counts
    assert summary["matches"] == sum(counts.values())


def test_raycep_keeps_numpy_to_one_blas_thread(tmp_path, events_csv):
    """numpy's OpenBLAS thread spins ~0.1 s after import and took a core from the match
    writer: ``raycep`` starts it with OPENBLAS_NUM_THREADS=1 (a value the user set is kept),
    so a run leaves the process with no thread but its own."""
    if not os.path.isdir("/proc/self/task"):
        pytest.fail("this test reads a process's threads from /proc (Linux)")
    script = ("import os, sys, contextlib, io\n"
              "from raycep.gateway.cli import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              "    status = main(sys.argv[1:])\n"
              "import numpy\n"
              "print(status, os.environ.get('OPENBLAS_NUM_THREADS', '-'), "
              "len(os.listdir('/proc/self/task')))\n")
    argv = ["local", "--query", SEQ_AB, "--events", events_csv, "--out", tmp_path / "m.jsonl"]
    for user, expected in ((None, "0 1 1"), ("2", "0 2")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        env["PYTHONPATH"] = str(ROOT)
        if user is not None:
            env["OPENBLAS_NUM_THREADS"] = user
        proc = subprocess.run([sys.executable, "-c", script, *map(str, argv)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split()[:len(expected.split())] == expected.split()


def test_matches_reach_a_stdout_without_a_byte_buffer(monkeypatch, events_csv):
    """Standard output that takes only text (e.g. redirected to a StringIO) still gets every
    match line, also when the writer hands them over in pieces of WRITE_BYTES."""
    import contextlib
    import io
    monkeypatch.setattr("raycep.gateway.cli.writer.WRITE_BYTES", 16)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = cli.main(["local", "--query", SEQ_AB, "--events", events_csv,
                           "--workers", "1"])
    assert status == 0
    lines = text.getvalue().splitlines()
    assert pairs([json.loads(line) for line in lines[:-1]]) == [(1, 10), (5, 10)]
    assert json.loads(lines[-1])["matches"] == 2
