#!/usr/bin/env bash
# Installs what building and testing need, and only what is missing.
#   .ci/deps.sh redis            Debian's redis-server and redis-tools (default)
#   .ci/deps.sh valkey           Debian's valkey-server and valkey-tools, from
#                                the backports suite (added to apt's sources
#                                if missing; only these packages come from it)
#   .ci/deps.sh /path/to/dir     a folder holding redis-server, redis-cli and
#                                redis-benchmark (or valkey-server, valkey-cli
#                                and valkey-benchmark) and
#                                redis-benchmark: checked, nothing installed
# `apt-get update` runs at most once. Services the packages start are stopped:
# tests start their own servers.
set -euo pipefail

# Rust first, and before any apt-get: Debian's rustc is older than the
# dependencies need, so a missing or old toolchain stops the run at once
# with one line saying what to install. Bash builtins only (the test runs
# this with a PATH holding nothing but bash: tests/ops/fresh_machine.rs).
manifest=${BASH_SOURCE[0]%/*}/../Cargo.toml
need=""
while IFS= read -r line; do
	case "$line" in 'rust-version = "'*)
		need=${line#*\"}
		need=${need%%\"*}
		break ;;
	esac
done <"$manifest"
rust_version() { # tool: its version as "major minor", or nothing
	local out
	out=$("$1" --version 2>/dev/null) || return 0
	out=${out#* }
	out=${out%% *}
	IFS=. read -r major minor _ <<<"$out"
	echo "$major $minor"
}
need_major=${need%%.*}
need_minor=${need#*.}
need_minor=${need_minor%%.*}
for tool in cargo rustc; do
	read -r major minor <<<"$(rust_version "$tool")" || true
	if [[ ! $major =~ ^[0-9]+$ || ! $minor =~ ^[0-9]+$ ]] ||
		((major < need_major || (major == need_major && minor < need_minor))); then
		found=missing
		[ -z "$major" ] || found="$major.$minor, too old"
		echo "dlock needs Rust >= $need (cargo and rustc; $tool is $found); install it with rustup: https://rustup.rs (Debian's rustc is too old), then run make again" >&2
		exit 1
	fi
done

kind=${1:-redis}
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
updated=""
apt_install() { # [apt-get install options...] packages...
	if [ -z "$updated" ]; then
		$sudo apt-get update
		updated=1
	fi
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

pkgs=""
dpkg -s libclang-dev >/dev/null 2>&1 || pkgs="$pkgs libclang-dev"
# libfaketime: tests/faults/clock_steps.rs steps a running server's wall clock.
dpkg -s libfaketime >/dev/null 2>&1 || pkgs="$pkgs libfaketime"
# openssl: the client's TLS tests (clients/rust/tests/tls/) make their certificates.
command -v openssl >/dev/null 2>&1 || pkgs="$pkgs openssl"
# tmux: `dlock top`'s live view is tested in a real terminal (clients/rust/tests/cli/top_live.rs).
command -v tmux >/dev/null 2>&1 || pkgs="$pkgs tmux"
case "$kind" in
redis)
	command -v redis-server >/dev/null 2>&1 || pkgs="$pkgs redis-server"
	command -v redis-cli >/dev/null 2>&1 || pkgs="$pkgs redis-tools"
	;;
esac
if [ -n "$pkgs" ]; then
	echo "installing:$pkgs"
	# shellcheck disable=SC2086
	apt_install $pkgs
	case "$pkgs" in *redis-server*)
		echo "stopping the redis-server service the package may have started"
		$sudo service redis-server stop >/dev/null 2>&1 || true ;;
	esac
fi

case "$kind" in
redis) ;;
valkey)
	if ! command -v valkey-server >/dev/null 2>&1 || ! command -v valkey-cli >/dev/null 2>&1; then
		# shellcheck disable=SC1091
		codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
		suite="$codename-backports"
		if ! grep -rqs -- "$suite" /etc/apt/sources.list /etc/apt/sources.list.d/; then
			echo "adding $suite to apt's sources"
			printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
				"$suite" | $sudo tee /etc/apt/sources.list.d/"$suite".sources >/dev/null
			updated=""
		fi
		echo "installing: valkey-server valkey-tools (from $suite)"
		apt_install -t "$suite" valkey-server valkey-tools
		echo "stopping the valkey-server service the package may have started"
		$sudo service valkey-server stop >/dev/null 2>&1 || true
	fi
	;;
*)
	prefix=redis-
	[ -x "$kind/redis-server" ] || prefix=valkey-
	for b in server cli benchmark; do
		b=$prefix$b
		if [ ! -x "$kind/$b" ]; then
			echo "SERVER=$kind: no executable $kind/$b" >&2
			exit 1
		fi
	done
	;;
esac

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
	rustup component add rustfmt clippy
fi
