#!/usr/bin/env bash
# Starts a local Ray head for the Ray executor's tests, or stops the one it started.
#   ci/ray-head.sh start DIR   start a head bound to 127.0.0.1 (free ports, temp dir DIR/t,
#                              processes of its own) with token authentication on, using a
#                              token of its own (DIR/token, generated per head, mode 600, never
#                              printed); prints the jobs API address, writes it to DIR/address
#                              and the supervising `ray start --block` PID to DIR/pid.
#   ci/ray-head.sh stop DIR    stop that head only: its `ray start --block` process, then any
#                              process still running from its temp dir (by PID; never a
#                              machine-wide `ray stop`), then remove DIR.
# The user's own Ray settings do not reach the head: RAY_AUTH_MODE, RAY_AUTH_TOKEN and
# RAY_AUTH_TOKEN_PATH are set (or unset) for it, so a ~/.ray/auth_token is never read.
set -euo pipefail
cd "$(dirname "$0")/.."
RAY=.venv-ray/bin/ray
PORT_NAMES=(gcs dash client agent_http agent_grpc runtime_env metrics object_manager node_manager)
ATTEMPTS=3
# N distinct free ports on 127.0.0.1, drawn at once: every socket stays bound until all are
# drawn, so no two are the same. Ray's default ports (GCS 6379, dashboard 8265, client 10001,
# dashboard agent 52365) are never handed out: another head on the machine may use them.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
n, reserved = int(sys.argv[1]), {6379, 8265, 10001, 52365}
held, ports = [], []
while len(ports) < n:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
    p = s.getsockname()[1]
    if p not in reserved:
        ports.append(p)
print(" ".join(map(str, ports)))
for s in held:
    s.close()
PY
}
# The head's own token (hex, 256 bits) in DIR/token, and the header file curl reads it from
# (a header on curl's command line would show in `ps`).
make_token() {
    local dir=$1
    (
        umask 077
        python3 -c 'import secrets; print(secrets.token_hex(32))' >"$dir/token"
        printf 'Authorization: Bearer %s\n' "$(cat "$dir/token")" >"$dir/auth-header"
    )
}
# One try at starting the head on fresh ports. 0: ready; 1: it failed; 2: a port was taken.
start_once() {
    local dir=$1 abs
    abs=$(cd "$dir" && pwd)
    local -a ports
    read -r -a ports <<<"$(free_ports ${#PORT_NAMES[@]})"
    local gcs=${ports[0]} dash=${ports[1]}
    # `ray start --block` supervises the head's processes; its PID is the handle to stop them.
    # Ray's object store falls back to /tmp when /dev/shm is small (CI containers).
    env -u RAY_AUTH_TOKEN RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$abs/token" \
    RAY_USAGE_STATS_ENABLED=0 RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1 \
    setsid "$RAY" start --head --block \
        --node-ip-address=127.0.0.1 --port="$gcs" \
        --dashboard-host=127.0.0.1 --dashboard-port="$dash" --include-dashboard=true \
        --ray-client-server-port="${ports[2]}" \
        --dashboard-agent-listen-port="${ports[3]}" \
        --dashboard-agent-grpc-port="${ports[4]}" \
        --runtime-env-agent-port="${ports[5]}" \
        --metrics-export-port="${ports[6]}" \
        --object-manager-port="${ports[7]}" \
        --node-manager-port="${ports[8]}" \
        --min-worker-port=0 --max-worker-port=0 \
        --num-cpus="${RAY_NUM_CPUS:-2}" --num-gpus=0 \
        --object-store-memory=200000000 \
        --temp-dir="$abs/t" --disable-usage-stats >"$dir/head.log" 2>&1 &
    echo $! >"$dir/pid"
    echo "http://127.0.0.1:$dash" >"$dir/address"
    # Ready once the jobs API answers an authenticated request.
    local code
    for _ in $(seq 1 120); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -H @"$dir/auth-header" \
            "http://127.0.0.1:$dash/api/version" 2>/dev/null || true)
        case "$code" in
        200) return 0 ;;
        401 | 403)
            echo "error: the test head refused its own token (HTTP $code); its log:" >&2
            tail -30 "$dir/head.log" >&2
            return 1
            ;;
        esac
        if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            if grep -qiE 'port.*(used by other components|already in use)|address already in use|failed to bind' "$dir/head.log"; then
                return 2
            fi
            echo "error: the Ray head exited; its log:" >&2
            tail -30 "$dir/head.log" >&2
            return 1
        fi
        sleep 1
    done
    echo "error: the Ray jobs API did not answer within 120 s; the head's log:" >&2
    tail -30 "$dir/head.log" >&2
    return 1
}
stop_head() {
    local dir=$1 pid abs
    if [[ -f "$dir/pid" ]]; then
        pid=$(cat "$dir/pid")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    # Whatever still runs from this head's temp dir (its session's processes name it).
    abs=$(cd "$dir" && pwd)
    for p in $(pgrep -f -- "$abs/t" || true); do
        [[ "$p" == "$$" ]] || kill -KILL "$p" 2>/dev/null || true
    done
}
case "${1:-}" in
start)
    dir=$2
    mkdir -p "$dir"
    [[ -x "$RAY" ]] || { echo "error: $RAY missing: run ci/ray-install.sh first" >&2; exit 1; }
    make_token "$dir"
    for attempt in $(seq 1 "$ATTEMPTS"); do
        rc=0
        start_once "$dir" || rc=$?
        case "$rc" in
        0)
            cat "$dir/address"
            exit 0
            ;;
        2)
            echo "ray-head: attempt $attempt/$ATTEMPTS: a port drawn for the head was taken" \
                "before Ray bound it; $(grep -iE -m1 'port|address already in use' "$dir/head.log")" >&2
            stop_head "$dir"
            rm -rf "$dir/t"
            ;;
        *) exit 1 ;;
        esac
    done
    echo "error: the Ray head could not get free ports in $ATTEMPTS attempts (something else" \
        "on this machine keeps taking them); the last head's log:" >&2
    tail -30 "$dir/head.log" >&2
    exit 1
    ;;
stop)
    dir=$2
    [[ -d "$dir" ]] || exit 0
    stop_head "$dir"
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
