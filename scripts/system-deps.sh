#!/bin/sh
# Debian packages the tests and benchmarks use. Installs what is missing when
# run as root on a Debian-like system; elsewhere it only reports. In CI
# (CI=true) a package that cannot be installed fails the run.
set -e
PKGS="python3-numpy python3-torch python3-grpcio python3-grpc-tools prometheus wrk nghttp2-client unzip"
# A throwaway Ceph cluster whose radosgw is the S3 server of the s3:// tests; podman (with runc, and
# CNI's bridge and port mapping) and mmdebstrap build and run the container image (deploy/build-image.sh);
# Chromium runs the dashboard's browser tests.
PKGS_NO_RECOMMENDS="ceph-mon ceph-osd radosgw ceph-common podman runc mmdebstrap containernetworking-plugins iptables chromium"
missing() {
  out=""
  for p in $1; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out="$out $p"
  done
  echo "$out"
}
m1=$(missing "$PKGS")
m2=$(missing "$PKGS_NO_RECOMMENDS")
[ -z "$m1$m2" ] && exit 0
fail() {
  if [ "$CI" = "true" ]; then
    echo "error: $1" >&2
    exit 1
  fi
  echo "warning: $1 (tests that need them will be skipped)" >&2
  exit 0
}
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian packages:$m1$m2"
  apt-get update -qq || fail "apt-get update failed"
  if [ -n "$m1" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $m1 >/dev/null || fail "could not install:$m1"
  fi
  if [ -n "$m2" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $m2 >/dev/null || fail "could not install:$m2"
  fi
else
  fail "missing Debian packages:$m1$m2"
fi
