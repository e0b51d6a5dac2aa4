#!/usr/bin/env bash
# Shows that the nemesis bench's checker sees violations: builds the bench
# from a scratch copy of HEAD with one deliberate bug put into what the
# instances or the client execute (a script in lua/, a file in src/),
# runs `--workload all` with every nemesis the server supports, and
# expects exit 1 (a violation) within the run.
#
#   bash .ci/nemesis-bugs.sh              # every bug
#   bash .ci/nemesis-bugs.sh NAME...      # only these (see --list)
#   bash .ci/nemesis-bugs.sh --list
#
# Environment: NEMESIS_BUGS_SECS (run length, default 120), NEMESIS_BUGS_SEED
# (default 7), NEMESIS_BUGS_NEMESIS (a --nemesis list; default: every
# nemesis the server supports). The tree itself is never touched: each bug is applied to a
# copy under target/nemesis-bugs/NAME (built with a shared target
# directory). Prints, per bug, whether it was caught, the first violation
# (kind and time) and the faults injected in the 10 s before it, and what
# the two judges of the stored history say: `nemesis --check` (the same
# checker from history.jsonl: must agree with the run) and .ci/judge.py
# (tokens and the fenced store only: it sees the bugs that reach them).
# Exit status: 0 when every bug was caught and --check agreed, 1 otherwise.
#
# Needs python3, PostgreSQL and the servers of .ci/setup. Each bug takes a
# release build (about a minute) plus its run.
set -uo pipefail
cd "$(dirname "$0")/.."
source .ci/servers.sh

SECS=${NEMESIS_BUGS_SECS:-120}
SEED=${NEMESIS_BUGS_SEED:-7}
NEMESIS_ARGS=()
[ -n "${NEMESIS_BUGS_NEMESIS:-}" ] && NEMESIS_ARGS=(--nemesis "$NEMESIS_BUGS_NEMESIS")
WORK=target/nemesis-bugs

NAMES=()
declare -A FILE ORIG REPL SERVER

# b NAME FILE ORIGINAL REPLACEMENT SERVER
# SERVER: redis-server (7.0: every extension and release is a script) or a
# name from .ci/servers.sh.
b() {
    NAMES+=("$1")
    FILE[$1]=$2
    ORIG[$1]=$3
    REPL[$1]=$4
    SERVER[$1]=$5
}

# A late, shorter extension lands after a longer one and cuts the lease.
b extension-without-gt lua/extend.lua \
  "redis.call('PEXPIRE', key, ARGV[2], 'GT')" \
  "redis.call('PEXPIRE', key, ARGV[2])" \
  redis-server

# A failed attempt's acquire that lands after its clean-up takes the lock
# for nobody.
b acquire-ignores-void lua/acquire.lua \
  "if redis.call('EXISTS', KEYS[#KEYS]) == 1 then" \
  "if false then" \
  redis-server

# The client's proposal becomes the token as it is, however far from the
# instance's clock.
b proposal-unclamped lua/acquire.lua \
  "local base = math.min(math.max(tonumber(ARGV[4]) or 0, clock), clock + EPS)" \
  "local base = tonumber(ARGV[4]) or clock" \
  valkey-9.1.2

# The step forgets which slot it took: every permit says slot 0 (and
# keeps slot 0's keys), so two holders of different slots write one slot's
# data.
b permit-slot-misread src/semaphore.rs \
  "step.taken = Some(slot);" \
  "step.taken = Some(0);" \
  redis-server

# The candidate slots run to `permits` inclusive (`..=`), the rotation and
# the free-on-a-quorum filter widened to match (a slot the first round did
# not list counts as free): one permit too many.
b permit-extra-slot src/semaphore.rs \
  "        Ok((0..self.permits)
            .map(|i| (start + i) % self.permits)
            .filter(|slot| quorum.reached(free_on[*slot as usize]))
            .collect())" \
  "        Ok((0..=self.permits)
            .map(|i| (start + i) % (self.permits + 1))
            .filter(|slot| free_on.get(*slot as usize).is_none_or(|n| quorum.reached(*n)))
            .collect())" \
  redis-server

# A read is granted while another client's write holds the lock.
b rw-read-ignores-writer lua/rw_acquire.lua \
  "if writer and writer ~= value then" \
  "if writer and writer ~= value and ARGV[5] == 'w' then" \
  redis-server

# A write looks for live readers at index 2 of a one-entry ZRANGE (Lua
# counts from 1): it never sees them.
b rw-write-ignores-readers lua/rw_acquire.lua \
  "local reader = redis.call('ZRANGE', KEYS[2], 0, 0)[1]" \
  "local reader = redis.call('ZRANGE', KEYS[2], 0, 0)[2]" \
  redis-server

# A hold rests on its release alone (the acquire sets the keys to the
# TTL): a release lost to a black hole lets the once-only job run twice.
b hold-rests-on-release src/lock/acquire.rs \
  "let keys = if hold.is_zero() {" \
  "let keys = if true {" \
  redis-server

# An operator's unlock deletes whatever it finds: a delete held up on a
# slow link takes a later holder's key.
b unlock-any-value lua/force_release.lua \
  "if value and redis.sha1hex(value) == ARGV[1] then" \
  "if value then" \
  redis-server

if [ "${1:-}" = "--list" ]; then
    for n in "${NAMES[@]}"; do echo "$n  ${FILE[$n]}  on ${SERVER[$n]}"; done
    exit 0
fi
selected=("$@")
[ ${#selected[@]} -eq 0 ] && selected=("${NAMES[@]}")

apply() { # FILE ORIGINAL REPLACEMENT: exactly one occurrence, or fail
    python3 - "$1" "$2" "$3" <<'EOF'
import sys
path, orig, repl = sys.argv[1:]
text = open(path).read()
if text.count(orig) != 1:
    sys.exit(f"{path}: the original text is not there exactly once: re-target the bug")
open(path, "w").write(text.replace(orig, repl))
EOF
}

report() { # RESULTS_JSON
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
vs = [v for v in r["violations"] if v["second_at_s"] > 0] or r["violations"]
if not vs:
    print("  no violation recorded")
    sys.exit()
first = min(vs, key=lambda v: v["second_at_s"] or 1e9)
at = first["second_at_s"]
kinds = sorted({v["kind"] for v in r["violations"]})
print(f"  {len(r['violations'])} violations ({', '.join(kinds)}); first: {first['kind']} on {first['resource']} at {at:.1f} s")
recent = [f for f in r["fault_log"] if at - 10 <= f["end_s"] and f["start_s"] <= at]
for f in recent:
    print(f"    fault {f['nemesis']} on {f['instances']} {f['start_s']:.1f}-{f['end_s']:.1f} s: {f['detail']}")
EOF
}

failed=0
for name in "${selected[@]}"; do
    if [ -z "${FILE[$name]:-}" ]; then
        echo "unknown bug $name (see --list)"; failed=1; continue
    fi
    dir=$WORK/$name
    rm -rf "$dir" && mkdir -p "$dir"
    git archive HEAD | tar -x -C "$dir"
    if ! apply "$dir/${FILE[$name]}" "${ORIG[$name]}" "${REPL[$name]}"; then
        failed=1; continue
    fi
    server=${SERVER[$name]}
    [ "$server" != redis-server ] && server=$(server_path "$server")
    if ! (cd "$dir" && CARGO_TARGET_DIR=../target cargo build -q --release --features testing --example nemesis); then
        echo "$name: does not build"; failed=1; continue
    fi
    started=$SECONDS
    "$WORK/target/release/examples/nemesis" --server "$server" --workload all \
        --duration "$SECS" --seed "$SEED" "${NEMESIS_ARGS[@]}" --report "$dir/report" >"$dir/run.log" 2>&1
    status=$?
    case $status in
        1) echo "$name: caught (seed $SEED, $SECS s run, $((SECONDS - started)) s with set-up)" ;;
        0) echo "$name: MISSED: no violation in $SECS s (seed $SEED)"; failed=1 ;;
        *) echo "$name: the run could not be set up (exit $status): see $dir/run.log"; failed=1 ;;
    esac
    [ -f "$dir/report/results.json" ] && report "$dir/report/results.json"
    if [ -f "$dir/report/history.jsonl" ]; then
        "$WORK/target/release/examples/nemesis" --check "$dir/report" >"$dir/check.log" 2>&1
        again=$?
        python3 .ci/judge.py "$dir/report/history.jsonl" >"$dir/judge.log" 2>&1
        judged=$?
        echo "  --check: exit $again; judge.py: exit $judged ($(head -1 "$dir/judge.log" | sed 's/.*: //'))"
        [ "$again" = "$status" ] || { echo "  --check DISAGREES with the run"; failed=1; }
    fi
done
exit $failed
