#!/usr/bin/env bash
# Starts a local Ray head for the Ray executor's tests, or stops the one it started.
#   ci/ray-head.sh start DIR   start a head bound to 127.0.0.1 (free ports, temp dir DIR/t,
#                              processes of its own); prints the jobs API address, writes it
#                              to DIR/address and the supervising `ray start --block` PID to
#                              DIR/pid.
#   ci/ray-head.sh stop DIR    stop that head only: its `ray start --block` process, then any
#                              process still running from its temp dir (by PID; never a
#                              machine-wide `ray stop`), then remove DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
RAY=.venv-ray/bin/ray
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
case "${1:-}" in
start)
    dir=$2
    mkdir -p "$dir"
    [[ -x "$RAY" ]] || { echo "error: $RAY missing: run ci/ray-install.sh first" >&2; exit 1; }
    dash=$(free_port)
    # `ray start --block` supervises the head's processes; its PID is the handle to stop them.
    # Ray's object store falls back to /tmp when /dev/shm is small (CI containers).
    RAY_USAGE_STATS_ENABLED=0 RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1 \
    setsid "$RAY" start --head --block \
        --node-ip-address=127.0.0.1 --port="$(free_port)" \
        --dashboard-host=127.0.0.1 --dashboard-port="$dash" --include-dashboard=true \
        --ray-client-server-port="$(free_port)" \
        --dashboard-agent-listen-port="$(free_port)" \
        --dashboard-agent-grpc-port="$(free_port)" \
        --runtime-env-agent-port="$(free_port)" \
        --metrics-export-port="$(free_port)" \
        --min-worker-port=0 --max-worker-port=0 \
        --num-cpus="${RAY_NUM_CPUS:-2}" --num-gpus=0 \
        --object-store-memory=200000000 \
        --temp-dir="$dir/t" --disable-usage-stats >"$dir/head.log" 2>&1 &
    echo $! > "$dir/pid"
    echo "http://127.0.0.1:$dash" > "$dir/address"
    # Ready once the jobs API answers.
    for _ in $(seq 1 120); do
        if curl -sf "http://127.0.0.1:$dash/api/version" >/dev/null 2>&1; then
            cat "$dir/address"
            exit 0
        fi
        if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            echo "error: the Ray head exited; its log:" >&2
            tail -30 "$dir/head.log" >&2
            exit 1
        fi
        sleep 1
    done
    echo "error: the Ray jobs API did not answer within 120 s; the head's log:" >&2
    tail -30 "$dir/head.log" >&2
    exit 1
    ;;
stop)
    dir=$2
    [[ -d "$dir" ]] || exit 0
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
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
