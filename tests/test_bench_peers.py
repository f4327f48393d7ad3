"""benchmarks.bench_peers reads the peers script's output and judges the targets (no timing)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_peers  # noqa: E402

RUN = """\
seq3_w60_100k: 100000 events, 24889 matches (OpenCEP 24889, identical: yes)
  raycep     {rate:>10} ev/s     {secs} s     150 MB
  OpenCEP      4,958 ev/s    20.169 s      36 MB   ratio   {oc}x
  FlinkCEP     4,879 ev/s    20.495 s (job 25.4 s - start-up 4.9 s)   ratio   {fl}x   identical: {same}
seq3_w600_10k: 10000 events, 219567 matches (OpenCEP 219567, identical: yes)
  raycep      14,620 ev/s     0.684 s     {mb} MB
  OpenCEP        683 ev/s    14.645 s      97 MB   ratio   21.4x
"""


def run(oc, fl, same="yes", mb=79):
    return RUN.format(rate="200,000", secs="0.500", oc=oc, fl=fl, same=same, mb=mb)


def test_parse_reads_ratios_memory_and_identity():
    got = bench_peers.parse(run("51.2", "40.1"))
    w60 = got["seq3_w60_100k"]
    assert w60["OpenCEP"] == 51.2 and w60["FlinkCEP"] == 40.1 and w60["identical"]
    assert w60["raycep_s"] == 0.5 and w60["raycep_mb"] == 150 and w60["matches"] == 24889
    assert got["seq3_w600_10k"]["OpenCEP_mb"] == 97


def test_summary_takes_the_median_and_judges_each_target():
    runs = [bench_peers.parse(run(oc, "40.0")) for oc in ("45.0", "52.0", "60.0")]
    text = "\n".join(bench_peers.summary(runs))
    assert "OpenCEP     52.0x median (45.0-60.0x)   target >= 50x: met" in text
    assert "FlinkCEP    40.0x median (40.0-40.0x)   target >= 100x: not met" in text
    assert "21.4x median (21.4-21.4x)   target >= 100x: not met" in text
    assert "peak RSS 79 MB vs OpenCEP 97 MB   target below OpenCEP's: met" in text
    assert "matches identical in all: yes" in text


def test_a_run_with_different_matches_is_flagged():
    runs = [bench_peers.parse(run("52", "40")), bench_peers.parse(run("52", "40", same="NO"))]
    assert "matches identical in all: NO" in "\n".join(bench_peers.summary(runs))


def test_memory_above_the_peer_is_not_met():
    text = "\n".join(bench_peers.summary([bench_peers.parse(run("52", "40", mb=130))]))
    assert "peak RSS 130 MB vs OpenCEP 97 MB   target below OpenCEP's: not met" in text


def test_without_the_peers_set_up_it_says_how(monkeypatch, capsys):
    monkeypatch.delenv("OPENCEP_DIR", raising=False)
    assert bench_peers.main(["--repeat", "1"]) == 2
    assert "setup.sh" in capsys.readouterr().err


def test_workers_wraps_raycep_with_the_option(tmp_path):
    """--workers N: compare.py runs ``raycep local ... --workers N`` (a wrapper it is given
    as --raycep); the job's summary says how many slices it ran in."""
    import json
    import subprocess

    from benchmarks.bench_peers import _with_workers
    events = tmp_path / "e.csv"
    events.write_text("type,ts,x\nA,1,1\nB,2,2\n")
    wrapper = _with_workers(1)
    done = subprocess.run([wrapper, "local", "--query",
                           "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 5 seconds",
                           "--events", str(events)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["workers"] == 1 and summary["matches"] == 1
    assert open(wrapper).read().rstrip().endswith("--workers 1")
