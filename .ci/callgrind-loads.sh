# Shared by .ci/instructions.sh and .ci/floor-instructions.sh (sourced):
# the fixed workloads as RESP files, and a free loopback port.

# write_loads DIR N NAME=COMMAND... writes DIR/NAME.resp: COMMAND (words
# split on spaces, `{i}` the key's number) for i in 0..N.
write_loads() {
	python3 - "$@" <<'PY'
import sys
work, n, loads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def resp(words):
    out = f"*{len(words)}\r\n"
    for w in words:
        out += f"${len(w.encode())}\r\n{w}\r\n"
    return out
for load in loads:
    name, command = load.split("=", 1)
    with open(f"{work}/{name}.resp", "w") as f:
        f.write("".join(resp(command.replace("{i}", str(i)).split()) for i in range(n)))
PY
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
