"""`raycep local` against OpenCEP and FlinkCEP, end to end, repeated: runs the shared peers
script (`../shared/peers/compare.py`: same events, same pattern, identical match sets, one run
per repetition), then prints the median ratios, peak memory and the issue-14 targets.

    eval "$(../shared/peers/setup.sh GIT_DIR)"     # once: OpenCEP + FlinkCEP jars
    python3 -m benchmarks.bench_peers [--repeat 3] [--no-flink] [--only NAME] [--workers N]

``raycep local`` runs as a user runs it: by default in as many time slices (processes) as the
machine gives it CPUs (``--workers``); ``--workers 1`` measures one process.

The machine is shared and noisy: each repetition runs every system on the same events one
after another, so each ratio compares like with like; the median of the repetitions is the
figure to quote, with its range. compare.py leaves its directory of events and matches
(~90 MB) in the system's temporary directory; it is removed after each repetition, so every
repetition writes its matches into the same amount of free memory (on this VM a page the
kernel's file cache has not used before costs several times more to write: 71 MB of matches
took 0.04-0.16 s instead of 0.013 s once 1 GB of such files had piled up,
benchmarks/PEERS_RESULTS.md).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPARE = os.path.join(os.path.dirname(ROOT), "shared", "peers", "compare.py")

#: (workload, system) -> the ratio peer/raycep issue 14 asks for (median of the runs)
TARGETS = {
    ("seq3_w60_100k", "OpenCEP"): 50.0,
    ("seq3_w60_100k", "FlinkCEP"): 100.0,
    ("seq3_w600_10k", "OpenCEP"): 100.0,
}

_HEAD = re.compile(r"^(\w+): (\d+) events, (\d+) matches .*identical: (\w+)\)")
_RAYCEP = re.compile(r"^\s+raycep\s+([\d,]+) ev/s\s+([\d.]+) s\s+(\d+) MB")
_OPENCEP = re.compile(r"^\s+OpenCEP\s+([\d,]+) ev/s\s+([\d.]+) s\s+(\d+) MB\s+ratio\s+([\d.]+)x")
_FLINK = re.compile(r"^\s+FlinkCEP\s+([\d,]+) ev/s\s+([\d.]+) s .*ratio\s+([\d.]+)x\s+"
                    r"identical: (\w+)")


def parse(output: str) -> dict:
    """compare.py's output -> {workload: {"identical": bool, "raycep_s", "raycep_mb",
    "OpenCEP": ratio, "OpenCEP_mb", "FlinkCEP": ratio (if run)}}."""
    runs: dict = {}
    current = None
    for line in output.splitlines():
        m = _HEAD.match(line)
        if m:
            current = runs[m.group(1)] = {"identical": m.group(4) == "yes",
                                          "matches": int(m.group(3))}
            continue
        if current is None:
            continue
        if m := _RAYCEP.match(line):
            current["raycep_s"], current["raycep_mb"] = float(m.group(2)), int(m.group(3))
        elif m := _OPENCEP.match(line):
            current["OpenCEP"], current["OpenCEP_mb"] = float(m.group(4)), int(m.group(3))
        elif m := _FLINK.match(line):
            current["FlinkCEP"] = float(m.group(3))
            current["identical"] &= m.group(4) == "yes"
    return runs


def summary(runs: list) -> list:
    """Lines: per workload the median (range) of each ratio over the repetitions, raycep's
    and OpenCEP's peak RSS, whether every run had identical matches, and each target."""
    out = []
    names = sorted({name for run in runs for name in run})
    for name in names:
        got = [run[name] for run in runs if name in run]
        same = all(g["identical"] for g in got)
        secs = [g["raycep_s"] for g in got if "raycep_s" in g]
        out.append(f"{name}: {len(got)} run(s), matches identical in all: "
                   f"{'yes' if same else 'NO'}; raycep {statistics.median(secs):.3f} s "
                   f"(median), peak RSS {max(g.get('raycep_mb', 0) for g in got)} MB vs "
                   f"OpenCEP {max(g.get('OpenCEP_mb', 0) for g in got)} MB")
        for system in ("OpenCEP", "FlinkCEP"):
            ratios = [g[system] for g in got if system in g]
            if not ratios:
                continue
            med = statistics.median(ratios)
            line = f"  {system:9} {med:6.1f}x median ({min(ratios):.1f}-{max(ratios):.1f}x)"
            target = TARGETS.get((name, system))
            if target is not None:
                line += f"   target >= {target:g}x: {'met' if med >= target else 'not met'}"
            out.append(line)
        if name == "seq3_w600_10k":
            rc = max(g.get("raycep_mb", 0) for g in got)
            oc = min(g.get("OpenCEP_mb", 0) for g in got)
            out.append(f"  peak RSS {rc} MB vs OpenCEP {oc} MB   target below OpenCEP's: "
                       f"{'met' if rc < oc else 'not met'}")
    return out


def _leftovers() -> list:
    """The directories compare.py makes (and leaves) in the system's temporary directory."""
    return glob.glob(os.path.join(tempfile.gettempdir(), "peers-*"))


def _with_workers(n: int) -> str:
    """An executable that runs ``raycep ... --workers n`` (compare.py takes the command to
    run as ``--raycep PATH``)."""
    raycep = shutil.which("raycep") or f"{sys.executable} -m gateway.cli"
    path = os.path.join(tempfile.mkdtemp(prefix="raycep-workers-"), "raycep")
    with open(path, "w") as script:
        script.write(f'#!/bin/sh\nexec {raycep} "$@" --workers {int(n)}\n')
    os.chmod(path, 0o755)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-flink", action="store_true")
    ap.add_argument("--only")
    ap.add_argument("--compare", default=COMPARE, help="path of the peers' compare.py")
    ap.add_argument("--workers", type=int, default=None,
                    help="raycep local --workers N (default: raycep's own default)")
    args = ap.parse_args(argv)
    if not os.environ.get("OPENCEP_DIR"):
        print("error: OPENCEP_DIR is not set: fetch github:ilya-kolchinsky/OpenCEP, then "
              "eval \"$(../shared/peers/setup.sh GIT_DIR)\" (see ../shared/peers/README.md)",
              file=sys.stderr)
        return 2
    if not os.path.isfile(args.compare):
        print(f"error: {args.compare} not found (--compare PATH)", file=sys.stderr)
        return 2
    cmd = [sys.executable, args.compare] + (["--no-flink"] if args.no_flink else []) + \
        (["--only", args.only] if args.only else [])
    if args.workers is not None:
        cmd += ["--raycep", _with_workers(args.workers)]
    runs = []
    for k in range(1, args.repeat + 1):
        print(f"--- run {k}/{args.repeat}: {' '.join(cmd)}", flush=True)
        before = set(_leftovers())
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        finally:
            for path in set(_leftovers()) - before:
                shutil.rmtree(path, ignore_errors=True)
        sys.stdout.write(done.stdout)
        if done.returncode:
            sys.stderr.write(done.stderr[-2000:])
            return done.returncode
        runs.append(parse(done.stdout))
    print("--- summary")
    print("\n".join(summary(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
