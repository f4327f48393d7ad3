#!/bin/bash
# The head container of the raycep RayCluster: Ray's head node (KubeRay's generated
# `ray start --head ... --block`), then the raycep gateway against it (`raycep serve --address
# auto`), then the configured queries. The container ends, and Kubernetes restarts it, when
# Ray or the gateway ends. Settings come from the RAYCEP_* variables of the pod spec.
set -u
: "${KUBERAY_GEN_RAY_START_CMD:?not set: the RayCluster needs the annotation ray.io/overwrite-container-cmd}"

/bin/bash -c "$KUBERAY_GEN_RAY_START_CMD" &
ray_pid=$!
echo "[raycep] waiting for the Ray head (GCS on port ${RAYCEP_GCS_PORT})"
until ray health-check --address "127.0.0.1:${RAYCEP_GCS_PORT}" >/dev/null 2>&1; do
    kill -0 "$ray_pid" 2>/dev/null || { echo "[raycep] ray start exited" >&2; exit 1; }
    sleep 2
done

# the GCS address, not "auto": auto looks for a file `ray start` writes after the GCS answers
# the health check, and a gateway started in between found no Ray (seen in
# deploy/container-smoke.sh); with the address, Ray waits for this node's raylet
serve=(raycep serve --address "127.0.0.1:${RAYCEP_GCS_PORT}" --host 0.0.0.0 --port "$RAYCEP_PORT"
       --partitions "$RAYCEP_PARTITIONS" --match-capacity "$RAYCEP_MATCH_CAPACITY"
       --registry "$RAYCEP_DATA_DIR/registry.sqlite"
       --checkpoint-dir "${RAYCEP_CHECKPOINT_DIR:-$RAYCEP_DATA_DIR/checkpoints}"
       --disorder-mode "${RAYCEP_DISORDER_MODE:-optimistic}" --slack "${RAYCEP_SLACK:-0}"
       --alpha "${RAYCEP_ALPHA:-2.5}" --wait-for-nodes "${RAYCEP_WAIT_FOR_NODES:-1}")
[ -n "${RAYCEP_KEY:-}" ] && serve+=(--key "$RAYCEP_KEY")
[ -n "${RAYCEP_AUTOSCALE:-}" ] && serve+=(--autoscale "$RAYCEP_AUTOSCALE"
                                        --autoscale-interval "${RAYCEP_AUTOSCALE_INTERVAL:-10}")
[ "${RAYCEP_MATCHES_JSONL:-false}" = "true" ] && serve+=(--matches-jsonl "$RAYCEP_DATA_DIR/matches.jsonl")
[ "${RAYCEP_WARM_SPARK:-false}" = "true" ] && serve+=(--spark)
echo "[raycep] ${serve[*]}"
set -m          # job control: else a background job ignores SIGINT, the gateway's stop signal
"${serve[@]}" &
gateway_pid=$!
set +m

ready=${RAYCEP_READY_FILE:-/tmp/raycep-ready}      # the ingestion job waits for it
rm -f "$ready"
python3 "$RAYCEP_CONFIG_DIR/register_queries.py" "http://127.0.0.1:$RAYCEP_PORT" \
    "$RAYCEP_CONFIG_DIR/queries.cep" "$ready" &

# pod termination: stop the gateway first (it acknowledges what it drained), then Ray
# shellcheck disable=SC2317,SC2329  # called by the trap
stop() {
    kill -INT "$gateway_pid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$gateway_pid" 2>/dev/null || break; sleep 1; done
    kill -TERM "$gateway_pid" 2>/dev/null
    kill -TERM "$ray_pid" 2>/dev/null
    wait "$ray_pid"
    exit 0
}
trap stop TERM INT

wait -n "$ray_pid" "$gateway_pid"
status=$?
echo "[raycep] Ray or the gateway exited (status $status); stopping the container" >&2
kill "$ray_pid" "$gateway_pid" 2>/dev/null
exit 1
