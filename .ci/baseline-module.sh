#!/bin/sh
# The module `make bench BASELINE=...` compares this build with (the bench's
# `baseline` section, benches/dlock/baseline.rs), as an absolute path on
# stdout; progress and errors go to stderr.
#   .ci/baseline-module.sh ''                   prints nothing: the section is
#                                                skipped with a note
#   .ci/baseline-module.sh path/to/libdlock.so  that file (relative paths are
#                                                taken from the current folder)
#   .ci/baseline-module.sh <git commit-ish>     that commit's module, built
#       into target/baseline/: its sources (git archive) in src-<sha>/, the
#       build in build/ (one folder for every baseline commit, so the
#       dependencies compile once), the module copied to libdlock-<sha>.so,
#       which later runs reuse as it is.
# A file wins over a commit of the same name; commits are looked up in the
# repository holding this script. CARGO names the cargo binary.
set -eu

me=.ci/baseline-module.sh
fail() {
	echo "$me: $*" >&2
	exit 1
}

want=${1-}
[ -n "$want" ] || exit 0

if [ -f "$want" ]; then
	dir=$(cd "$(dirname "$want")" && pwd -P)
	echo "$dir/$(basename "$want")"
	exit 0
fi

here=$(cd "$(dirname "$0")" && pwd -P)
if ! root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null); then
	fail "BASELINE=$want is not a file, and $here is not in a git repository to look it up as a commit"
fi
if ! sha=$(git -C "$root" rev-parse --verify --quiet "$want^{commit}"); then
	if [ -e "$want" ]; then
		fail "BASELINE=$want is neither a module file (it is not a regular file) nor a git commit"
	fi
	fail "BASELINE=$want is neither a file nor a git commit (git rev-parse --verify '$want^{commit}' failed)"
fi

out=$root/target/baseline
so=$out/libdlock-$sha.so
if [ -f "$so" ]; then
	echo "$me: BASELINE=$want is commit $sha; reusing $so" >&2
	echo "$so"
	exit 0
fi

src=$out/src-$sha
echo "$me: BASELINE=$want is commit $sha; building its module in $src" >&2
rm -rf "$src"
mkdir -p "$src"
git -C "$root" archive --format=tar "$sha" | tar -x -C "$src" ||
	fail "cannot unpack commit $sha into $src (git archive | tar)"
[ -f "$src/Cargo.toml" ] || fail "commit $sha has no Cargo.toml at its root: not a dlock tree"

# The same release profile as `make build`; --lib: the module only. The
# build folder is shared by every baseline commit (the dependencies compile
# once), and cargo judges dlock's freshness by the files the last build read,
# which are another commit's: dlock's own artifacts are removed first, or a
# second commit would get the first one's module.
(cd "$src" && ${CARGO:-cargo} clean --release -p dlock --target-dir "$out/build") >&2 ||
	fail "cannot clear the previous baseline build of dlock in $out/build"
# Its sources are no git checkout: DLOCK_GIT_SHA tells a build that reports
# its commit (build.rs) which one it is.
if ! (cd "$src" && DLOCK_GIT_SHA=$(git -C "$root" rev-parse --short=12 "$sha") \
	${CARGO:-cargo} build --release -p dlock --lib --target-dir "$out/build") >&2; then
	fail "building commit $sha's module failed (sources in $src, build in $out/build)"
fi
built=$out/build/release/libdlock.so
[ -f "$built" ] || fail "the build of commit $sha left no $built"
# Copied under a temporary name first: an interrupted copy is never reused.
cp "$built" "$so.part"
mv "$so.part" "$so"
echo "$me: built $so" >&2
echo "$so"
