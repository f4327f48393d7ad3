"""The raycep image run as the Helm chart runs it, on one machine with podman (deploy/README.md,
"The image, tried"). Run through deploy/container-smoke.sh.

The chart is rendered (helm-python-sdk, as tests/test_helm.py does) and its objects are played
by containers on the host network, as KubeRay would start them: the head pod's container with
its command, environment and ConfigMap files (start-head.sh: `ray start --head` from
$KUBERAY_GEN_RAY_START_CMD, `raycep serve`, the chart's queries), worker pods running KubeRay's
`ray start --address ...`, one host directory for each volume (data, checkpoints), and the
ingestion RayJob's submitter (`ray job submit` with the RayJob's runtime environment).

Steps, each compared with `raycep local` run on this host over the same queries and events:
  demo     `raycep demo` in the image (and in IMAGE-core, if built) prints "verified": true
  client   head + 2 workers; the sample queries registered and the sample ticks sent from this
           host with the Python client; at batch 15 of 40, a worker container running a
           partition actor is killed (SIGKILL: a lost node) and the stream goes on; matches
           read back (API and the JSONL sink, every id once) == raycep local; then the head and
           the workers are killed and started again: queries, actor state and the sink survive
  ingest   a new cluster whose head registers the chart's queries; `raycep ingest` of the
           image's sample ticks as the chart's ingestion RayJob runs it, submitted from a third
           container; matches == raycep local
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
CHART = REPO / "helm" / "raycep"
TICKS = REPO / "examples" / "ticks.csv"
PREFIX = "raycep-smoke"
GCS_PORT = 6391              # head rayStartParams port (6379 may belong to another Ray here)
DASHBOARD_PORT = 8266        # KubeRay: 8265; moved for the same reason
GATEWAY_PORT = 8471
BATCH = 500


def say(text: str) -> None:
    print(f"[smoke] {text}", file=sys.stderr, flush=True)


def run(cmd: list, check=True, capture=True, timeout=None) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, text=True, capture_output=capture, timeout=timeout)
    if check and done.returncode != 0:
        raise SystemExit(f"[smoke] failed ({done.returncode}): {shlex.join(map(str, cmd))}\n"
                         f"{(done.stderr or '')[-3000:]}{(done.stdout or '')[-2000:]}")
    return done


# --------------------------------------------------------------------------- the chart

def render(image: str, extra: dict) -> list[dict]:
    import helm_python as helm
    import yaml
    repository, _, tag = image.rpartition(":")
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "head": {"rayStartParams": {"num-cpus": "1", "port": str(GCS_PORT),
                                    "dashboard-port": str(DASHBOARD_PORT)}},
        "gateway": {"port": GATEWAY_PORT, "matchesJsonl": True},
        # a volume every pod mounts (a ReadWriteMany claim on a real cluster; here one host dir)
        "checkpoints": {"volume": {"emptyDir": {}}},
        **extra,
    }
    with helm.Chart.load(str(CHART)) as chart:
        out = chart.render(values, name="smoke", namespace="default", is_install=True)
    out.pop("raycep/templates/NOTES.txt", None)
    return [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]


def kind(objects, k: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == k]
    return found


def env_of(container: dict, secrets: dict) -> dict:
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def secrets_of(objects) -> dict:
    out = {}
    for s in (o for o in objects if o["kind"] == "Secret"):
        data = {k: base64.b64decode(v).decode() for k, v in (s.get("data") or {}).items()}
        data.update(s.get("stringData") or {})
        out[s["metadata"]["name"]] = data
    return out


def start_params(params: dict) -> list[str]:
    return [f"--{k}={v}" for k, v in params.items()]


class Cluster:
    """The chart's RayCluster (and RayJob) played by podman containers."""

    def __init__(self, image: str, objects: list, work: pathlib.Path, workers: int):
        self.image = image
        self.secrets = secrets_of(objects)
        spec = kind(objects, "RayCluster")["spec"]
        ray_auth = spec.get("authOptions", {}).get("secretName")
        self.ray_env = {"RAY_AUTH_MODE": "token",
                        "RAY_AUTH_TOKEN": self.secrets[ray_auth]["auth_token"]} if ray_auth else {}
        head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
        self.head_env = env_of(head, self.secrets)
        self.token = self.head_env["RAYCEP_TOKEN"]
        self.url = f"http://127.0.0.1:{self.head_env['RAYCEP_PORT']}"
        self.dirs = {name: work / name for name in ("config", "data", "checkpoints")}
        for d in self.dirs.values():
            d.mkdir(parents=True)
        for name, text in kind(objects, "ConfigMap")["data"].items():
            (self.dirs["config"] / name).write_text(text)
        for d in ("data", "checkpoints"):
            os.chown(self.dirs[d], 1000, 1000)          # the pods' runAsUser / fsGroup
        self.head_cmd = head["command"], head["args"]
        self.head_mounts = {m["name"]: m["mountPath"] for m in head["volumeMounts"]}
        group = spec["workerGroupSpecs"][0]
        worker = group["template"]["spec"]["containers"][0]
        self.worker_cmd = worker["command"], worker["args"]
        self.worker_mounts = {m["name"]: m["mountPath"] for m in worker.get("volumeMounts", [])}
        self.worker_params = group["rayStartParams"]
        self.head_params = spec["headGroupSpec"]["rayStartParams"]
        self.workers = [f"{PREFIX}-worker-{i}" for i in range(1, workers + 1)]
        shm = [v["emptyDir"].get("sizeLimit") for v in
               spec["headGroupSpec"]["template"]["spec"].get("volumes", [])
               if v.get("emptyDir", {}).get("medium") == "Memory"]
        self.shm = str(shm[0] if shm else "64Mi")       # the chart's ray.shmSize

    def volumes(self, mounts: dict) -> list[str]:
        """-v flags: the ConfigMap, the registry volume and the checkpoints volume."""
        out = []
        for name, path in mounts.items():
            if name == "config":
                out += ["-v", f"{self.dirs['config']}:{path}:ro"]
            elif name == "data":
                out += ["-v", f"{self.dirs['data']}:{path}"]
            elif name.endswith("checkpoints"):
                out += ["-v", f"{self.dirs['checkpoints']}:{path}"]
        return out

    def container(self, name: str, command, args, env: dict, mounts: dict) -> None:
        flags = ["podman", "run", "-d", "--name", name, "--network", "host",
                 "--shm-size", self.shm.replace("Gi", "g").replace("Mi", "m"),
                 "--user", "1000:1000", "--entrypoint", json.dumps(command)]
        for k, v in env.items():
            flags += ["-e", f"{k}={v}"]
        run(flags + self.volumes(mounts) + [self.image, *args])

    def start(self) -> None:
        head_start = ["ray", "start", "--head", "--block", *start_params(self.head_params)]
        self.container(f"{PREFIX}-head", *self.head_cmd,
                       {**self.head_env, **self.ray_env,
                        "KUBERAY_GEN_RAY_START_CMD": shlex.join(head_start)}, self.head_mounts)
        for name in self.workers:
            self.start_worker(name)

    def start_worker(self, name: str) -> None:
        # KubeRay's worker command; the agent port is 0 because every "pod" shares the host's
        # network here (each pod has its own address on Kubernetes)
        cmd = ["ray", "start", "--block", f"--address=127.0.0.1:{GCS_PORT}",
               "--dashboard-agent-listen-port=0", *start_params(self.worker_params)]
        run(["podman", "rm", "-f", "-i", name], check=False)
        self.container(name, *self.worker_cmd,
                       {**self.ray_env, "KUBERAY_GEN_RAY_START_CMD": shlex.join(cmd)},
                       self.worker_mounts)

    def client(self, wait=300.0):
        from raycep.cep.errors import UnavailableError
        from raycep.gateway.client import connect
        deadline = time.monotonic() + wait
        while True:
            try:
                return connect(self.url, token=self.token, retry_for=180.0)
            except UnavailableError:
                head = f"{PREFIX}-head"
                if "running" not in run(["podman", "inspect", "-f", "{{.State.Status}}", head],
                                        check=False).stdout:
                    raise SystemExit(f"[smoke] {head} stopped:\n{logs(head)}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"[smoke] no gateway at {self.url} after {wait:.0f} s:\n"
                                     f"{logs(PREFIX + '-head')}")
                time.sleep(2)

    def nodes_alive(self) -> int:
        out = run(["podman", "exec", f"{PREFIX}-head", "ray", "list", "nodes", "--format",
                   "json", "--filter", "state=ALIVE"], check=False).stdout
        try:
            return len(json.loads(out))
        except ValueError:
            return 0

    def where(self, process: str) -> list[str]:
        """The containers running a process whose command line contains ``process``."""
        found = []
        for name in [f"{PREFIX}-head", *self.workers]:
            ps = run(["podman", "exec", name, "ps", "-eo", "args"], check=False).stdout
            found += [name] * ps.count(process)
        return found

    def stop(self) -> None:
        names = [f"{PREFIX}-submitter", *self.workers, f"{PREFIX}-head"]
        run(["podman", "rm", "-f", "-i", "-t", "5", *names], check=False)


def logs(name: str, lines: int = 40) -> str:
    """The container's last lines, stdout and stderr."""
    done = run(["podman", "logs", "--tail", str(lines), name], check=False)
    return done.stdout + done.stderr


# --------------------------------------------------------------------------- the checks

def local_matches(queries: pathlib.Path, events: pathlib.Path, key: str) -> dict:
    """{query: {canonical match}} of `raycep local` (run on this host) over the same files."""
    out = pathlib.Path(tempfile.mkstemp(suffix=".jsonl")[1])
    run([sys.executable, "-m", "raycep", "local", "-q", str(queries), "-e", str(events),
         "--key", key, "--out", str(out)])
    found = {}
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        found.setdefault(rec["query"], set()).add(canonical(rec))
    out.unlink()
    return found


def canonical(record: dict):
    """A match as (query, ((variable, event ids), ...)): the same for a line of raycep local and
    a match record of the gateway."""
    def ids(bound):
        return tuple(e["id"] for e in bound) if isinstance(bound, list) else (bound["id"],)
    return record["query"], tuple(sorted((v, ids(b)) for v, b in record["events"].items()))


def read_back(client, names) -> dict:
    """{query: {canonical match}}: every match minus the retracted ones, through the API."""
    found = {}
    for name in names:
        since, live = 0, {}
        while True:
            page = client.matches(name, since=since, limit=1000)
            for rec in page.matches:
                if rec.get("retracted"):
                    live.pop(rec["id"], None)
                else:
                    live[rec["id"]] = canonical(rec)
            if not page.matches:
                break
            since = page.next
        found[name] = set(live.values())
    return found


def sink_check(path: pathlib.Path) -> tuple[int, int]:
    """(records, distinct (id, retracted)) of the JSONL sink."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return len(recs), len({(r["id"], bool(r.get("retracted"))) for r in recs})


def settle(client, timeout=120.0) -> None:
    if not client.drained(timeout, every=0.5):
        raise SystemExit("[smoke] the actors' outboxes did not drain")


def compare(label: str, got: dict, want: dict) -> bool:
    ok = got == want
    counts = {q: len(m) for q, m in sorted(got.items())}
    say(f"{label}: matches per query {counts}; raycep local "
        f"{ {q: len(m) for q, m in sorted(want.items())} } -> {'EQUAL' if ok else 'DIFFERENT'}")
    return ok


# --------------------------------------------------------------------------- the steps

def step_demo(image: str, work: pathlib.Path, report: dict) -> None:
    """`raycep demo` in the image, and in its core image (IMAGE-core) when there is one."""
    started = time.monotonic()
    run(["podman", "run", "--rm", "--network", "host", image, "--help"])
    report["container_start_s"] = round(time.monotonic() - started, 2)
    core = image + "-core"
    has_core = run(["podman", "image", "exists", core], check=False).returncode == 0
    for name, label in [(image, "demo")] + ([(core, "core_demo")] if has_core else []):
        started = time.monotonic()
        done = run(["podman", "run", "--rm", "--network", "host", "--shm-size", "1g", name,
                    "demo"], check=False, timeout=600)
        report[f"{label}_s"] = round(time.monotonic() - started, 1)
        summary = {}
        for line in reversed(done.stdout.splitlines()):
            try:
                summary = json.loads(line)
                break
            except ValueError:
                continue
        report[f"{label}_verified"] = summary.get("verified") is True
        say(f"demo in {name}: exit {done.returncode}, verified {summary.get('verified')}, "
            f"{report[f'{label}_s']} s (container start {report['container_start_s']} s)")
        if not report[f"{label}_verified"]:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)


def step_client(image: str, work: pathlib.Path, report: dict) -> None:
    from raycep.cep.io.sources import read_events
    from raycep.cep.lang.parser import parse_queries
    objects = render(image, {"gateway": {"port": GATEWAY_PORT, "matchesJsonl": True,
                                         "queries": ""}})
    cluster = Cluster(image, objects, work / "client", workers=2)
    key = cluster.head_env["RAYCEP_KEY"]
    try:
        started = time.monotonic()
        cluster.start()
        client = cluster.client()
        report["cluster_ready_s"] = round(time.monotonic() - started, 1)
        while cluster.nodes_alive() < 3 and time.monotonic() - started < 180:
            time.sleep(2)
        say(f"client: gateway at {cluster.url} after {report['cluster_ready_s']} s, "
            f"{cluster.nodes_alive()} Ray nodes")
        queries = parse_queries((REPO / "examples" / "queries.cep").read_text())
        for q in queries:
            client.register(q.text, name=q.name)
        events = list(read_events(str(TICKS), key_attr=key))
        rows = [{"type": e.type, "ts": e.ts, **e.attrs} for e in events]
        batches = [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]
        victim = None
        for n, batch in enumerate(batches, start=1):
            t = time.monotonic()
            ack = client.send(batch)
            if victim and "recovery_s" not in report:
                report["recovery_s"] = round(time.monotonic() - t, 1)
            if ack["events"] != len(batch) or ack.get("bad_rows"):
                raise SystemExit(f"[smoke] batch {n}: {ack}")
            if n == len(batches) * 3 // 8:
                hosts = [c for c in cluster.where("PartitionWorker") if c != f"{PREFIX}-head"]
                if not hosts:
                    say("client: no partition actor runs on a worker; killing none")
                    continue
                victim = hosts[0]
                say(f"client: batch {n}/{len(batches)} sent; partition actors on "
                    f"{cluster.where('PartitionWorker')}; killing {victim} (SIGKILL, a lost node)")
                run(["podman", "kill", "-s", "KILL", victim])
        if victim:
            say(f"client: the batch after the kill was acknowledged after "
                f"{report['recovery_s']} s; restarting {victim} (as Kubernetes would)")
            cluster.start_worker(victim)
        client.advance(max(e.ts for e in events) + 100.0, force=True)
        settle(client)
        stats = client.stats()["actors"]
        report["recoveries"] = {a: s.get("recoveries", 0) for a, s in stats.items()}
        report["partition_actors_after"] = cluster.where("PartitionWorker")
        got = read_back(client, [q.name for q in queries])
        want = local_matches(REPO / "examples" / "queries.cep", TICKS, key)
        report["client_equal"] = compare("client", got, want)
        records, distinct = sink_check(cluster.dirs["data"] / "matches.jsonl")
        report["sink_records"], report["sink_distinct"] = records, distinct
        say(f"client: JSONL sink {records} records, {distinct} distinct; recoveries "
            f"{report['recoveries']}; partition actors now on {report['partition_actors_after']}")
        report["client_ok"] = (report["client_equal"] and records == distinct
                               and (victim is None or sum(report["recoveries"].values()) >= 1))
        report["restart_ok"] = restart(cluster, batches[-4:], want)
    finally:
        if not report.get("client_ok"):
            say("head log tail:\n" + logs(f"{PREFIX}-head"))
        cluster.stop()


def restart(cluster: Cluster, resend: list, want: dict) -> bool:
    """The head pod lost and started again (its container killed, then started with the same
    volumes, as the kubelet does), the worker pods too (their raylets end with the head's
    GCS): the queries come back from the registry, every actor from its checkpoint; batches
    sent again by a producer that never learnt whether they landed are recognised as
    duplicates; the sink still holds each match once."""
    head = f"{PREFIX}-head"
    t = time.monotonic()
    run(["podman", "kill", "-s", "KILL", head])
    run(["podman", "rm", "-f", "-i", *cluster.workers])
    run(["podman", "start", head])
    for name in cluster.workers:
        cluster.start_worker(name)
    client = cluster.client()
    seconds = round(time.monotonic() - t, 1)
    names = sorted(q["id"] for q in client.queries())
    dups = sum(client.send(batch)["duplicates"] for batch in resend)
    settle(client)
    actors = client.stats()["actors"]
    restored = {a: bool((s.get("recovery") or {}).get("from_checkpoint"))
                for a, s in actors.items()}
    sink = cluster.dirs["data"] / "matches.jsonl"
    records, distinct = sink_check(sink)
    got = {}
    for line in sink.read_text().splitlines():
        rec = json.loads(line)
        if not rec.get("retracted"):
            got.setdefault(rec["query"], set()).add(canonical(rec))
    sent = sum(map(len, resend))
    ok = (names == sorted(want) and dups == sent and all(restored.values())
          and records == distinct and got == want)
    say(f"restart: head and workers killed and started again; gateway back after {seconds} s; "
        f"queries {names}; actors restored from their checkpoints {restored}; {dups} of "
        f"{sent} events sent again recognised as duplicates; sink {records} records, "
        f"{distinct} distinct, {'== raycep local' if got == want else 'DIFFERENT'} -> "
        f"{'OK' if ok else 'FAILED'}")
    return ok


def step_ingest(image: str, work: pathlib.Path, report: dict) -> None:
    objects = render(image, {"ingestion": {"enabled": True}})
    cluster = Cluster(image, objects, work / "ingest", workers=2)
    job = kind(objects, "RayJob")["spec"]
    import yaml
    runtime_env = yaml.safe_load(job["runtimeEnvYAML"])
    submitter = job.get("submitterPodTemplate", {}).get("spec", {}).get("containers", [{}])[0]
    try:
        started = time.monotonic()
        cluster.start()
        client = cluster.client()
        while cluster.nodes_alive() < 3 and time.monotonic() - started < 180:
            time.sleep(2)
        # KubeRay's submitter (K8sJobMode): `ray job submit` against the head's dashboard
        cmd = ["ray", "job", "submit", "--address", f"http://127.0.0.1:{DASHBOARD_PORT}",
               "--runtime-env-json", json.dumps(runtime_env), "--",
               *shlex.split(job["entrypoint"])]
        env = env_of(submitter, cluster.secrets) if submitter else cluster.ray_env
        flags = ["podman", "run", "--name", f"{PREFIX}-submitter", "--network", "host",
                 "--user", "1000:1000", "--entrypoint", cmd[0]]
        for k, v in env.items():
            flags += ["-e", f"{k}={v}"]
        say(f"ingest: {shlex.join(cmd[:4])} ... -- {job['entrypoint']} "
            f"(RAYCEP_INGEST_ARGS {runtime_env['env_vars']['RAYCEP_INGEST_ARGS']})")
        t = time.monotonic()
        done = run(flags + [image, *cmd[1:]], check=False, timeout=1200)
        report["ingest_job_s"] = round(time.monotonic() - t, 1)
        tail = (done.stdout or "").strip().splitlines()
        summary = next((json.loads(x) for x in reversed(tail) if x.startswith("{")), {})
        report["ingest_summary"] = {k: summary.get(k) for k in
                                    ("rows", "events_sent", "dead_letters", "events_per_s",
                                     "seconds", "spark_startup_seconds")}
        say(f"ingest: job exit {done.returncode} after {report['ingest_job_s']} s; "
            f"summary {report['ingest_summary']}")
        if done.returncode != 0:
            print("\n".join(tail[-40:]), done.stderr[-3000:], file=sys.stderr)
        settle(client)
        queries_file = cluster.dirs["config"] / "queries.cep"
        from raycep.cep.lang.parser import parse_queries
        names = [q.name for q in parse_queries(queries_file.read_text())]
        got = read_back(client, names)
        want = local_matches(queries_file, TICKS, cluster.head_env["RAYCEP_KEY"])
        report["ingest_ok"] = (done.returncode == 0 and summary.get("dead_letters") == 0
                               and compare("ingest", got, want))
    finally:
        if not report.get("ingest_ok"):
            say("head log tail:\n" + logs(f"{PREFIX}-head"))
        cluster.stop()


STEPS = {"demo": step_demo, "client": step_client, "ingest": step_ingest}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", required=True, help="the full image (e.g. raycep:0.1.0)")
    ap.add_argument("--steps", default="demo,client,ingest",
                    help="comma-separated: demo, client, ingest (default all)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    steps = args.steps.split(",")
    unknown = set(steps) - set(STEPS)
    if unknown:
        ap.error(f"unknown step(s): {', '.join(sorted(unknown))}")
    inspect = run(["podman", "image", "inspect", "--format", "{{.Id}} {{.Digest}} {{.Size}}",
                   args.image], check=False)
    if inspect.returncode != 0:
        ap.error(f"no image {args.image}: build it with deploy/build-image.sh")
    image_id, digest, size = inspect.stdout.split()
    report = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "image": args.image,
              "id": image_id[:12], "digest": digest, "size_mb": round(int(size) / 2**20)}
    run(["podman", "rm", "-f", "-i", f"{PREFIX}-head", f"{PREFIX}-worker-1",
         f"{PREFIX}-worker-2", f"{PREFIX}-submitter"], check=False)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"{PREFIX}-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    say(f"image {args.image} ({report['id']}, {report['size_mb']} MiB); work dir {work}")
    try:
        for step in steps:
            STEPS[step](args.image, work, report)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ok = all(report.get(k, True) for k in ("demo_verified", "core_demo_verified", "client_ok",
                                           "restart_ok", "ingest_ok"))
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
