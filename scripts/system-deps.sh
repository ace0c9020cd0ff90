#!/bin/sh
# Debian packages the tests and benchmarks use. Installs what is missing when
# run as root on a Debian-like system; elsewhere it only reports.
set -e
PKGS="python3-numpy python3-torch python3-grpcio python3-grpc-tools prometheus wrk nghttp2-client unzip"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian packages:$missing"
  # A failed install is reported, not fatal: the tests that need a missing tool skip with a reason.
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; }; then
    echo "warning: could not install:$missing (tests that need them will be skipped)" >&2
  fi
else
  echo "warning: missing Debian packages:$missing (tests that need them will be skipped or fail)" >&2
fi
