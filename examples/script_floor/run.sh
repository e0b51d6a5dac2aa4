#!/bin/bash
# What the acquire script's forms cost one Redis server, measured by the
# server itself: INFO commandstats around 100 000 calls of each form
# (redis-benchmark, 4 connections, random keys), µs per call.
#
#   bash examples/script_floor/run.sh [path/to/redis-server]
#
# Forms: the project's lua/acquire.lua (EVALSHA, and as a function with
# FCALL), an empty script, the acquire's five calls without any logic, the
# same five calls for four resources in one call, and a four-call variant
# that reads the void key and the counter with one MGET. See
# docs/performance.md for the figures and what they rule out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
server=${1:-redis-server}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
"$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --logfile "$dir/log" --pidfile "$dir/pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

one="3 lock:__rand_int__ fence:__rand_int__ void:__rand_int__"
four="12"
for s in a b c d; do
  four="$four lock$s:__rand_int__ fence$s:__rand_int__ void$s:__rand_int__"
done
args="v:id 30000 86400000 0"

# usage: measure LABEL COMMAND...
measure() {
  local label=$1; shift
  redis-cli -p "$port" FLUSHALL >/dev/null
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
  redis-benchmark -p "$port" -n 100000 -c 4 -r 10000000 -q "$@" >/dev/null
  local stat
  stat=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' |
    grep -E "^cmdstat_(evalsha|fcall):" | sed -E 's/.*usec_per_call=([0-9.]+).*/\1/')
  printf '%-44s %8s µs per call\n' "$label" "$stat"
}

evalsha() {
  local sha
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$1")")
  shift
  measure "$label" EVALSHA "$sha" "$@"
}

label="lua/acquire.lua (EVALSHA)"; evalsha "$here/../../lua/acquire.lua" $one $args
{
  printf '#!lua name=floor\nredis.register_function{function_name="acquire", callback=function(KEYS, ARGV)\n'
  cat "$here/../../lua/acquire.lua"
  printf '\nend}\n'
} > "$dir/lib.lua"
redis-cli -p "$port" -x FUNCTION LOAD REPLACE < "$dir/lib.lua" >/dev/null
label="lua/acquire.lua (FCALL)"; measure "$label" FCALL acquire $one $args
label="empty script"; evalsha "$here/empty.lua" $one $args
label="four calls (MGET void + counter)"; evalsha "$here/four_calls.lua" $one $args
label="the five calls, no logic"; evalsha "$here/calls_only.lua" $one $args
label="the five calls, no logic, 4 resources"; evalsha "$here/calls_only_x4.lua" $four $args
