"""The Helm chart helm/raycep, checked offline: rendered and linted (strict) with the real Helm
SDK (helm-python-sdk embeds Helm's Go library: no helm binary, no download), core kinds
validated with kubernetes-validate --strict, RayCluster / RayJob validated against KubeRay's
CRD schemas (tests/data/kuberay), broken values rejected with the field's name, and the
scripts the head pod and the ingestion job run, run here.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tomllib
import urllib.request

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "raycep"
CRDS = pathlib.Path(__file__).resolve().parent / "data" / "kuberay"
KUBE_VERSION = "1.30.0"
RELEASE, NAMESPACE = "cep", "streams"
FULLNAME = "cep-raycep"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

INGESTION = {"ingestion": {
    "enabled": True, "paths": ["/data/ticks a.csv", "/data/2026 ü.csv"], "format": "csv",
    "type": "Stock", "tsFormat": "ms", "key": "symbol", "idColumn": "id",
    "attributes": ["price", "volume"], "batchSize": 500, "executorCores": 2,
    "dataVolume": {"persistentVolumeClaim": {"claimName": "events", "readOnly": True}}}}
VALUE_SETS = {
    "defaults": {},
    "ingestion": INGESTION,
    "nodeport": {"service": {"type": "NodePort", "port": 80, "nodePort": 30470}},
    "loadbalancer": {"service": {"type": "LoadBalancer", "annotations": {"a/b": "c"}}},
    "no-persistence": {"persistence": {"enabled": False}},
    "monitoring": {"metrics": {"scrapeAnnotations": True,
                               "serviceMonitor": {"enabled": True, "interval": "15s",
                                                  "labels": {"release": "kps"}},
                               "podMonitor": {"enabled": True, "interval": "20s",
                                              "labels": {"release": "kps"}},
                               "grafanaDashboard": {"enabled": True}},
                   "service": {"annotations": {"a/b": "c"}}},
    "shared-checkpoints": {"checkpoints": {"volume": {"persistentVolumeClaim": {
        "claimName": "raycep-checkpoints"}}, "mountPath": "/ckpt"}},
    "existing-secret-no-ray-auth": {"gateway": {"existingSecret": "my-token"},
                                    "ray": {"auth": "disabled", "shmSize": ""},
                                    "ingestion": {"enabled": True}},
    "two-groups": {
        "persistence": {"storageClass": "-", "size": "5Gi"},
        "imagePullSecrets": [{"name": "registry"}],
        "image": {"repository": "registry.example/raycep", "tag": "dev", "pullPolicy": "Always"},
        "workerGroups": [
            {"name": "small", "replicas": 1, "minReplicas": 0, "maxReplicas": 2},
            {"name": "big", "replicas": 3, "minReplicas": 3, "maxReplicas": 8,
             "rayStartParams": {"num-cpus": "4"}, "nodeSelector": {"pool": "cep"},
             "tolerations": [{"key": "cep", "operator": "Exists", "effect": "NoSchedule"}],
             "resources": {"requests": {"cpu": 4, "memory": "8Gi"},
                           "limits": {"cpu": "4", "memory": "8Gi"}}}]},
}


# --------------------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def chart():
    with helm.Chart.load(str(CHART)) as loaded:
        yield loaded


def render(chart, values: dict) -> tuple[list[dict], str]:
    """(the rendered objects, NOTES.txt) for these values, as `helm template` gives them."""
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = out.pop("raycep/templates/NOTES.txt", "")
    objects = [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]
    return objects, notes


def one(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def by_name(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected {kind} {name}, got {len(found)}"
    return found[0]


def head_container(objects):
    spec = one(objects, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    return spec["containers"][0], spec


def env_of(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def structural_to_jsonschema(node):
    """A CRD's OpenAPI v3 structural schema -> the JSON Schema the API server applies with strict
    field validation: an unknown field is an error (additionalProperties false wherever an
    object lists its properties, unless x-kubernetes-preserve-unknown-fields), an
    x-kubernetes-int-or-string field takes an integer or a string, nullable allows null.
    x-kubernetes-validations (CEL rules) are not evaluated here."""
    if isinstance(node, list):
        return [structural_to_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: structural_to_jsonschema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = structural_to_jsonschema(value)
        else:
            out[key] = value
    if out.get("x-kubernetes-int-or-string") and not {"anyOf", "oneOf", "type"} & out.keys():
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validator(kind: str, api_version: str):
    """A jsonschema validator for the served, stored version of KubeRay's CRD of ``kind``."""
    path = CRDS / f"ray.io_{kind.lower()}s.yaml"
    with open(path, encoding="utf-8") as handle:
        crd = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["names"]["kind"] == kind
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group
    [entry] = [v for v in crd["spec"]["versions"]
               if v["name"] == version and v["served"] and v["storage"]]
    schema = structural_to_jsonschema(entry["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def crd_errors(obj: dict) -> list[str]:
    validator = crd_validator(obj["kind"], obj["apiVersion"])
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in validator.iter_errors(obj)]


def k8s_errors(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


def pod_templates(obj: dict) -> list[dict]:
    """The pod templates inside a RayCluster / RayJob."""
    if obj["kind"] == "RayCluster":
        spec = obj["spec"]
        return [spec["headGroupSpec"]["template"]] + [g["template"]
                                                      for g in spec["workerGroupSpecs"]]
    return [obj["spec"]["submitterPodTemplate"]] if "submitterPodTemplate" in obj["spec"] else []


# --------------------------------------------------------------------------- every value set

def test_helm_is_the_embedded_sdk_not_a_download():
    """helm-python-sdk loads Helm's Go SDK from the wheel itself: nothing fetched at run time."""
    library = pathlib.Path(helm.library_path).resolve()
    assert library.is_file()
    assert pathlib.Path(helm.__file__).resolve().parent in library.parents
    assert helm.helm_sdk_version().startswith("v4.")


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_strict_passes(name):
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True, namespace=NAMESPACE,
                       kube_version=f"v{KUBE_VERSION}")
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_pass_kubernetes_and_kuberay_schemas(chart, name):
    objects, _ = render(chart, VALUE_SETS[name])
    kinds = sorted(o["kind"] for o in objects)
    assert {"ConfigMap", "Service", "RayCluster"} <= set(kinds)
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert DNS_LABEL.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, where
        if obj["apiVersion"].startswith("ray.io/"):
            assert crd_errors(obj) == [], where
            for template in pod_templates(obj):       # the pod specs, by Kubernetes' own schema
                as_core = {"apiVersion": "v1", "kind": "PodTemplate",
                           "metadata": {"name": "t"}, "template": template}
                assert k8s_errors(as_core) == [], where
        elif obj["apiVersion"] == "monitoring.coreos.com/v1":
            assert obj["kind"] in ("ServiceMonitor", "PodMonitor"), where  # test_monitoring
        else:
            assert k8s_errors(obj) == [], where


# --------------------------------------------------------------------------- what they contain

def test_defaults(chart):
    objects, notes = render(chart, {})
    assert sorted(o["kind"] for o in objects) == [
        "ConfigMap", "PersistentVolumeClaim", "RayCluster", "Secret", "Secret", "Service"]
    cluster = one(objects, "RayCluster")
    assert cluster["metadata"]["name"] == FULLNAME
    assert cluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    spec = cluster["spec"]
    assert spec["rayVersion"] == "2.60.0"
    assert spec["authOptions"] == {"mode": "token", "secretName": f"{FULLNAME}-ray-auth"}
    head, head_pod = head_container(objects)
    assert head["image"] == "raycep:0.1.0"                      # appVersion by default
    assert head["args"] == ["ulimit -n 65536; exec /bin/bash /etc/raycep/start-head.sh"]
    assert spec["headGroupSpec"]["rayStartParams"] == {"dashboard-host": "0.0.0.0",
                                                        "num-cpus": "1"}
    env = env_of(head)
    assert env["RAYCEP_TOKEN"] == {"secretKeyRef": {"name": FULLNAME, "key": "token"}}
    assert (env["RAYCEP_PORT"], env["RAYCEP_PARTITIONS"], env["RAYCEP_KEY"]) == \
        ("8470", "2", "symbol")
    assert {p["name"]: p["containerPort"] for p in head["ports"]}["gateway"] == 8470
    assert head["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "gateway"}
    assert head["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "gateway"}
    [group] = spec["workerGroupSpecs"]
    assert (group["groupName"], group["replicas"], group["minReplicas"],
            group["maxReplicas"]) == ("workers", 2, 1, 4)
    worker = group["template"]["spec"]["containers"][0]
    assert "$KUBERAY_GEN_RAY_START_CMD" in worker["args"][0]
    assert worker["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}

    service = one(objects, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "protocol": "TCP", "port": 8470,
                                         "targetPort": "gateway"}]
    head_labels = spec["headGroupSpec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= head_labels.items()
    for g in spec["workerGroupSpecs"]:               # the gateway runs on the head only
        assert not service["spec"]["selector"].items() <= \
            g["template"]["metadata"]["labels"].items()

    token = by_name(objects, "Secret", FULLNAME)["data"]["token"]
    assert len(base64.b64decode(token)) == 40
    claim = one(objects, "PersistentVolumeClaim")
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "storageClassName" not in claim["spec"]                # the cluster's default
    volumes = {v["name"]: v for v in head_pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    config = one(objects, "ConfigMap")["data"]
    assert "NAME dip_recovery" in config["queries.cep"]
    assert "kubectl port-forward -n streams svc/cep-raycep 8470:8470" in notes
    assert "client = raycep.connect()" in notes
    assert f"kubectl get secret {FULLNAME} -n {NAMESPACE}" in notes


def test_checkpoints_go_to_the_head_volume_or_a_volume_every_pod_mounts(chart):
    """raycep serve --checkpoint-dir (docs/guarantees.md, "Failures"): by default on the head's data
    volume; with checkpoints.volume, that volume on the head and every worker, so an actor
    restarted on another pod finds its state."""
    objects, _ = render(chart, {})
    head, _ = head_container(objects)
    assert env_of(head)["RAYCEP_CHECKPOINT_DIR"] == "/var/lib/raycep/checkpoints"
    objects, _ = render(chart, VALUE_SETS["shared-checkpoints"])
    head, head_pod = head_container(objects)
    assert env_of(head)["RAYCEP_CHECKPOINT_DIR"] == "/ckpt"
    assert {"name": "checkpoints", "mountPath": "/ckpt"} in head["volumeMounts"]
    volumes = {v["name"]: v for v in head_pod["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "raycep-checkpoints"
    for group in one(objects, "RayCluster")["spec"]["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        assert {"name": "checkpoints", "mountPath": "/ckpt"} in pod["containers"][0]["volumeMounts"]
        assert "checkpoints" in {v["name"] for v in pod["volumes"]}
    script = (CHART / "files" / "start-head.sh").read_text()
    assert '--checkpoint-dir "${RAYCEP_CHECKPOINT_DIR:-' in script


def test_the_gateway_waits_for_the_head_and_every_worker_replica(chart):
    """raycep serve --wait-for-nodes: the partition actors are placed once the workers have
    joined (else every one would stay on the head, which starts first)."""
    for name, nodes in (("defaults", "3"), ("two-groups", "5")):
        objects, _ = render(chart, VALUE_SETS[name])
        head, _ = head_container(objects)
        assert env_of(head)["RAYCEP_WAIT_FOR_NODES"] == nodes, name
    script = (CHART / "files" / "start-head.sh").read_text()
    assert '--wait-for-nodes "${RAYCEP_WAIT_FOR_NODES:-1}"' in script


def test_disorder_settings_reach_raycep_serve(chart):
    objects, _ = render(chart, {"gateway": {"disorderMode": "pessimistic", "slack": 2.5}})
    head, _ = head_container(objects)
    env = env_of(head)
    assert (env["RAYCEP_DISORDER_MODE"], env["RAYCEP_SLACK"], env["RAYCEP_ALPHA"]) == \
        ("pessimistic", "2.5", "2.5")
    script = (CHART / "files" / "start-head.sh").read_text()
    assert '--disorder-mode "${RAYCEP_DISORDER_MODE:-optimistic}"' in script


def test_a_warm_spark_for_ingest_is_a_value(chart):
    """``gateway.warmSpark`` reaches ``raycep serve --spark`` (off by default)."""
    for values, want in (({}, "false"), ({"gateway": {"warmSpark": True}}, "true")):
        objects, _ = render(chart, values)
        head, _ = head_container(objects)
        assert env_of(head)["RAYCEP_WARM_SPARK"] == want
    script = (CHART / "files" / "start-head.sh").read_text()
    assert '[ "${RAYCEP_WARM_SPARK:-false}" = "true" ] && serve+=(--spark)' in script


def test_autoscaling_is_a_value(chart):
    """``gateway.autoscale`` reaches ``raycep serve --autoscale`` (off by default)."""
    for values, want in (({}, ("", "10")),
                         ({"gateway": {"autoscale": "1..8", "autoscaleInterval": 5}},
                          ("1..8", "5"))):
        objects, _ = render(chart, values)
        head, _ = head_container(objects)
        env = env_of(head)
        assert (env["RAYCEP_AUTOSCALE"], env["RAYCEP_AUTOSCALE_INTERVAL"]) == want
    script = (CHART / "files" / "start-head.sh").read_text()
    assert '[ -n "${RAYCEP_AUTOSCALE:-}" ] && serve+=(--autoscale "$RAYCEP_AUTOSCALE"' in script


def test_monitoring_is_off_by_default_and_each_part_a_value(chart):
    objects, _ = render(chart, {})
    assert not {"ServiceMonitor", "PodMonitor"} & {o["kind"] for o in objects}
    assert "annotations" not in one(objects, "Service")["metadata"]
    objects, _ = render(chart, VALUE_SETS["monitoring"])
    service = one(objects, "Service")
    assert service["metadata"]["annotations"] == {
        "a/b": "c", "prometheus.io/scrape": "true", "prometheus.io/port": "8470",
        "prometheus.io/path": "/metrics"}
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    # it selects the gateway Service (and nothing else of the release) and its named port
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == \
        "gateway"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")
    secret = by_name(objects, "Secret", FULLNAME)          # the gateway's token
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {
        "name": secret["metadata"]["name"], "key": "token"}}
    assert "token" in secret["data"]
    # Ray's own export on every Ray pod: the port the PodMonitor names is on head and workers
    pods = one(objects, "PodMonitor")
    assert pods["metadata"]["labels"]["release"] == "kps"
    [endpoint] = pods["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["interval"]) == ("metrics", "20s")
    cluster = one(objects, "RayCluster")["spec"]
    templates = [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]]
    for template in templates:
        assert pods["spec"]["selector"]["matchLabels"].items() <= \
            template["metadata"]["labels"].items()
        ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"]
                 for p in c.get("ports", ())}
        assert ports["metrics"] == 8080
    dashboard = by_name(objects, "ConfigMap", f"{FULLNAME}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(dashboard["data"]["raycep.json"])
    assert board["uid"] == "raycep-overview" and len(board["panels"]) >= 6


def test_the_dashboard_reads_only_metrics_the_gateway_exposes():
    """Every metric name in the dashboard's queries is one GET /metrics gives (a gateway with
    a query, events and a read behind it)."""
    from prometheus_client.parser import text_string_to_metric_families
    cluster = InProcessCluster(2, "k", GatewaySettings(port=0, registry_path=None,
                                                       plan_every=0))
    cluster.start()
    try:
        client = connect(cluster.url)
        client.register("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 seconds", name="pair")
        client.send([{"type": t, "ts": float(i), "k": "x"} for i, t in enumerate("ABAB")])
        client.matches("pair")
        with urllib.request.urlopen(cluster.url + "/metrics", timeout=30) as resp:
            text = resp.read().decode()
    finally:
        cluster.stop()
    exposed = set()
    for family in text_string_to_metric_families(text):
        exposed |= {s.name for s in family.samples}
        if family.type == "gauge":          # one with no series yet (no live reader, no
            exposed.add(family.name)        # checkpoint) is declared all the same
    board = json.loads((CHART / "dashboards" / "raycep.json").read_text())
    used = set()
    for panel in board["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\b(raycep_[a-z_]+)", target["expr"]))
    assert used and used <= exposed, used - exposed
    assert {"raycep_query_matches_total", "raycep_send_stage_seconds_bucket"} <= used


def test_nodeport_service(chart):
    objects, notes = render(chart, VALUE_SETS["nodeport"])
    service = one(objects, "Service")["spec"]
    assert service["type"] == "NodePort"
    assert service["ports"][0]["port"] == 80 and service["ports"][0]["nodePort"] == 30470
    assert "port-forward" not in notes and "jsonpath=\"{.spec.ports[0].nodePort}\"" in notes


def test_loadbalancer_service(chart):
    objects, notes = render(chart, VALUE_SETS["loadbalancer"])
    service = one(objects, "Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert "nodePort" not in service["spec"]["ports"][0]
    assert service["metadata"]["annotations"] == {"a/b": "c"}
    assert "loadBalancer.ingress" in notes


def test_persistence_off_uses_an_empty_dir(chart):
    objects, _ = render(chart, VALUE_SETS["no-persistence"])
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    _, pod = head_container(objects)
    assert {v["name"]: v for v in pod["volumes"]}["data"] == {"name": "data", "emptyDir": {}}


def test_existing_secret_and_ray_auth_disabled(chart):
    objects, notes = render(chart, VALUE_SETS["existing-secret-no-ray-auth"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    head, pod = head_container(objects)
    assert env_of(head)["RAYCEP_TOKEN"] == {"secretKeyRef": {"name": "my-token", "key": "token"}}
    assert "authOptions" not in one(objects, "RayCluster")["spec"]
    assert "submitterPodTemplate" not in one(objects, "RayJob")["spec"]
    assert "shm" not in {v["name"] for v in pod["volumes"]}
    assert "kubectl get secret my-token" in notes


def test_given_token_and_worker_groups(chart):
    values = dict(VALUE_SETS["two-groups"], gateway={"token": "s3cret-token"})
    objects, _ = render(chart, values)
    assert base64.b64decode(by_name(objects, "Secret", FULLNAME)["data"]["token"]) == \
        b"s3cret-token"
    spec = one(objects, "RayCluster")["spec"]
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert list(groups) == ["small", "big"]
    big = groups["big"]
    assert (big["replicas"], big["minReplicas"], big["maxReplicas"]) == (3, 3, 8)
    assert big["rayStartParams"] == {"num-cpus": "4"}
    assert big["template"]["spec"]["nodeSelector"] == {"pool": "cep"}
    assert big["template"]["spec"]["tolerations"][0]["key"] == "cep"
    assert big["template"]["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert big["template"]["spec"]["containers"][0]["image"] == "registry.example/raycep:dev"
    assert one(objects, "PersistentVolumeClaim")["spec"]["storageClassName"] == ""


def test_ingestion_job(chart, tmp_path):
    objects, notes = render(chart, INGESTION)
    job = one(objects, "RayJob")
    assert job["metadata"]["name"] == f"{FULLNAME}-ingest"
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": FULLNAME}
    assert job["spec"]["entrypoint"] == "/bin/bash /etc/raycep/ingest.sh"
    assert job["spec"]["shutdownAfterJobFinishes"] is False
    submitter = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    assert env_of(submitter)["RAY_AUTH_TOKEN"] == \
        {"secretKeyRef": {"name": f"{FULLNAME}-ray-auth", "key": "auth_token"}}
    spec = one(objects, "RayCluster")["spec"]
    for template in pod_templates(one(objects, "RayCluster")):   # the data on every Ray pod
        pod = template["spec"]
        assert {"name": "ingest-data", "persistentVolumeClaim": {
            "claimName": "events", "readOnly": True}} in pod["volumes"]
        assert {"name": "ingest-data", "mountPath": "/data", "readOnly": True} in \
            pod["containers"][0]["volumeMounts"]
    assert len(spec["workerGroupSpecs"]) == 1
    assert f"kubectl get rayjob {FULLNAME}-ingest" in notes

    # the entrypoint script, run with the job's environment and a stand-in `raycep` that
    # prints its arguments
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    script = tmp_path / "ingest.sh"
    script.write_text(one(objects, "ConfigMap")["data"]["ingest.sh"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "raycep"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    ready = tmp_path / "ready"
    ready.touch()
    env = dict(os.environ, **runtime_env["env_vars"],
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               RAYCEP_READY_FILE=str(ready), RAYCEP_GATEWAY="http://127.0.0.1:8470")
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    argv = json.loads(run.stdout)
    assert argv == [
        "ingest", "/data/ticks a.csv", "/data/2026 ü.csv", "--format", "csv", "--type", "Stock",
        "--ts-column", "ts", "--ts-format", "ms", "--key", "symbol", "--id-column", "id",
        "--attributes", "price,volume", "--batch-size", "500", "--max-in-flight", "4",
        "--executors", "1", "--executor-cores", "2", "--executor-memory", "1GB",
        "--dead-letters", "/tmp/raycep-dead-letters", "--gateway", "http://127.0.0.1:8470"]
    # they are arguments `raycep ingest` accepts
    from raycep.gateway.cli import build_parser
    parsed = build_parser().parse_args(argv)
    assert (parsed.type_constant, parsed.batch_size, parsed.paths) == \
        ("Stock", 500, ["/data/ticks a.csv", "/data/2026 ü.csv"])


def test_ingestion_waits_for_the_queries(chart, tmp_path):
    """Without the ready file (the queries are not registered yet) ingest.sh does not start
    `raycep ingest`; without its arguments it says what is missing."""
    objects, _ = render(chart, {"ingestion": {"enabled": True}})
    script = tmp_path / "ingest.sh"
    script.write_text(one(objects, "ConfigMap")["data"]["ingest.sh"].replace(
        "seq 1 300", "seq 1 1").replace("sleep 2", "true"))
    args = yaml.safe_load(one(objects, "RayJob")["spec"]["runtimeEnvYAML"])["env_vars"]
    env = dict(os.environ, **args, RAYCEP_READY_FILE=str(tmp_path / "missing"))
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 1
    assert "the gateway did not register the queries" in run.stderr
    env.pop("RAYCEP_INGEST_ARGS")
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode != 0 and "RAYCEP_INGEST_ARGS" in run.stderr
    assert json.loads(args["RAYCEP_INGEST_ARGS"])[:1] == ["/opt/raycep/examples/ticks.csv"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_head_registers_the_chart_queries_once(chart, tmp_path):
    """register_queries.py (run by start-head.sh, which starts it with the gateway) against a
    real gateway: waits for the gateway to answer, registers the chart's queries, touches the
    ready file, and leaves them alone when run again (the registry is persisted)."""
    objects, _ = render(chart, {})
    config = one(objects, "ConfigMap")["data"]
    for name in ("register_queries.py", "queries.cep", "start-head.sh"):
        (tmp_path / name).write_text(config[name])
    check = subprocess.run(["bash", "-n", str(tmp_path / "start-head.sh")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, RAYCEP_TOKEN="t0ken", PYTHONPATH=str(ROOT))
    args = [sys.executable, str(tmp_path / "register_queries.py"), url,
            str(tmp_path / "queries.cep"), str(tmp_path / "ready")]
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    # it starts before the gateway (as in the head pod) and waits for it
    assert first.stdout.readline().startswith(f"[raycep] waiting for the gateway at {url}")
    settings = GatewaySettings(port=port, registry_path=None, plan_every=0, token="t0ken")
    cluster = InProcessCluster(2, "symbol", settings)
    try:
        cluster.start()
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert out.count("registered query") == 3
        assert (tmp_path / "ready").exists()
        names = sorted(q["id"] for q in connect(url, token="t0ken").queries())
        assert names == ["clean_breakout", "dip_recovery", "rally"]
        (tmp_path / "ready").unlink()
        again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                               check=False)
        assert again.returncode == 0, again.stderr
        assert again.stdout.count("already registered") == 3
        assert (tmp_path / "ready").exists()
    finally:
        cluster.stop()


# --------------------------------------------------------------------------- broken values

@pytest.mark.parametrize("values, message", [
    ({"service": {"type": "Bogus"}},
     "at '/service/type': value must be one of 'ClusterIP', 'NodePort', 'LoadBalancer'"),
    ({"workerGroups": [{"name": "w", "replicas": -1, "minReplicas": 0, "maxReplicas": 2}]},
     "at '/workerGroups/0/replicas': minimum: got -1, want 0"),
    ({"sevice": {"type": "NodePort"}}, "additional properties 'sevice' not allowed"),
    ({"persistence": {"sise": "1Gi"}},
     "at '/persistence': additional properties 'sise' not allowed"),
    ({"service": {"port": 0}}, "at '/service/port': minimum: got 0, want 1"),
    ({"service": {"type": "NodePort", "nodePort": 80}}, "at '/service/nodePort'"),
    ({"ingestion": {"format": "xml"}}, "at '/ingestion/format'"),
    ({"ray": {"auth": "none"}}, "at '/ray/auth'"),
    ({"ingestion": {"paths": ["/data/$HOME.csv"]}}, "at '/ingestion/paths/0'"),
    ({"gateway": {"disorderMode": "eager"}}, "at '/gateway/disorderMode'"),
    ({"gateway": {"slack": -1}}, "at '/gateway/slack'"),
    ({"gateway": {"autoscale": "0..4"}}, "at '/gateway/autoscale'"),
    ({"gateway": {"autoscaleInterval": 0}}, "at '/gateway/autoscaleInterval'"),
])
def test_broken_values_are_rejected_naming_the_field(chart, values, message):
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert message in str(caught.value)
    report = helm.lint(str(CHART), values, strict=True)
    assert any(message in error for error in report["errors"])


@pytest.mark.parametrize("values, message", [
    ({"service": {"nodePort": 30001}},
     "service.nodePort is set but service.type is ClusterIP"),
    ({"workerGroups": [{"name": "w", "replicas": 5, "minReplicas": 0, "maxReplicas": 2}]},
     "workerGroups[0] (w): need minReplicas <= replicas <= maxReplicas, got 0 <= 5 <= 2"),
    ({"workerGroups": [{"name": "w", "replicas": 1, "minReplicas": 0, "maxReplicas": 2}] * 2},
     'workerGroups: the name "w" is used twice'),
    ({"gateway": {"token": "a", "existingSecret": "b"}},
     "gateway.token and gateway.existingSecret are both set"),
])
def test_inconsistent_values_fail_the_render(chart, values, message):
    with pytest.raises(helm.HelmRenderError) as caught:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert message in str(caught.value)


def test_the_validators_catch_mistakes(chart):
    """The schema checks above are not vacuous: a misspelled or mistyped field fails them."""
    objects, _ = render(chart, INGESTION)
    cluster = json.loads(json.dumps(one(objects, "RayCluster")))
    cluster["spec"]["workerGroupSpecs"][0]["replica"] = 2
    cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = "four"
    errors = crd_errors(cluster)
    assert any("workerGroupSpecs.0" in e and "'replica' was unexpected" in e for e in errors)
    assert any("workerGroupSpecs.0.maxReplicas" in e and "'four'" in e for e in errors)
    job = json.loads(json.dumps(one(objects, "RayJob")))
    job["spec"]["clusterSelektor"] = job["spec"].pop("clusterSelector")
    assert any("'clusterSelektor' was unexpected" in e for e in crd_errors(job))
    resources = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    resources["resources"]["limits"]["cpu"] = 2                    # int-or-string: fine
    assert not [e for e in crd_errors(cluster) if "headGroupSpec" in e]
    service = json.loads(json.dumps(one(objects, "Service")))
    service["spec"]["ports"][0]["targetPort"] = {"name": "gateway"}
    service["spec"]["tipe"] = "ClusterIP"
    assert k8s_errors(service)


def test_values_schema_is_a_valid_draft7_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["service"]["properties"]["type"]["enum"] == \
        ["ClusterIP", "NodePort", "LoadBalancer"]


def test_image_chart_and_package_agree():
    """deploy/Dockerfile copies every package pyproject.toml installs (and its .dockerignore
    lets them through), its Ray version is the chart's rayVersion, and the chart's appVersion
    is the package version (the default image tag)."""
    pyproject = (ROOT / "pyproject.toml").read_text()     # (tomllib needs Python 3.11)
    table = tomllib.loads(pyproject)["tool"]["setuptools"]
    packages = {table["package-dir"][p] for p in table["packages"] if p.count(".") <= 1}
    assert {"raycep", "gateway", "local"} <= packages
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().split()
    for package in packages:
        assert (ROOT / package / "__init__.py").is_file()
        assert f"COPY {package} ./{package}" in dockerfile
        assert f"!{package}/" in ignore
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert f"ARG RAY_VERSION={values['rayVersion']}\n" in dockerfile
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart_meta["appVersion"] == \
        re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE).group(1)
