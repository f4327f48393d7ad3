#!/bin/bash
# Build the raycep images (deploy/Dockerfile: targets `core` and `full`) with podman, on a
# Debian/Ubuntu machine without Docker Hub: installs podman, runc and debootstrap when they are
# missing, makes a Debian bookworm base image from Debian's own packages when none is given,
# builds both targets and prints their sizes. Run as root (it installs packages), from anywhere.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: deploy/build-image.sh [options]

options:
  --tag T         tag of the full image; the core image gets T-core  [raycep:<version>]
  --base IMAGE    base image (Debian bookworm with python3 + python3-venv); default: the
                  official python:3.11-slim-bookworm if it can be pulled, else
                  localhost/debian-base:bookworm, made with debootstrap when missing
  --mirror URL    Debian mirror for debootstrap                      [http://deb.debian.org/debian]
  --core-only     build only the core image (no Java, no Spark)
EOF
}

die() { echo "build-image: $*" >&2; exit 2; }
note() { echo "[build-image] $*" >&2; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1)
TAG=raycep:$VERSION
BASE=
MIRROR=http://deb.debian.org/debian
CORE_ONLY=false
LOCAL_BASE=localhost/debian-base:bookworm

while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --core-only) CORE_ONLY=true; shift; continue ;;
        --tag|--base|--mirror) [ $# -ge 2 ] || die "$1 needs a value" ;;
        *) usage >&2; die "unknown option $1" ;;
    esac
    case "$1" in
        --tag) TAG=$2 ;;
        --base) BASE=$2 ;;
        --mirror) MIRROR=$2 ;;
    esac
    shift 2
done

[ "$(id -u)" = 0 ] || die "run as root: it installs podman and writes /etc/containers (sudo $0 $*)"

# 1. the tools
missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    note "installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null
fi

# 2. podman settings that work on a machine with hybrid cgroups and no systemd session: runc
# (crun fails there), cgroupfs, no default ulimits (the container may not raise them)
CONF=/etc/containers/containers.conf
if ! grep -q '^# raycep build-image' "$CONF" 2>/dev/null; then
    note "writing podman settings to $CONF"
    mkdir -p /etc/containers
    [ -f "$CONF" ] && cp "$CONF" "$CONF.before-raycep"
    cat >"$CONF" <<'EOF'
# raycep build-image: settings for hosts with hybrid cgroups and no systemd user session
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
EOF
fi

# 3. the base image
if [ -z "$BASE" ]; then
    if podman image exists docker.io/library/python:3.11-slim-bookworm \
        || timeout 60 podman pull -q docker.io/library/python:3.11-slim-bookworm >/dev/null 2>&1; then
        BASE=docker.io/library/python:3.11-slim-bookworm
    else
        note "Docker Hub is out of reach: using a Debian base made with debootstrap ($LOCAL_BASE)"
        BASE=$LOCAL_BASE
    fi
fi
if [ "$BASE" = "$LOCAL_BASE" ] && ! podman image exists "$LOCAL_BASE"; then
    rootfs=$(mktemp -d /var/tmp/raycep-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    note "debootstrap bookworm into $rootfs (a few minutes)"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
        bookworm "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 \
        || { tail -20 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
    rm -f "$rootfs.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | podman import -q - "$LOCAL_BASE" >/dev/null
    note "base image $LOCAL_BASE: $(podman image inspect --format '{{.Size}}' "$LOCAL_BASE" | numfmt --to=iec-i --suffix=B)"
fi

# 4. the images. A host whose pip trusts its own certificate authority (a TLS-inspecting proxy:
# PIP_CERT or pip's `global.cert`) lends that file to the build's pip, mounted for the build
# only, not copied into the image.
extra=()
cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [ -n "$cert" ] && [ -f "$cert" ]; then
    note "pip in the build trusts $cert (as pip on this host does)"
    extra+=(--volume "$cert:/etc/ssl/certs/build-host-ca.crt:ro"
            --build-arg PIP_CERT=/etc/ssl/certs/build-host-ca.crt)
fi
build() {   # target tag
    local start=$SECONDS
    note "building $2 (target $1, base $BASE)"
    podman build --network host --layers -f "$REPO/deploy/Dockerfile" \
        --ignorefile "$REPO/deploy/Dockerfile.dockerignore" "${extra[@]}" \
        --build-arg BASE_IMAGE="$BASE" --target "$1" -t "$2" "$REPO" >&2
    note "built $2 in $((SECONDS - start)) s"
}
build core "$TAG-core"
[ "$CORE_ONLY" = true ] || build full "$TAG"

echo
printf '%-28s %-12s %-10s %s\n' IMAGE SIZE ID DIGEST
for t in "$TAG-core" $([ "$CORE_ONLY" = true ] || echo "$TAG"); do
    podman image inspect --format '{{.Size}} {{.Id}} {{.Digest}}' "$t" \
        | { read -r size id digest
            printf '%-28s %-12s %-10s %s\n' "$t" "$(numfmt --to=iec-i --suffix=B "$size")" "${id:0:10}" "$digest"; }
done
cat <<EOF

Try it:
  podman run --rm --network host --shm-size=2g $TAG demo
  deploy/container-smoke.sh --image $TAG
EOF
