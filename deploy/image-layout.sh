#!/bin/sh
# Builds the file layout of Nereid's container image in DEST without a container
# engine: the compiled server, its production dependencies only, the Python backend
# stubs and the example repository, plus bin/nereid. The Dockerfiles run this same
# script, so a test that serves from DEST tests what the image ships.
#
#   sh deploy/image-layout.sh DEST [--cuda]
#
# Needs a built tree (npm run build). --cuda also installs onnxruntime-node's CUDA 12
# execution provider (downloaded by onnxruntime-node's own installer).
set -eu

usage() { echo "usage: sh deploy/image-layout.sh DEST [--cuda]" >&2; exit 2; }
[ $# -ge 1 ] || usage
DEST=$1
CUDA=false
[ $# -ge 2 ] && { [ "$2" = "--cuda" ] || usage; CUDA=true; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$ROOT/dist/src/cli/main.js" ] || { echo "error: $ROOT/dist is missing: run 'npm run build' first" >&2; exit 1; }

mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
case "$DEST" in "$ROOT"|"$ROOT"/dist*|"$ROOT"/src*) echo "error: DEST must be outside the source folders" >&2; exit 1 ;; esac
rm -rf "$DEST/dist" "$DEST/node_modules" "$DEST/python" "$DEST/examples" "$DEST/bin"

# The compiled server (no tests, benchmarks or source maps), and the files it reads at run time.
mkdir -p "$DEST/dist" "$DEST/examples" "$DEST/bin"
(cd "$ROOT/dist" && find src -type f -name '*.js' | tar cf - -T -) | (cd "$DEST/dist" && tar xf -)
# The dashboard's page, styles and bundled uPlot (with its licence).
cp -R "$ROOT/dist/src/frontends/dashboard/static/." "$DEST/dist/src/frontends/dashboard/static/"
cp -R "$ROOT/python" "$DEST/python"
find "$DEST/python" -name '__pycache__' -prune -exec rm -rf {} +
cp -R "$ROOT/examples/model_repository" "$DEST/examples/model_repository"
cp "$ROOT/package.json" "$ROOT/package-lock.json" "$ROOT/.npmrc" "$ROOT/LICENSE" "$DEST/"

# Production dependencies only, exactly as locked. Install scripts stay off; the one
# that matters (onnxruntime-node's CUDA download) runs below when asked for.
(cd "$DEST" && npm ci --omit=dev --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error)

# onnxruntime-node bundles native builds for every platform; keep this one's.
ORT="$DEST/node_modules/onnxruntime-node/bin/napi-v6"
ARCH=$(node -p process.arch)
if [ -d "$ORT/linux/$ARCH" ]; then
  for d in "$ORT"/*/*; do
    [ "$d" = "$ORT/linux/$ARCH" ] || rm -rf "$d"
  done
  find "$ORT" -mindepth 1 -maxdepth 1 -type d ! -name linux -exec rm -rf {} +
fi

# What Node never loads in a server: source maps, type declarations, docs, tests and examples, the
# browser, React Native and Cloudflare Workers builds, and @azure/identity's browser sign-in library
# (only its browser build imports it). Licence files stay.
NM="$DEST/node_modules"
find "$NM" -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.ts' \
  -o -name '*.md' -o -name '*.markdown' -o -name '*.tsbuildinfo' -o -name 'CHANGELOG*' -o -name 'Makefile' \) -delete
find "$NM" -type d \( -path '*/dist/browser' -o -path '*/dist/react-native' -o -path '*/dist/workerd' \
  -o -name test -o -name tests -o -name __tests__ -o -name examples -o -name benchmark \) -prune -exec rm -rf {} +
rm -rf "$NM/@azure/msal-browser"
# Whitespace and comments out of the JavaScript (names and module formats kept).
node "$ROOT/deploy/minify-modules.mjs" "$NM"

if [ "$CUDA" = true ]; then
  (cd "$DEST/node_modules/onnxruntime-node" && ONNXRUNTIME_NODE_INSTALL=cuda12 node script/install.js)
  [ -f "$ORT/linux/$ARCH/libonnxruntime_providers_cuda.so" ] || { echo "error: the CUDA execution provider was not installed" >&2; exit 1; }
fi

cat > "$DEST/bin/nereid" <<'EOF'
#!/bin/sh
# Nereid's command line (serve, perf, validate) from this install.
here=$(dirname "$(readlink -f "$0")")
exec node "$here/../dist/src/cli/main.js" "$@"
EOF
chmod 755 "$DEST/bin/nereid"
echo "image layout in $DEST: $(du -sh --apparent-size "$DEST" | cut -f1)"
