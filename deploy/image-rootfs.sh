#!/bin/sh
# Builds the runtime image's root filesystem in /rootfs, inside a Debian bookworm build stage of
# deploy/Dockerfile: only the Debian packages Nereid runs on, with their dependencies, unpacked
# without apt or dpkg (no maintainer scripts run, no package database is kept):
#   glibc, libgcc and libstdc++ for node and onnxruntime; tini as PID 1; busybox for /bin/sh and the
#   few commands scripts and Kubernetes hooks call (sleep, readlink, dirname); with WITH_PYTHON=true
#   Python 3 and numpy for the Python backend.
set -eu
WITH_PYTHON=${WITH_PYTHON:-true}
pkgs="libc6 libgcc-s1 libstdc++6 tini busybox"
[ "$WITH_PYTHON" = true ] && pkgs="$pkgs python3-minimal libpython3.11-stdlib python3-numpy"

mkdir -p /debs /rootfs/etc /rootfs/usr/bin /rootfs/usr/lib /rootfs/usr/lib64 /rootfs/usr/sbin /rootfs/usr/local/bin
# Against an empty package database apt resolves the whole dependency closure and downloads it.
: > /tmp/empty-status
apt-get install -y -qq --download-only --no-install-recommends -o Dir::State::status=/tmp/empty-status \
  -o Dir::Cache::archives=/debs $pkgs >/dev/null
# Those that serve only maintainer scripts, package management or interactive use.
for p in dpkg tar debianutils perl-base debconf readline-common libreadline8 python3-pkg-resources; do
  rm -f /debs/"${p}"_*.deb
done
# Debian's merged /usr: /bin, /lib, /lib64 and /sbin are links into /usr.
for d in bin lib lib64 sbin; do ln -s "usr/$d" "/rootfs/$d"; done
for deb in /debs/*.deb; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C /rootfs --keep-directory-symlink \
    --exclude='./usr/share/man' --exclude='./usr/share/info' --exclude='./usr/share/lintian' \
    --exclude='./usr/share/locale' --exclude='./usr/share/bug' --exclude='./usr/lib/x86_64-linux-gnu/gconv' \
    --exclude='./usr/share/doc/*/changelog*' --exclude='./usr/share/doc/*/README*' --exclude='./usr/share/doc/*/NEWS*'
done
for cmd in sh sleep readlink dirname; do ln -s busybox "/rootfs/usr/bin/$cmd"; done
rm -f /rootfs/usr/bin/tini-static
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnereid:x:10001:10001:nereid:/tmp:/usr/sbin/nologin\n' > /rootfs/etc/passwd
printf 'root:x:0:\nnereid:x:10001:\n' > /rootfs/etc/group
printf 'include /etc/ld.so.conf.d/*.conf\n' > /rootfs/etc/ld.so.conf
# The links Debian's alternatives system would make (maintainer scripts do not run here): BLAS and LAPACK.
for lib in blas/libblas.so.3 lapack/liblapack.so.3; do
  if [ -e "/rootfs/usr/lib/x86_64-linux-gnu/$lib" ]; then ln -s "$lib" "/rootfs/usr/lib/x86_64-linux-gnu/${lib#*/}"; fi
done
mkdir -p -m 1777 /rootfs/tmp
ldconfig -r /rootfs
if [ "$WITH_PYTHON" = true ]; then
  find /rootfs/usr/lib/python3/dist-packages -type d -name tests -prune -exec rm -rf {} +
  rm -rf /rootfs/usr/lib/python3.11/ensurepip /rootfs/usr/lib/python3.11/lib2to3 /rootfs/usr/lib/python3.11/pydoc_data
  # Byte-compiled once here, as Debian's own install would: the image's files are read-only to its user.
  chroot /rootfs /usr/bin/python3 -m compileall -q /usr/lib/python3.11 /usr/lib/python3/dist-packages >/dev/null
fi
echo "root filesystem in /rootfs: $(du -sh --apparent-size /rootfs | cut -f1) ($(ls /debs | wc -l) packages)"
