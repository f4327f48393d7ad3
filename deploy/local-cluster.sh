#!/usr/bin/env bash
# A multi-node Ray cluster on one machine with the raycep gateway, for trying the
# distributed set-up without Kubernetes.
#
#   deploy/local-cluster.sh start [options]   head + N worker nodes + `raycep serve --address`
#   deploy/local-cluster.sh status [options]  the nodes (ray status) and the gateway's health
#   deploy/local-cluster.sh stop [options]    the gateway, then this cluster's Ray processes
#
# Every node is a separate raylet with its own --temp-dir under DIR (default
# /tmp/raycep-local-PORT), so Ray sees distinct nodes. `stop` ends only the processes of this
# cluster (found by DIR in their command line, plus their children), never other Ray
# instances on the machine; `ray stop` would end all of them.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: deploy/local-cluster.sh start|status|stop [options]

options (environment variable in brackets):
  --port P            head (GCS) port                      [RAYCEP_HEAD_PORT, 6390]
  --workers N         worker nodes                         [RAYCEP_WORKERS, 2]
  --worker-cpus C     logical CPUs per worker node         [RAYCEP_WORKER_CPUS, 1]
  --head-cpus C       logical CPUs of the head node        [RAYCEP_HEAD_CPUS, 0]
  --object-store MB   object store per node, MiB           [RAYCEP_OBJECT_STORE_MB, 300]
  --gateway-host H    address the gateway binds            [RAYCEP_GATEWAY_HOST, 127.0.0.1]
  --gateway-port G    gateway HTTP port                    [RAYCEP_GATEWAY_PORT, 8490]
  --partitions N      partition actors                     [RAYCEP_PARTITIONS, 2]
  --key ATTR          partition key attribute              [RAYCEP_KEY, symbol]
  --token T           bearer token (generated if empty)    [RAYCEP_TOKEN]
  --dir DIR           state, logs and Ray temp dirs        [RAYCEP_LOCAL_DIR, /tmp/raycep-local-PORT]
EOF
}

PORT=${RAYCEP_HEAD_PORT:-6390}
WORKERS=${RAYCEP_WORKERS:-2}
WORKER_CPUS=${RAYCEP_WORKER_CPUS:-1}
HEAD_CPUS=${RAYCEP_HEAD_CPUS:-0}
OBJECT_STORE_MB=${RAYCEP_OBJECT_STORE_MB:-300}
GATEWAY_HOST=${RAYCEP_GATEWAY_HOST:-127.0.0.1}
GATEWAY_PORT=${RAYCEP_GATEWAY_PORT:-8490}
PARTITIONS=${RAYCEP_PARTITIONS:-2}
KEY=${RAYCEP_KEY:-symbol}
TOKEN=${RAYCEP_TOKEN:-}
DIR=${RAYCEP_LOCAL_DIR:-}

die() { echo "local-cluster: $*" >&2; exit 2; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
ACTION=$1
shift
while [ $# -gt 0 ]; do
    case "$1" in -h|--help) usage; exit 0 ;; esac
    [ $# -ge 2 ] || die "$1 needs a value"
    case "$1" in
        --port) PORT=$2 ;;
        --workers) WORKERS=$2 ;;
        --worker-cpus) WORKER_CPUS=$2 ;;
        --head-cpus) HEAD_CPUS=$2 ;;
        --object-store) OBJECT_STORE_MB=$2 ;;
        --gateway-host) GATEWAY_HOST=$2 ;;
        --gateway-port) GATEWAY_PORT=$2 ;;
        --partitions) PARTITIONS=$2 ;;
        --key) KEY=$2 ;;
        --token) TOKEN=$2 ;;
        --dir) DIR=$2 ;;
        *) usage >&2; die "unknown option $1" ;;
    esac
    shift 2
done
DIR=${DIR:-/tmp/raycep-local-$PORT}
ADDRESS=127.0.0.1:$PORT
URL_HOST=$GATEWAY_HOST
[ "$URL_HOST" = "0.0.0.0" ] && URL_HOST=127.0.0.1
URL=http://$URL_HOST:$GATEWAY_PORT
for n in PORT WORKERS GATEWAY_PORT PARTITIONS OBJECT_STORE_MB; do
    [[ ${!n} =~ ^[0-9]+$ ]] || die "${n,,} must be a whole number, got '${!n}'"
done

# `raycep` is `python3 -m raycep`: the package must be installed (pip install -e '.[cluster]'
# from a checkout); the Ray nodes started below import it from the same environment.
REPO=$(cd "$(dirname "$0")/.." && pwd)
(cd / && python3 -c 'import raycep.gateway.cli' 2>/dev/null) \
    || die "raycep is not importable: python3 -m pip install -e '$REPO[cluster]'"
RAYCEP=(python3 -m raycep)
SHOWN=raycep                        # what the printed instructions call it
(cd / && raycep --help >/dev/null 2>&1) || SHOWN="python3 -m raycep"

# Ray token authentication (Ray >= 2.52): one token per cluster, in a file under $DIR; every
# node, the gateway's driver and `raycep ingest` need the same two variables.
RAY_TOKEN_FILE=$DIR/ray-auth-token
use_ray_token() {
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_TOKEN_FILE
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# PIDs whose command line mentions $DIR/ (the Ray daemons of this cluster's nodes), and
# all their descendants (Ray's worker processes rename themselves to ray::..., so they are
# found as children of their raylet).
cluster_pids() {
    local matched=() pid cmd
    for proc in /proc/[0-9]*; do
        pid=${proc#/proc/}
        [ "$pid" = "$$" ] && continue
        cmd=$(tr '\0' ' ' 2>/dev/null <"$proc/cmdline") || continue
        case "$cmd" in
            *local-cluster.sh*) ;;
            *"$DIR/"*) matched+=("$pid") ;;
        esac
    done
    [ ${#matched[@]} -gt 0 ] || return 0
    # parent -> children table from /proc/*/stat (field 4 is the parent PID)
    local -A children=()
    local stat ppid
    for proc in /proc/[0-9]*; do
        stat=$(cat 2>/dev/null <"$proc/stat") || continue
        stat=${stat##*) }
        ppid=$(echo "$stat" | cut -d' ' -f2)
        children[$ppid]+=" ${proc#/proc/}"
    done
    local queue=("${matched[@]}") seen=" " p
    while [ ${#queue[@]} -gt 0 ]; do
        p=${queue[0]}
        queue=("${queue[@]:1}")
        case "$seen" in *" $p "*) continue ;; esac
        seen+="$p "
        echo "$p"
        for c in ${children[$p]:-}; do queue+=("$c"); done
    done
}

start() {
    command -v ray >/dev/null || die "ray is not installed (python3 -m pip install -e .)"
    (cd / && python3 -c 'import raycep.gateway.cli' 2>/dev/null) || die "raycep is not importable (python3 -m pip install .)"
    alive "$DIR/gateway.pid" && die "already running (gateway pid $(cat "$DIR/gateway.pid")); stop it first: $0 stop --dir $DIR"
    [ -n "$(cluster_pids)" ] && die "Ray processes of $DIR are still running; run: $0 stop --dir $DIR"
    mkdir -p "$DIR"
    if [ -z "$TOKEN" ]; then
        TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
    fi
    if [ ! -s "$RAY_TOKEN_FILE" ]; then
        (umask 077; python3 -c 'import secrets; print(secrets.token_hex(32))' >"$RAY_TOKEN_FILE")
    fi
    use_ray_token
    local store=$((OBJECT_STORE_MB * 1024 * 1024))
    local common=(--node-ip-address 127.0.0.1 --object-store-memory "$store"
                  --disable-usage-stats --dashboard-agent-listen-port 0)
    echo "[local-cluster] head node at $ADDRESS ($HEAD_CPUS CPUs, temp dir $DIR/head)"
    ray start --head --port "$PORT" --num-cpus "$HEAD_CPUS" --include-dashboard=false \
        --ray-client-server-port $((PORT + 1)) --temp-dir "$DIR/head" "${common[@]}" \
        >"$DIR/head.log" 2>&1 || { tail -20 "$DIR/head.log" >&2; die "ray start --head failed (log: $DIR/head.log)"; }
    for i in $(seq 1 "$WORKERS"); do
        echo "[local-cluster] worker node $i ($WORKER_CPUS CPUs, temp dir $DIR/worker$i)"
        ray start --address "$ADDRESS" --num-cpus "$WORKER_CPUS" --temp-dir "$DIR/worker$i" \
            --resources "{\"raycep-local-worker-$i\": 1}" "${common[@]}" \
            >"$DIR/worker$i.log" 2>&1 || { tail -20 "$DIR/worker$i.log" >&2; die "worker $i failed to start (log: $DIR/worker$i.log)"; }
    done
    echo "[local-cluster] gateway: raycep serve --address $ADDRESS --port $GATEWAY_PORT (log: $DIR/gateway.log)"
    # the token goes through the environment, not the command line (ps shows command lines)
    # job control on: a background job of a script ignores SIGINT otherwise, and SIGINT is how
    # `stop` asks `raycep serve` to stop its actors
    set -m
    RAYCEP_TOKEN=$TOKEN nohup "${RAYCEP[@]}" serve --address "$ADDRESS" --host "$GATEWAY_HOST" \
        --port "$GATEWAY_PORT" --partitions "$PARTITIONS" --key "$KEY" \
        --registry "$DIR/registry.sqlite" --matches-jsonl "$DIR/matches.jsonl" \
        >"$DIR/gateway.log" 2>&1 </dev/null &
    echo $! >"$DIR/gateway.pid"
    set +m
    local waited=0
    until grep -q "gateway listening" "$DIR/gateway.log" 2>/dev/null; do
        if ! alive "$DIR/gateway.pid"; then
            tail -20 "$DIR/gateway.log" >&2
            die "the gateway exited (log: $DIR/gateway.log); run: $0 stop --dir $DIR"
        fi
        [ $waited -ge 180 ] && die "the gateway did not start in 180 s (log: $DIR/gateway.log)"
        sleep 1
        waited=$((waited + 1))
    done
    cat >"$DIR/env" <<EOF
export RAYCEP_GATEWAY=$URL
export RAYCEP_TOKEN=$TOKEN
export RAY_ADDRESS=$ADDRESS
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH=$RAY_TOKEN_FILE
${PYTHONPATH:+export PYTHONPATH=$PYTHONPATH}
EOF
    chmod 600 "$DIR/env"
    ray status --address "$ADDRESS" 2>/dev/null | sed -n '/Node status/,/Pending/p' || true
    cat <<EOF

raycep is up: $((WORKERS + 1)) Ray nodes, $PARTITIONS partition actors, key '$KEY'.
  gateway  $URL   (token in $DIR/env; matches also in $DIR/matches.jsonl)

From a shell:
  source $DIR/env
  $SHOWN query add examples/queries.cep
  $SHOWN ingest examples/ticks.csv          # Spark on this Ray (RayDP), or send from Python
  $SHOWN matches dip_recovery --since 0

From Python:
  from raycep import connect
  client = connect("$URL", token="$TOKEN")
  client.send([{"type": "Stock", "ts": 1.0, "symbol": "IBM", "price": 100.0}])

Stop: $0 stop --dir $DIR
EOF
}

still_alive() {
    local p
    for p in "$@"; do
        if kill -0 "$p" 2>/dev/null; then echo "$p"; fi
    done
}

stop() {
    if alive "$DIR/gateway.pid"; then
        local pid
        pid=$(cat "$DIR/gateway.pid")
        echo "[local-cluster] stopping the gateway (pid $pid)"
        # SIGINT: `raycep serve` stops its actors; SIGTERM if SIGINT was ignored (a script
        # started from a background job inherits that), then SIGKILL
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 10); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 5); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/gateway.pid"
    local pids=()
    mapfile -t pids < <(cluster_pids)
    if [ ${#pids[@]} -gt 0 ]; then
        echo "[local-cluster] stopping ${#pids[@]} Ray processes of $DIR"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 1 15); do
            mapfile -t pids < <(still_alive "${pids[@]}")
            [ ${#pids[@]} -eq 0 ] && break
            sleep 1
        done
        if [ ${#pids[@]} -gt 0 ]; then kill -KILL "${pids[@]}" 2>/dev/null || true; fi
    fi
    echo "[local-cluster] stopped (state kept in $DIR; the registry survives a restart)"
}

status() {
    use_ray_token
    ray status --address "$ADDRESS" 2>&1 | sed -n '/Node status/,/Demands/p' || true
    if alive "$DIR/gateway.pid"; then
        echo "gateway: pid $(cat "$DIR/gateway.pid"), $URL"
        local token
        token=$(sed -n 's/^export RAYCEP_TOKEN=//p' "$DIR/env" 2>/dev/null)
        RAYCEP_TOKEN=$token python3 - "$URL" <<'PY' || echo "gateway: not answering on $URL"
import os, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/health",
                             headers={"Authorization": "Bearer " + os.environ["RAYCEP_TOKEN"]})
print(urllib.request.urlopen(req, timeout=5).read().decode())
PY
    else
        echo "gateway: not running"
    fi
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 2 ;;
esac
