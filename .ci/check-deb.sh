#!/usr/bin/env bash
# `make check-deb`: the package `make deb` built, installed for real with
# dpkg, used, and removed again:
#  - dpkg -i; a server started with `include /etc/dlock/dlock.conf`
#    (in a temp folder, on a unix socket only) grants DLOCK.ACQUIRE;
#    /usr/bin/dlock --version names this release and `dlock status` sees
#    the lock;
#  - the setup docs/operations.md recommends: a config file with the
#    `loadmodule` line itself, where `CONFIG REWRITE` keeps a `dlock.*`
#    setting across a restart and the module is loaded once;
#  - dpkg -r: the module and the tool are gone (the config snippet, a
#    conffile, stays), dpkg -P: the snippet is gone too.
# It changes the machine, so it does so only when asked (DEB_INSTALL=1, as
# .ci/run does on its throwaway root machine); otherwise it prints what it
# would do.
#   .ci/check-deb.sh PACKAGE.deb
set -euo pipefail
deb=$1
me=check-deb
fail() {
	echo "$me: $*" >&2
	exit 1
}
[ -f "$deb" ] || fail "no package $deb"
dpkg-deb --info "$deb"
contents=$(dpkg-deb --contents "$deb")
echo "$contents"
version=$(dpkg-deb --field "$deb" Version)
files="/usr/lib/redis/modules/libdlock.so /usr/bin/dlock"
conf=/etc/dlock/dlock.conf
for f in $files $conf; do
	case "$contents" in *" .$f"$'\n'* | *" .$f") ;; *) fail "$f is not in the package" ;; esac
done

if [ "${DEB_INSTALL:-}" != 1 ]; then
	echo "$me: built and listed $deb. With DEB_INSTALL=1 (as root, on a machine you can change) it would:"
	echo "  dpkg -i $deb; start ${DLOCK_SERVER:-redis-server} with 'include $conf' on a unix socket in a temp folder;"
	echo "  DLOCK.ACQUIRE there, /usr/bin/dlock --version and dlock status; then dpkg -r dlock and dpkg -P dlock,"
	echo "  checking that $files and then $conf are gone."
	exit 0
fi
[ "$(id -u)" = 0 ] || fail "DEB_INSTALL=1 needs root (dpkg -i)"
if dpkg -s dlock >/dev/null 2>&1; then
	fail "a dlock package is installed already; not touching it (dpkg -r dlock first)"
fi

tmp=$(mktemp -d)
installed=""
# A failing check leaves neither a server nor the package behind.
cleanup() {
	[ -f "$tmp/pid" ] && kill "$(cat "$tmp/pid")" 2>/dev/null
	rm -rf "$tmp"
	[ -z "$installed" ] || dpkg -P dlock >/dev/null
}
trap cleanup EXIT
installed=1
dpkg -i "$deb"
for f in $files $conf; do [ -e "$f" ] || fail "dpkg -i did not install $f"; done
cat >"$tmp/server.conf" <<CONF
port 0
unixsocket $tmp/sock
dir $tmp
save ""
daemonize yes
pidfile $tmp/pid
logfile $tmp/log
include $conf
CONF
${DLOCK_SERVER:-redis-server} "$tmp/server.conf" || { cat "$tmp/log" 2>/dev/null; fail "the server did not start"; }
for _ in $(seq 100); do [ -S "$tmp/sock" ] && break; sleep 0.1; done
[ -S "$tmp/sock" ] || { cat "$tmp/log"; fail "no socket after 10 s"; }
reply=$(${DLOCK_CLI:-redis-cli} -s "$tmp/sock" DLOCK.ACQUIRE res tok 10000 2>&1) || true
[ "$reply" -gt 0 ] 2>/dev/null || { cat "$tmp/log"; fail "the installed module did not grant ($reply)"; }
said=$(/usr/bin/dlock --version)
case "$said" in "dlock $version ("*")") ;; *) fail "/usr/bin/dlock --version said: $said (package $version)" ;; esac
status=$(/usr/bin/dlock --url "unix://$tmp/sock" status res 2>&1) || true
case "$status" in "res: held"*) ;; *) fail "/usr/bin/dlock status said: $status" ;; esac
kill "$(cat "$tmp/pid")"
for _ in $(seq 100); do [ -S "$tmp/sock" ] || break; sleep 0.1; done
rm -f "$tmp/pid" "$tmp/sock"

# The recommended setup: `CONFIG REWRITE` finds the loadmodule line in the
# file it rewrites, so the next start loads the module once.
sed "s|^include $conf\$|loadmodule /usr/lib/redis/modules/libdlock.so|" "$tmp/server.conf" >"$tmp/rewritten.conf"
start() {
	${DLOCK_SERVER:-redis-server} "$tmp/rewritten.conf" || { cat "$tmp/log" 2>/dev/null; fail "the server did not start from $tmp/rewritten.conf"; }
	for _ in $(seq 100); do [ -S "$tmp/sock" ] && break; sleep 0.1; done
	[ -S "$tmp/sock" ] || { cat "$tmp/log"; cat "$tmp/rewritten.conf"; fail "no socket after 10 s"; }
}
stop() {
	${DLOCK_CLI:-redis-cli} -s "$tmp/sock" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
	for _ in $(seq 100); do [ -S "$tmp/sock" ] || break; sleep 0.1; done
	rm -f "$tmp/pid" "$tmp/sock"
}
start
${DLOCK_CLI:-redis-cli} -s "$tmp/sock" CONFIG SET dlock.max-ttl 86400000 >/dev/null
${DLOCK_CLI:-redis-cli} -s "$tmp/sock" CONFIG REWRITE >/dev/null
stop
start
kept=$(${DLOCK_CLI:-redis-cli} -s "$tmp/sock" CONFIG GET dlock.max-ttl 2>&1 | tail -n 1) || true
stop
if [ "$kept" != 86400000 ]; then
	tail -n 20 "$tmp/log"
	cat "$tmp/rewritten.conf"
	fail "after CONFIG REWRITE and a restart, dlock.max-ttl read back: $kept (not 86400000)"
fi
loads=$(grep -c '^loadmodule' "$tmp/rewritten.conf")
[ "$loads" = 1 ] || { cat "$tmp/rewritten.conf"; fail "the rewritten config loads the module $loads times"; }

dpkg -r dlock
for f in $files; do [ ! -e "$f" ] || fail "dpkg -r left $f"; done
[ -e "$conf" ] || fail "dpkg -r removed the conffile $conf (only a purge should)"
dpkg -P dlock
installed=""
[ ! -e "$conf" ] || fail "dpkg -P left $conf"
echo "$me: OK ($deb: installed, the server loaded it by include, granted fence $reply, $said, dlock status saw it; loaded by a loadmodule line, a dlock.* setting kept by CONFIG REWRITE across a restart; removed and purged)"
