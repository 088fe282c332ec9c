#!/usr/bin/env bash
# `make bench-instructions BASELINE=<commit or module>`: how many CPU
# instructions each plain-lock command costs the server, this build against
# another, counted by callgrind. Instruction counts do not depend on what
# else the machine runs, so on a shared 2-core VM they judge a change to
# the plain path where wall-clock throughput pairs are too noisy
# (docs/performance.md#instructions-per-command-make-bench-instructions).
#
# One server per build under `valgrind --tool=callgrind` (AOF everysec),
# the same fixed workload on each through `--pipe`: ACQUIRE of N free locks
# (grants), ACQUIRE of the same N by another token (busy), owner EXTEND of
# the N, owner RELEASE of the N. The count per command is the inclusive
# count of the module's command entry point over one workload (a callgrind
# dump after each), divided by its N commands; the ratio is this build / the baseline (goal: <= 1.02, the
# instruction side of the baseline section's >= 0.98x throughput goal).
#   .ci/instructions.sh THIS_MODULE BASELINE_MODULE [N]
set -euo pipefail

this=${1:?the module of this build}
base=${2:?the baseline module}
n=${3:-20000}
server=${DLOCK_SERVER:-redis-server}
cli=${DLOCK_CLI:-redis-cli}
command -v valgrind >/dev/null || { echo "valgrind not installed: apt-get install -y valgrind" >&2; exit 1; }
command -v callgrind_annotate >/dev/null || { echo "callgrind_annotate not found (valgrind)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# The workloads, as RESP, identical for both builds.
. "$(dirname "${BASH_SOURCE[0]}")/callgrind-loads.sh"
write_loads "$work" "$n" \
	'acquire=DLOCK.ACQUIRE res:{i} tok 600000' \
	'busy=DLOCK.ACQUIRE res:{i} other 600000' \
	'extend=DLOCK.EXTEND res:{i} tok 600000' \
	'release=DLOCK.RELEASE res:{i} tok'

# Runs the workloads on one build; prints "acquire extend release" counts
# (inclusive instructions of each entry point).
measure() {
	local side=$1 module=$2 dir="$work/$1" port
	mkdir -p "$dir"
	port=$(free_port)
	valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
		"$server" --port "$port" --bind 127.0.0.1 --loadmodule "$module" \
		--save '' --appendonly yes --appendfsync everysec --dir "$dir" \
		>"$dir/server.log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	local up=
	for _ in $(seq 1 300); do
		if "$cli" -p "$port" ping >/dev/null 2>&1; then up=1; break; fi
		sleep 0.1
	done
	[ -n "$up" ] || { echo "$side: the server did not start:" >&2; tail -20 "$dir/server.log" >&2; exit 1; }
	# A dump after each workload (callgrind_control), so each is counted
	# on its own: dump k holds workload k.
	local k=0 counts=()
	for w in acquire busy extend release; do
		"$cli" -p "$port" --pipe <"$work/$w.resp" >"$dir/$w.out" 2>&1
		grep -q "errors: 0, replies: $n" "$dir/$w.out" || { echo "$side: $w:" >&2; cat "$dir/$w.out" >&2; exit 1; }
		callgrind_control -d "$pid" >/dev/null
		k=$((k + 1))
		counts+=("$(callgrind_annotate --inclusive=yes "$dir/cg.out.$k" 2>/dev/null | awk '
			/dlock::server::(acquire|extend|release)_entry/ { gsub(",", "", $1); c = $1 }
			END { print c }')")
	done
	"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
	echo "${counts[@]}"
}

read -r ta tb te tr < <(measure this "$this")
read -r ba bb be br < <(measure baseline "$base")
[ -n "$tr" ] && [ -n "$br" ] || { echo "no counts (symbols stripped?)" >&2; exit 1; }

echo
echo "### Instructions per command, this build against the baseline build"
echo
echo "This build: \`$this\`; baseline: \`$base\`. callgrind, $("$server" --version | awk '{print $1, $2, $3}'), AOF everysec; $n commands per workload."
echo
echo "| command | this build | baseline | ratio | goal | result |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
row() {
	python3 - "$@" <<'EOF'
import sys
name, t, b, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = t / b
print(f"| {name} | {t / n:.0f} | {b / n:.0f} | {r:.3f}x | <= 1.02x | {'PASS' if r <= 1.02 else 'MISS'} |")
EOF
}
row "ACQUIRE, free (a grant)" "$ta" "$ba" "$n"
row "ACQUIRE, held by another (nil)" "$tb" "$bb" "$n"
row "EXTEND, owner" "$te" "$be" "$n"
row "RELEASE, owner" "$tr" "$br" "$n"
