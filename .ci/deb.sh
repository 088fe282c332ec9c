#!/usr/bin/env bash
# Builds the Debian package of dlock with dpkg-deb alone (`make deb`), from
# the release build (target/release/libdlock.so and dlock):
#   /usr/lib/redis/modules/libdlock.so   the module
#   /etc/dlock/dlock.conf                `loadmodule` of it, for an `include`
#                                        line in redis.conf or valkey.conf
#   /usr/bin/dlock                       the tool
#   /usr/share/doc/dlock/                copyright, changelog, example config,
#                                        README and the operator pages of docs/
# Version from Cargo.toml, Architecture from dpkg; Depends from the shared
# libraries the binaries need. Prints the package's path last.
#   .ci/deb.sh [OUT_DIR]     (default target/debian)
set -euo pipefail
# The modes in the package do not depend on who builds it (dpkg-deb
# refuses a DEBIAN folder below 0755, as under umask 027 or 077).
umask 022
cd "${BASH_SOURCE[0]%/*}/.."
out=${1:-target/debian}
me=.ci/deb.sh
for f in target/release/libdlock.so target/release/dlock; do
	[ -f "$f" ] || { echo "$me: $f missing: run make build first" >&2; exit 1; }
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
maintainer=${DEB_MAINTAINER:-"dlock maintainers <maintainers@dlock.invalid>"}
root=$out/root
deb=$out/dlock_${version}_${arch}.deb
rm -rf "$root" "$deb"
mkdir -p "$root/DEBIAN"

# Executable: redis-server refuses to load a module file without the x bit.
install -D -m 0755 target/release/libdlock.so "$root/usr/lib/redis/modules/libdlock.so"
install -D -m 0755 target/release/dlock "$root/usr/bin/dlock"
strip --strip-unneeded "$root/usr/lib/redis/modules/libdlock.so" "$root/usr/bin/dlock"
install -d "$root/etc/dlock"
cat >"$root/etc/dlock/dlock.conf" <<'CONF'
# The dlock module (package dlock). Copy the loadmodule line below into
# redis.conf or valkey.conf; or `include /etc/dlock/dlock.conf`
# there, but only if CONFIG REWRITE is never run (it would add a second
# loadmodule line to the main file, and the next start would fail).
# Module configs go after the path (loadmodule ... max-ttl 60000) or on
# dlock.<name> lines in the server's config; the reference is
# /usr/share/doc/dlock/operations.md.
loadmodule /usr/lib/redis/modules/libdlock.so
CONF
doc=$root/usr/share/doc/dlock
install -d "$doc"
install -m 0644 redis.conf.example "$doc/redis.conf.example"
install -m 0644 README.md docs/operations.md docs/cli.md docs/high-availability.md "$doc/"
gzip -9n <CHANGELOG.md >"$doc/changelog.gz"
cat >"$doc/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: dlock

Files: *
Copyright: the dlock authors
License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the "Software"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in
 all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
 THE SOFTWARE.
COPYRIGHT

# Depends: the packages of the shared libraries the binaries link, at the
# newest glibc symbol version they use.
depends=""
for lib in $(readelf -d "$root/usr/lib/redis/modules/libdlock.so" "$root/usr/bin/dlock" |
	sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u); do
	case "$lib" in
	libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux*) pkg=libc6 ;;
	libgcc_s.so.1) pkg=libgcc-s1 ;;
	*) echo "$me: no package known for the library $lib" >&2; exit 1 ;;
	esac
	case " $depends " in *" $pkg "*) ;; *) depends="$depends $pkg" ;; esac
done
glibc=$(objdump -T "$root/usr/lib/redis/modules/libdlock.so" "$root/usr/bin/dlock" |
	grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
depends=$(for p in $depends; do
	if [ "$p" = libc6 ] && [ -n "$glibc" ]; then echo "libc6 (>= $glibc)"; else echo "$p"; fi
done | paste -sd, - | sed 's/,/, /g')

cat >"$root/DEBIAN/conffiles" <<'CONFFILES'
/etc/dlock/dlock.conf
CONFFILES
cat >"$root/DEBIAN/control" <<CONTROL
Package: dlock
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Recommends: redis-server | valkey-server
Section: database
Priority: optional
Description: distributed locks as native Redis and Valkey commands
 A server module for Redis (7.0 and later) and Valkey (8 and later):
 DLOCK.ACQUIRE, RELEASE and EXTEND with fencing tokens, server-side FIFO
 waiting, read-write locks, semaphores, reentrant locks and sets of
 resources; and the dlock tool, which runs a command under a lock.
 .
 Load it by adding "loadmodule /usr/lib/redis/modules/libdlock.so" to
 redis.conf or valkey.conf.
CONTROL
(cd "$root" && find . -path ./DEBIAN -prune -o -type f ! -path ./etc/\* -print |
	sed 's|^\./||' | sort | xargs md5sum) >"$root/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
