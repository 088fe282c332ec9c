#!/usr/bin/env bash
# `make bench-guard-instructions`: where a guarded write's time goes. How
# many CPU instructions the server spends per `DLOCK.GUARD ... SET` (FENCE
# and TOKEN form) and per guarded BATCH of 10, against the Lua script
# clients run today (`EVALSHA` of GET-compare-SET, the lock a `SET NX PX`
# key) and a plain `SET`, counted by callgrind, with the guard's
# instructions split by what they do: what the `guard` section of
# `make bench` cannot tell on a loaded machine
# (docs/performance.md#guarded-writes-guard).
#
# Two servers under `valgrind --tool=callgrind` (AOF everysec): one with
# dlock (N locks `{g:<i>}` held by `tok:<i>`, their fences read back), one
# without modules (the same locks as `SET NX PX` keys, the scripts
# loaded). Each is fed fixed workloads through `--pipe`, a callgrind dump
# after each; per command: the whole server's instructions over the
# workload's dump (reading, parsing, executing, propagating, replying)
# divided by N.
#   .ci/guard-instructions.sh DLOCK_MODULE [N] [TOP]
# (KEEP=1 keeps the dumps, one per workload, and names their folder.)
set -euo pipefail

dlock=$(realpath "${1:?the dlock module}")
n=${2:-20000}
top=${3:-15}
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

lua_set="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[2], ARGV[2]) end"
lua_batch="if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[i]) end return #KEYS - 1"
sha_set=$(printf '%s' "$lua_set" | sha1sum | cut -d' ' -f1)
sha_batch=$(printf '%s' "$lua_batch" | sha1sum | cut -d' ' -f1)
ten() { # ten() PREFIX_PER_WRITE: the 10 writes' words
	local out="" i
	for i in 0 1 2 3 4 5 6 7 8 9; do out+=" $1 {g:{i}}:$i v:000000000000"; done
	printf '%s' "$out"
}
keys10="" vals10=""
for i in 0 1 2 3 4 5 6 7 8 9; do keys10+=" {g:{i}}:$i"; vals10+=" v:000000000000"; done

. "$(dirname "${BASH_SOURCE[0]}")/callgrind-loads.sh"
write_loads "$work" "$n" \
	'populate=DLOCK.ACQUIRE {g:{i}} tok:{i} 600000' \
	'token=DLOCK.GUARD {g:{i}} TOKEN tok:{i} SET {g:{i}}:0 v:000000000000' \
	"batch=DLOCK.GUARD {g:{i}} TOKEN tok:{i} BATCH 10$(ten '3 SET')" \
	'setm=SET {g:{i}}:0 v:000000000000' \
	'populate_lua=SET {g:{i}} tok:{i} NX PX 600000' \
	"lua=EVALSHA $sha_set 2 {g:{i}} {g:{i}}:0 tok:{i} v:000000000000" \
	"luabatch=EVALSHA $sha_batch 11 {g:{i}}$keys10 tok:{i}$vals10" \
	'set=SET {g:{i}}:0 v:000000000000'

# Starts a server under callgrind in $work/$1 with the remaining arguments;
# sets port, pid and dumps (the dumps made so far).
start() {
	local dir="$work/$1"
	shift
	mkdir -p "$dir"
	port=$(free_port)
	dumps=0
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

# Runs workload $2 on server $1 and dumps; the dump of a workload that
# answered N replies without an error is linked as $work/<workload>.cg.
load() {
	local dir="$work/$1" w=$2
	"$cli" -p "$port" --pipe <"$work/$w.resp" >"$dir/$w.out" 2>&1 || true
	callgrind_control -d "$pid" >/dev/null 2>&1
	dumps=$((dumps + 1))
	if grep -q "errors: 0, replies: $n" "$dir/$w.out"; then
		ln -s "$dir/cg.out.$dumps" "$work/$w.cg"
	else
		echo "$w: $(tail -1 "$dir/$w.out")" >&2
	fi
}

stop() {
	"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
}

start module --loadmodule "$dlock"
load module populate
# The FENCE workload needs each lock's fence: read them back (DLOCK.INFO's
# fourth field), then write the workload.
python3 - "$port" "$n" "$work/fence.resp" <<'PY'
import socket, sys
port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def resp(words):
    return "".join([f"*{len(words)}\r\n"] + [f"${len(w.encode())}\r\n{w}\r\n" for w in words])
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def reply():
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"*":
        return [reply() for _ in range(int(rest))]
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else f.read(size + 2)[:-2]
    if kind == b":":
        return int(rest)
    if kind == b"-":
        raise SystemExit(f"DLOCK.INFO: {rest.decode()}")
    return rest
with open(path, "w") as out:
    for start in range(0, n, 1000):
        batch = range(start, min(n, start + 1000))
        s.sendall("".join(resp(["DLOCK.INFO", f"{{g:{i}}}"]) for i in batch).encode())
        for i in batch:
            fence = reply()[3]
            out.write(resp(["DLOCK.GUARD", f"{{g:{i}}}", "FENCE", str(fence), "SET", f"{{g:{i}}}:0", "v:000000000000"]))
PY
callgrind_control -d "$pid" >/dev/null 2>&1
dumps=$((dumps + 1))
for w in fence token batch setm; do load module "$w"; done
stop

start plain
"$cli" -p "$port" script load "$lua_set" >/dev/null
"$cli" -p "$port" script load "$lua_batch" >/dev/null
for w in populate_lua lua luabatch set; do load plain "$w"; done
stop

echo
echo "### Instructions per guarded write"
echo
echo "callgrind, $("$server" --version | awk '{print $1, $2, $3}'), AOF everysec, $n commands per workload, each on its own lock \`{g:<i>}\` (held); the whole server's instructions per command (reading, parsing, executing, propagating, replying). The guard and \`SET (module loaded)\` on a server with dlock, the rest on one without modules."
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
                name = f"{name} in {os.path.basename(obj.group(1))}"
            fns[name] = fns.get(name, 0) + count
    # Frames still on the stack when callgrind dumps come out with the
    # whole dump's count: not a function's own.
    return total, {f: c for f, c in fns.items() if c < 0.99 * total}

rows = [("`DLOCK.GUARD ... FENCE f SET k v`", "fence", 1),
        ("`DLOCK.GUARD ... TOKEN t SET k v`", "token", 1),
        ("`EVALSHA` GET-compare-SET (Lua)", "lua", 1),
        ("`SET k v` (no module)", "set", 1),
        ("`SET k v` (dlock loaded)", "setm", 1),
        ("`DLOCK.GUARD ... TOKEN t BATCH 10 ...`", "batch", 10),
        ("`EVALSHA` GET check + 10 SETs (Lua)", "luabatch", 10)]
have = {w: functions(w) for _, w, _ in rows if os.path.exists(f"{work}/{w}.cg")}
base = have["set"][0] / n if "set" in have else None
print("| command | instructions per command | per write | / `SET` (no module) | / Lua |")
print("| --- | ---: | ---: | ---: | ---: |")
lua = {1: "lua", 10: "luabatch"}
for title, w, writes in rows:
    if w not in have:
        print(f"| {title} | n/a (refused or missing) | - | - | - |")
        continue
    per = have[w][0] / n
    vs_set = f"{per / writes / base:.2f}x" if base else "-"
    l = lua[writes]
    vs_lua = f"{per / (have[l][0] / n):.2f}x" if l in have else "-"
    print(f"| {title} | {per:.0f} | {per / writes:.0f} | {vs_set} | {vs_lua} |")
print()
# Where the guard's instructions go, from inclusive counts: the module
# command split into RM_Call (running the inner command, its propagation
# included when the guard replicates that way) and the rest of the module
# API, the module's own code (its entry point less the API calls it
# makes), what the server does after the command (afterCommand: the
# propagation that feeds the AOF) and the rest (reading, parsing,
# dispatching, the event loop). Valkey names the API functions VM_.
groups = [
    ("`RM_Call` (the inner command)", r"[RV]M_Call$"),
    ("key open, type, value, close", r"[RV]M_(OpenKey|CloseKey|KeyType|ModuleTypeGetType|ModuleTypeGetValue|StringPtrLen)$"),
    ("reply", r"[RV]M_Reply"),
    ("`RM_Replicate`", r"[RV]M_Replicate"),
    ("other module API", r"[RV]M_(?!GetServerInfo|FreeServerInfo|ServerInfo|CreateTimer)"),
]
print("Where the instructions go, per command (inclusive counts; the module's own code is its entry point less the module API calls it makes; after the command: `afterCommand`, the propagation that feeds the AOF):")
print()
print("| command | total | the command (module entry, `evalGenericCommand`, `setCommand`) | module's own code | " + " | ".join(g for g, _ in groups) + " | after the command | rest (read, parse, dispatch, reply I/O) |")
print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in groups) + " | ---: | ---: |")
for title, w, _ in [r for r in rows if r[1] in have]:
    total = have[w][0]
    incl = functions(w, "yes")[1]
    entry = sum(c for f, c in incl.items() if re.search(r"dlock::server::\w+_entry$", f))
    taken, cells = set(), []
    for _, pattern in groups:
        names = [f for f in incl if re.match(pattern, f) and f not in taken]
        taken.update(names)
        cells.append(sum(incl[f] for f in names))
    after = incl.get("afterCommand") or incl.get("propagatePendingCommands", 0)
    if entry == 0:
        module = " | ".join("-" for _ in range(len(groups) + 1))
        command = incl.get("evalGenericCommand" if w.startswith("lua") else "setCommand", 0)
    else:
        module = f"{(entry - sum(cells)) / n:.0f} | " + " | ".join(f"{c / n:.0f}" for c in cells)
        command = entry
    rest = total - command - after
    print(f"| {title} | {total / n:.0f} | {command / n:.0f} | {module} | {after / n:.0f} | {rest / n:.0f} |")
print()
for title, w, against in [("`DLOCK.GUARD ... TOKEN t SET`", "token", "set"),
                          ("`DLOCK.GUARD ... TOKEN t SET`", "token", "lua")]:
    if w not in have or against not in have:
        continue
    fns, other = have[w][1], have[against][1]
    diff = {f: (fns.get(f, 0) - other.get(f, 0)) / n for f in set(fns) | set(other)}
    extra = (have[w][0] - have[against][0]) / n
    print(f"{title} against {dict((x[1], x[0]) for x in rows)[against]}: {extra:+.0f} instructions per command; the functions that differ most (own instructions per command, the guard minus the other):\n")
    print("| function | difference |")
    print("| --- | ---: |")
    for f, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]:
        print(f"| `{f[:110]}` | {d:+.0f} |")
    print()
EOF
