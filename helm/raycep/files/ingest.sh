#!/bin/bash
# The ingestion RayJob's entrypoint, run on the head pod: wait until the gateway has registered
# the chart's queries (start-head.sh touches the ready file), then `raycep ingest` with the
# arguments in $RAYCEP_INGEST_ARGS, a JSON list the RayJob sets through its runtime
# environment (so a `helm upgrade` needs no ConfigMap change to reach the pod first).
set -eu
: "${RAYCEP_INGEST_ARGS:?not set: runtimeEnvYAML of the RayJob sets it}"
ready=${RAYCEP_READY_FILE:-/tmp/raycep-ready}
for _ in $(seq 1 300); do [ -f "$ready" ] && break; sleep 2; done
[ -f "$ready" ] || { echo "[raycep] the gateway did not register the queries" >&2; exit 1; }
exec python3 -c '
import json, os
args = json.loads(os.environ["RAYCEP_INGEST_ARGS"])
os.execvp("raycep", ["raycep", "ingest", *args, "--gateway", os.environ["RAYCEP_GATEWAY"]])
'
