#!/usr/bin/env bash
# `make bench-floor-instructions`: how many CPU instructions the server
# spends per plain-lock command against the floor (`FLOOR.CHECK`,
# benches/floor/), counted by callgrind, and which functions make the
# difference: what the `floor` section of `make bench` cannot tell on a
# loaded machine (docs/performance.md#the-floor-floor).
#
# One server under `valgrind --tool=callgrind` (AOF everysec) with dlock and
# the floor module, fed fixed workloads through `--pipe`, a callgrind dump
# after each: FLOOR.CHECK of N populated floor values (owner token), ACQUIRE
# of N free locks (grants), ACQUIRE of the same N by another token (busy),
# owner EXTEND and owner RELEASE of the N. A second server without modules
# runs the native primitives it has (SET NX PX on free keys, SET IFEQ PX,
# DELEX IFEQ or DELIFEQ as the owner). Per command: the whole server's
# instructions over the workload's dump (reading, parsing, executing,
# propagating, replying) divided by N; then, for each dlock command, the
# functions whose own (exclusive) instructions per command differ most
# from the floor's.
#   .ci/floor-instructions.sh DLOCK_MODULE FLOOR_MODULE [N] [TOP]
# (KEEP=1 keeps the dumps, one per workload, and names their folder.)
set -euo pipefail

dlock=$(realpath "${1:?the dlock module}")
floor=$(realpath "${2:?the floor module (benches/floor/, cargo build --release -p dlock-floor)}")
n=${3:-20000}
top=${4:-12}
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
[ -n "${KEEP:-}" ] && trap - EXIT && echo "keeping $work" >&2

. "$(dirname "${BASH_SOURCE[0]}")/callgrind-loads.sh"
write_loads "$work" "$n" \
	'populate=FLOOR.SET res:{i} tok 600000' \
	'floor=FLOOR.CHECK res:{i} tok' \
	'acquire=DLOCK.ACQUIRE lock:{i} tok 600000' \
	'busy=DLOCK.ACQUIRE lock:{i} other 600000' \
	'extend=DLOCK.EXTEND lock:{i} tok 600000' \
	'release=DLOCK.RELEASE lock:{i} tok' \
	'setnx=SET lock:{i} tok NX PX 600000' \
	'setifeq=SET lock:{i} tok IFEQ tok PX 600000' \
	'delex=DELEX lock:{i} IFEQ tok' \
	'delifeq=DELIFEQ lock:{i} tok'

# Starts a server under callgrind in $work/$1 with the remaining arguments;
# sets port and pid.
start() {
	local dir="$work/$1"
	shift
	mkdir -p "$dir"
	port=$(free_port)
	valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
		"$server" --port "$port" --bind 127.0.0.1 "$@" \
		--save '' --appendonly yes --appendfsync everysec --dir "$dir" \
		>"$dir/server.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	for _ in $(seq 1 300); do
		"$cli" -p "$port" ping >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "$dir: the server did not start:" >&2
	tail -20 "$dir/server.log" >&2
	exit 1
}

# Runs the workloads named on the server at $port, a dump after each; the
# dump of workload w is linked as $dir/w.cg. A workload the server refuses
# (a command it lacks) is left out.
run() {
	local dir="$work/$1" k=0
	shift
	for w in "$@"; do
		"$cli" -p "$port" --pipe <"$work/$w.resp" >"$dir/$w.out" 2>&1 || true
		callgrind_control -d "$pid" >/dev/null
		k=$((k + 1))
		if grep -q "errors: 0, replies: $n" "$dir/$w.out"; then
			ln -s "$dir/cg.out.$k" "$work/$w.cg"
		fi
	done
	"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
}

start modules --loadmodule "$dlock" --loadmodule "$floor"
run modules populate floor acquire busy extend release
start native
run native setnx setifeq delex delifeq

echo
echo "### Instructions per command against the floor"
echo
echo "callgrind, $("$server" --version | awk '{print $1, $2, $3}'), AOF everysec, $n commands per workload; the whole server's instructions per command (reading, parsing, executing, propagating, replying). dlock and the floor on one server with both modules, the native commands on one without modules."
echo
python3 - "$work" "$n" "$top" <<'EOF'
import os, re, subprocess, sys
work, n, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def functions(w, inclusive="no"):
    """Exclusive (or inclusive) instructions per function of workload w's dump."""
    out = subprocess.run(["callgrind_annotate", f"--inclusive={inclusive}", "--auto=no", "--threshold=100", f"{work}/{w}.cg"],
                         capture_output=True, text=True).stdout
    total, fns = 0, {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)\s*$", line)
        if not m:
            continue
        count = int(m.group(1).replace(",", ""))
        what = m.group(2)
        if what.startswith("PROGRAM TOTALS"):
            total = count
        elif ":" in what:
            name = what.split(":", 1)[1]
            obj = re.search(r" \[([^]]*)\]$", name)
            name = re.sub(r" \[[^]]*\]$", "", name)
            if name.startswith("0x") and obj:
                # A function without a symbol: name its object.
                name = f"{name} in {os.path.basename(obj.group(1))}"
            fns[name] = fns.get(name, 0) + count
    # Frames still on the stack when callgrind dumps (main, the event loop's
    # callers) come out with the whole dump's count: not a function's own.
    return total, {f: c for f, c in fns.items() if c < 0.99 * total}

rows = [("`FLOOR.CHECK`, owner (the floor)", "floor"),
        ("ACQUIRE, free (a grant)", "acquire"),
        ("ACQUIRE, held by another (nil)", "busy"),
        ("EXTEND, owner", "extend"),
        ("RELEASE, owner", "release"),
        ("`SET NX PX`, free key", "setnx"),
        ("`SET IFEQ PX`, owner", "setifeq"),
        ("`DELEX IFEQ`, owner", "delex"),
        ("`DELIFEQ`, owner", "delifeq")]
have = {w: functions(w) for _, w in rows if os.path.exists(f"{work}/{w}.cg")}
base = have["floor"][0] / n
print("| command | instructions per command | / floor |")
print("| --- | ---: | ---: |")
for title, w in rows:
    if w in have:
        per = have[w][0] / n
        print(f"| {title} | {per:.0f} | {per / base:.2f}x |")
    else:
        print(f"| {title} | n/a (not on this server) | - |")
print()
# Where each command's instructions go, from inclusive counts: the module
# command (split into the module API calls it makes and the module's own
# code), what the server does after the command (`afterCommand`: the
# propagation that feeds the AOF), and the rest (reading, parsing, dispatching, the event loop).
# Timer work (RM_GetServerInfo, RM_CreateTimer) is left out of the command;
# Valkey names the API functions VM_ instead of RM_.
groups = [
    ("key open, type, value, close", r"[RV]M_(OpenKey|CloseKey|KeyType|ModuleTypeGetType|ModuleTypeGetValue|StringPtrLen)$"),
    ("reply", r"[RV]M_Reply"),
    ("keyspace write, expiry, signal, event", r"[RV]M_(ModuleTypeSetValue|ModuleTypeReplaceValue|DeleteKey|SetAbsExpire|SetExpire|SignalModifiedKey|NotifyKeyspaceEvent)$"),
    ("`RM_Replicate`", r"[RV]M_Replicate$"),
    ("other module API (alloc, strings, flags)", r"[RV]M_(?!GetServerInfo|FreeServerInfo|ServerInfo|CreateTimer)"),
]
print("Where the instructions go, per command (inclusive counts; the module's own code is its entry point less the module API calls it makes; after the command: `afterCommand`, the propagation of what the command replicated, which feeds the AOF):")
print()
print("| command | total | module's own code | " + " | ".join(g for g, _ in groups) + " | after the command | rest (read, parse, dispatch) |")
print("| --- | ---: | ---: | " + " | ".join("---:" for _ in groups) + " | ---: | ---: |")
for title, w in [(t, w) for t, w in rows if w in have]:
    total = have[w][0]
    incl = functions(w, "yes")[1]
    entry = sum(c for f, c in incl.items() if re.search(r"(dlock::server::\w+_entry|dlock_floor::check_entry)$", f))
    taken, cells = set(), []
    for _, pattern in groups:
        names = [f for f in incl if re.match(pattern, f) and f not in taken]
        taken.update(names)
        cells.append(sum(incl[f] for f in names))
    own = entry - sum(cells)
    after = incl.get("afterCommand") or incl.get("propagatePendingCommands", 0)
    rest = total - entry - after
    if entry == 0:
        # A core command: no module call to split.
        module = " | ".join("-" for _ in range(len(groups) + 1))
    else:
        module = f"{own / n:.0f} | " + " | ".join(f"{c / n:.0f}" for c in cells)
    print(f"| {title} | {total / n:.0f} | {module} | {after / n:.0f} | {rest / n:.0f} |")
print()
floor_fns = have["floor"][1]
for title, w in rows[1:5]:
    fns = have[w][1]
    diff = {f: (fns.get(f, 0) - floor_fns.get(f, 0)) / n for f in set(fns) | set(floor_fns)}
    extra = (have[w][0] - have["floor"][0]) / n
    print(f"{title}: {extra:+.0f} instructions per command over the floor; the functions that differ most (own instructions per command, this command minus the floor):\n")
    print("| function | difference |")
    print("| --- | ---: |")
    for f, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]:
        print(f"| `{f[:110]}` | {d:+.0f} |")
    print()
EOF
