#!/bin/bash
# The raycep image run as the Helm chart runs it, with podman on this machine: `raycep demo` in
# the image; a head and two worker containers playing the chart's RayCluster (the chart is
# rendered, its commands, environment and ConfigMap files used as they are), the sample queries
# and ticks sent from this host with the client while a worker is killed; `raycep ingest` as the
# chart's ingestion RayJob runs it, submitted from a third container. Every step's matches are
# compared with `raycep local` on this host. Prints a JSON report; exit 0 when every step passed.
#
# usage: deploy/container-smoke.sh [--image raycep:VERSION] [--steps demo,client,ingest] [--keep]
# Needs root (podman, as deploy/build-image.sh sets it up), and raycep installed on this host with
# the [test] extra (the client, `raycep local`, helm-python-sdk to render the chart).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1)
[ "$(id -u)" = 0 ] || { echo "container-smoke: run as root (rootful podman)" >&2; exit 2; }
command -v podman >/dev/null || { echo "container-smoke: no podman; run deploy/build-image.sh first" >&2; exit 2; }
args=("$@")
case " $* " in *" --image "*) ;; *) args=(--image "raycep:$VERSION" "${args[@]}") ;; esac
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
exec python3 "$REPO/deploy/container_smoke.py" "${args[@]}"
