#!/usr/bin/env bash
# `make test-matrix`: the integration suites on several servers, then a table
# (suite x server -> passed/failed) and a closing "N passed, N failed" line.
#
# Each argument is SERVER or SERVER=suite,suite,... (default: every suite),
# with SERVER as for `make SERVER=...`: redis (Debian's redis-server), valkey
# (Debian's valkey-server, installed from backports if missing) or a folder
# holding redis-server, redis-cli and redis-benchmark (or the valkey-
# ones). Without arguments:
# redis, valkey and every build in ../shared/servers/, every suite.
# A suite is a module path of the root crate's one test binary (tests/main.rs:
# `holds`, or a part of it, `holds::durable`), run as `cargo test --release
# --test dlock -- <path>::`; `layers` (tests/layers.rs); or client:<name>, a
# suite of the client (clients/rust/tests/<name>/, a module of its one test
# binary, clients/rust/tests/suites.rs). Every suite: the top-level
# modules of tests/main.rs, `layers` and the client's suites.
# Logs of each run: target/test-matrix/<server>-<suite>.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
-h | --help)
	sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
	exit 0
	;;
esac
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
	specs=(redis valkey)
	for d in ../shared/servers/*/; do
		[ -x "$d/redis-server" ] || [ -x "$d/valkey-server" ] && specs+=("$(cd "$d" && pwd)")
	done
fi

logs=target/test-matrix
mkdir -p "$logs"
cargo build --release || exit 1
# The rollback suite runs the previous release's module (.ci/previous-release)
# next to this build: built once here, as `make test` does, when a spec runs
# that suite (or every suite).
if [ -z "${DLOCK_PREVIOUS_MODULE:-}" ] && printf '%s\n' "${specs[@]}" | grep -qE '^[^=]*$|=all$|[=,]durability(::rollback)?(,|$)'; then
	DLOCK_PREVIOUS_MODULE=$(.ci/baseline-module.sh "$(sed -n '/^[^#]/{p;q}' .ci/previous-release)") || exit 1
	export DLOCK_PREVIOUS_MODULE
fi
cargo test --release --features dlock-client/tokio --no-run -q >/dev/null 2>&1 ||
	cargo test --release --features dlock-client/tokio --no-run || exit 1
# Every suite: the top-level modules of the one test binary, as it lists its
# tests; the layering check; the client's suites, named client:<name>.
mapfile -t all_suites < <(cargo test --release --features dlock-client/tokio --test dlock -q -- --list 2>/dev/null |
	sed -n 's/::.*: test$//p' | sort -u)
[ ${#all_suites[@]} -gt 0 ] || { echo "test-matrix: the test binary lists no tests" >&2; exit 1; }
all_suites+=(layers)
mapfile -t -O "${#all_suites[@]}" all_suites < <(ls clients/rust/tests/*/mod.rs | grep -v '/common/' | sed -E 's#^clients/rust/tests/([^/]+)/mod\.rs$#client:\1#' | sort -u)

declare -A cell total_secs
servers=()
# The table's rows: every suite run, in the order first asked for.
rows=()
total_passed=0
total_failed=0
any_failed=0
for spec in "${specs[@]}"; do
	server=${spec%%=*}
	if [ "$spec" = "$server" ] || [ "${spec#*=}" = all ]; then
		suites=("${all_suites[@]}")
	else
		IFS=, read -r -a suites <<<"${spec#*=}"
	fi
	case "$server" in
	redis) bins=(redis-server redis-cli redis-benchmark) ;;
	valkey) bins=(valkey-server valkey-cli valkey-benchmark) ;;
	*) server=$(cd "$server" 2>/dev/null && pwd || echo "$server")
	   prefix=redis-
	   [ -x "$server/redis-server" ] || prefix=valkey-
	   bins=("$server/${prefix}server" "$server/${prefix}cli" "$server/${prefix}benchmark") ;;
	esac
	if ! .ci/deps.sh "$server" >"$logs/deps.log" 2>&1; then
		cat "$logs/deps.log"
		echo "test-matrix: cannot set up $server" >&2
		exit 1
	fi
	export DLOCK_SERVER=${bins[0]} DLOCK_CLI=${bins[1]} DLOCK_BENCHMARK=${bins[2]}
	version=$("$DLOCK_SERVER" --version | grep -oE 'v=[^ ]+' | head -1)
	case "$server" in
	redis | valkey) name="$server ${version#v=}" ;;
	*) name="$(basename "$server") (${version#v=})" ;;
	esac
	servers+=("$name")
	for suite in "${suites[@]}"; do
		printf '%s\n' "${rows[@]}" | grep -qxF -- "$suite" || rows+=("$suite")
		logname=${suite//::/.}
		log="$logs/$(basename "$server")-${logname//:/-}.log"
		echo "== $name: $suite"
		started=$SECONDS
		case "$suite" in
		client:*)
			# A suite's tests by their exact names: a filter is a substring
			# (`lock::` would also run `redlock::`).
			mapfile -t tests < <(cargo test -q --release -p dlock-client --features tokio --test suites -- --list 2>/dev/null |
				sed -n "s/^\(${suite#client:}::.*\): test\$/\1/p")
			if [ ${#tests[@]} -gt 0 ]; then
				cargo test --release -p dlock-client --features tokio --test suites -- --exact "${tests[@]}" >"$log" 2>&1
			else
				echo "no test in client suite ${suite#client:}" >"$log"
				false
			fi ;;
		layers) cargo test --release --features dlock-client/tokio --test layers >"$log" 2>&1 ;;
		*) cargo test --release --features dlock-client/tokio --test dlock -- "$suite::" >"$log" 2>&1 ;;
		esac
		rc=$?
		took=$((SECONDS - started))
		total_secs["$name"]=$((${total_secs["$name"]:-0} + took))
		passed=$(grep -E '^test result:' "$log" | awk '{s += $4} END {print s + 0}')
		failed=$(grep -E '^test result:' "$log" | awk '{s += $6} END {print s + 0}')
		total_passed=$((total_passed + passed))
		total_failed=$((total_failed + failed))
		if [ "$rc" -eq 0 ]; then
			cell["$name|$suite"]="passed ($passed, ${took} s)"
		else
			any_failed=1
			[ "$failed" -gt 0 ] || total_failed=$((total_failed + 1))
			cell["$name|$suite"]="**FAILED** ($failed of $((passed + failed)))"
			grep -E '^test .* FAILED$|panicked at' "$log" | head -20
			echo "(full log: $log)"
		fi
	done
done

echo
header="| suite |"
rule="| --- |"
for s in "${servers[@]}"; do
	header+=" $s |"
	rule+=" --- |"
done
echo "$header"
echo "$rule"
for suite in "${rows[@]}"; do
	row="| $suite |"
	for s in "${servers[@]}"; do
		row+=" ${cell["$s|$suite"]:--} |"
	done
	echo "$row"
done
row="| (time) |"
for s in "${servers[@]}"; do
	row+=" ${total_secs["$s"]:-0} s |"
done
echo "$row"
echo
echo "test-matrix: $total_passed passed, $total_failed failed"
exit "$any_failed"
