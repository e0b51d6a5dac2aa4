#!/usr/bin/env bash
# Mutation run: puts hand-made bugs into lua/, the SQL recipe and the lock's
# safety logic in src/, one at a time, and checks that the test files most
# likely to notice each one do fail.
#
#   bash .ci/mutants.sh              # every mutant
#   bash .ci/mutants.sh NAME...      # only these (see --list)
#   bash .ci/mutants.sh --list       # names, files and test files
#
# Each mutant is (name, file, test files, exact original text, replacement).
# Outcomes:
#   caught    the tests failed with the bug in (what we want)
#   SURVIVED  every test passed with the bug in: a test is missing
#   STALE     the original text is not in the file (or not exactly once):
#             the code was rewritten, re-target the mutant at the new code
#   unviable  the mutant does not compile (re-target it too)
# The file is restored after each mutant, and on exit, error or Ctrl-C
# (if the script is killed with SIGKILL: git checkout -- src lua).
# Exit status: 0 when every mutant was caught, 1 otherwise.
#
# Needs python3 and redis-server (bash .ci/setup); the mutants whose test
# files are "loom" run the `loom_checks` unit tests (.ci/loom.sh) instead.
# Each mutant takes an incremental build plus its test files: 10 to 60 s on
# two cores. Test output of each run goes to target/mutants/NAME.log.
set -uo pipefail
cd "$(dirname "$0")/.."

# Per-mutant limit on the test run: a mutant that makes a test hang counts
# as caught once this passes (timeout exits non-zero).
TEST_TIMEOUT=${MUTANTS_TEST_TIMEOUT:-900}
LOG_DIR=target/mutants

NAMES=()
declare -A FILE TESTS ORIG REPL SERVER

# m NAME FILE "TEST_FILE..." ORIGINAL REPLACEMENT [SERVER]
# SERVER: a server of .ci/servers.sh the tests run on (REDFENCE_TEST_SERVER)
# instead of redis-server, for code only another server exercises.
m() {
    NAMES+=("$1")
    FILE[$1]=$2
    TESTS[$1]=$3
    ORIG[$1]=$4
    REPL[$1]=$5
    SERVER[$1]=${6:-}
}

# What the instances execute (lua/) and the SQL recipe (src/sql.rs):
# cargo-mutants mutates Rust code only, so these bugs are put in by hand.
# The Rust side is covered by cargo-mutants (docs/mutation-testing.md); the
# Rust mutants kept below guard the lock's safety logic by name.

# --- lua/acquire.lua ---------------------------------------------------------

m acquire-ignores-void lua/acquire.lua "late_requests" \
  "if redis.call('EXISTS', KEYS[#KEYS]) == 1 then" \
  "if false then"

m acquire-resend-refused lua/acquire.lua "late_requests" \
  "local resent = ours == n / 2" \
  "local resent = false"

m acquire-resend-bumps-again lua/acquire.lua "late_requests" \
  "if current and resent then" \
  "if current and resent and false then"

m set-acquired-though-held lua/acquire.lua "lock waiting lease multi" \
  "if held then
  local identity" \
  "if false then
  local identity"

m set-granted-with-a-member-ours-and-one-free lua/acquire.lua "late_requests" \
  "if ours > 0 and not resent then" \
  "if false then"

m acquire-without-clock-floor lua/acquire.lua "fencing late_requests" \
  "return math.max(tonumber(current) + 1, base)" \
  "return tonumber(current) + 1"

m acquire-resend-refused-single lua/acquire.lua "late_requests" \
  "if holder and holder ~= ARGV[1] then" \
  "if holder then"

m acquire-granted-though-held-single lua/acquire.lua "lock waiting lease" \
  "if holder and holder ~= ARGV[1] then" \
  "if false then"

m acquire-lock-lives-idle-time-single lua/acquire.lua "lock waiting lease fencing multi holder bad_input" \
  "redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')" \
  "redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3], 'GET')"

m acquire-trusts-the-proposal lua/acquire.lua "late_requests fencing" \
  "local base = math.min(math.max(tonumber(ARGV[4]) or 0, clock), clock + EPS)" \
  "local base = tonumber(ARGV[4]) or clock"

m acquire-proposal-window-unbounded lua/acquire.lua "late_requests" \
  "local base = math.min(math.max(tonumber(ARGV[4]) or 0, clock), clock + EPS)" \
  "local base = math.max(tonumber(ARGV[4]) or 0, clock)"

m acquire-ignores-foreign-lock-type lua/acquire.lua "bad_input multi" \
  "  elseif lock_type ~= 'none' then" \
  "  elseif false then"

m acquire-ignores-foreign-counter lua/acquire.lua "bad_input" \
  "  if current and not string.match(current, '^%d+\$') then" \
  "  if false then"

m acquire-lock-lives-idle-time lua/acquire.lua "lock waiting lease fencing multi holder bad_input" \
  "redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])" \
  "redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[3])"

m acquire-counter-never-expires lua/acquire.lua "fencing lock waiting lease multi holder bad_input" \
  "redis.call('SET', key, string.format('%.0f', token), 'PX', ARGV[3])" \
  "redis.call('SET', key, string.format('%.0f', token))"

# --- lua/release.lua ---------------------------------------------------------

m release-without-compare lua/release.lua "lock waiting lease" \
  "if redis.call('GET', KEYS[i]) == ARGV[1] then" \
  "if redis.call('EXISTS', KEYS[i]) == 1 then"

m release-writes-no-void lua/release.lua "late_requests native" \
  "if all == 0 or ARGV[3] == '1' then" \
  "if ARGV[3] == '1' then"

m clean-up-voids-only-where-not-ours lua/release.lua "late_requests" \
  "if all == 0 or ARGV[3] == '1' then" \
  "if all == 0 then"

m release-reports-all-ours lua/release.lua "lock waiting lease fencing multi holder bad_input" \
  "    all = 0" \
  "    all = 1"

# --- lua/extend.lua ----------------------------------------------------------

m extend-recreates-key lua/extend.lua "lock lease fencing" \
  "for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[2], 'GT')
end" \
  "for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] and redis.call('EXISTS', key) == 1 then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end"

m extend-ignores-owner lua/extend.lua "lock lease fencing" \
  "if redis.call('GET', key) ~= ARGV[1] then" \
  "if redis.call('EXISTS', key) == 0 then"

m extend-may-shorten lua/extend.lua "late_requests" \
  "redis.call('PEXPIRE', key, ARGV[2], 'GT')" \
  "redis.call('PEXPIRE', key, ARGV[2])"

m extend-in-seconds lua/extend.lua "lock lease fencing waiting multi holder bad_input" \
  "redis.call('PEXPIRE', key, ARGV[2], 'GT')" \
  "redis.call('EXPIRE', key, ARGV[2], 'GT')"

# --- lua/fence_raise.lua -----------------------------------------------------

m raise-unchecked lua/fence_raise.lua "lock lease fencing" \
  "if not held then
  return 0
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end" \
  "do
  return 1
end"

m raise-does-not-raise lua/fence_raise.lua "fencing" \
  "    redis.call('SET', KEYS[2], ARGV[2])
    held = true" \
  "    held = true"

m raise-unbounded lua/fence_raise.lua "fencing" \
  "if tonumber(ARGV[2]) <= clock + MAX_AHEAD then" \
  "if true then"

m raise-seeds-lost-counter-at-token lua/fence_raise.lua "fencing lock lease" \
  "current = now[1] .. string.format('%06d', tonumber(now[2]))" \
  "current = '0'"

# --- lua/fenced_write.lua ----------------------------------------------------

m fenced-write-accepts-stale lua/fenced_write.lua "fencing" \
  "if highest and tonumber(highest) > tonumber(ARGV[1]) then" \
  "if highest and tonumber(highest) > tonumber(ARGV[1]) + 1000000 then"

m fenced-write-refuses-same-token lua/fenced_write.lua "fencing" \
  "if highest and tonumber(highest) > tonumber(ARGV[1]) then" \
  "if highest and tonumber(highest) >= tonumber(ARGV[1]) then"

# --- lua/fenced_read.lua -----------------------------------------------------

m fenced-read-leaves-the-fence lua/fenced_read.lua "fencing" \
  "redis.call('SET', KEYS[1], ARGV[1])" \
  "redis.call('EXISTS', KEYS[1])"

m fenced-read-accepts-stale lua/fenced_read.lua "fencing" \
  "if highest and tonumber(highest) > tonumber(ARGV[1]) then" \
  "if highest and tonumber(highest) > tonumber(ARGV[1]) + 1000000 then"

# --- lua/semaphore_slots.lua -------------------------------------------------

m semaphore-count-unchecked lua/semaphore_slots.lua "semaphore" \
  "if recorded and recorded ~= ARGV[1] then" \
  "if false then"

# --- lua/rw_acquire.lua, rw_release.lua --------------------------------------

m rw-read-ignores-writer lua/rw_acquire.lua "rwlock" \
  "if writer and writer ~= value then" \
  "if ARGV[5] == 'w' and writer and writer ~= value then"

m rw-write-ignores-readers lua/rw_acquire.lua "rwlock" \
  "    if reader then" \
  "    if false then"

m rw-read-ignores-waiting-writer lua/rw_acquire.lua "rwlock" \
  "    if redis.call('EXISTS', KEYS[3]) == 1 then" \
  "    if false then"

m rw-acquire-ignores-void lua/rw_acquire.lua "late_requests" \
  "if redis.call('EXISTS', KEYS[5]) == 1 then" \
  "if false then"

m rw-release-keeps-reader lua/rw_release.lua "rwlock" \
  "if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then" \
  "if false then"

# --- The SQL recipe (src/sql.rs) ---------------------------------------------

m sql-fence-accepts-stale src/sql.rs "postgres" \
  "WHERE redfence_fences.token <= EXCLUDED.token \\" \
  "WHERE redfence_fences.token <= EXCLUDED.token + 1000000000 \\"

m sql-fence-refuses-same-holder src/sql.rs "postgres" \
  "WHERE redfence_fences.token <= EXCLUDED.token \\" \
  "WHERE redfence_fences.token < EXCLUDED.token \\"

m sql-fence-never-raised src/sql.rs "postgres" \
  "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token \\" \
  "ON CONFLICT (resource) DO UPDATE SET token = redfence_fences.token \\"

# --- Rust: the lock's safety logic ------------------------------------------

m drift-ignored src/lock/acquire.rs "lock lease fencing" \
  '.checked_sub(self.shared.cfg.drift(ttl))' \
  '.checked_sub(Duration::ZERO)'

m watchdog-never-marks-lost src/lock/watchdog.rs "lock lease fencing" \
  'out_of_retries || next_retry_end >= r.valid_until' \
  'false && out_of_retries && next_retry_end >= r.valid_until'

m no-validity-check-removed src/lock/acquire.rs "lock lease fencing" \
  'Some(valid_until) if Moment::now() < valid_until =>' \
  'Some(valid_until) =>'

m quorum-minus-one src/protocol/majority.rs "lock waiting lease" \
  'self.voters / 2 + 1' \
  'self.voters / 2'

m release-not-announced src/protocol/scripts.rs "lock waiting lease" \
  'pipe.cmd(announce_command(sharded))
            .arg(&member.keys.channel)
            .arg(announcement);' \
  'pipe.cmd("ECHO").arg(&member.keys.channel);'

m failed-attempt-not-released src/lock/acquire.rs "lock waiting lease" \
  'attempt.release(|i| tally.refused(i));' \
  'let _ = |i: usize| tally.refused(i);'

m decided-on-one-yes src/protocol/majority.rs "lock waiting lease" \
  'self.reached(agreeing) || self.ruled_out(against)' \
  'agreeing >= 1 || self.ruled_out(against)'

m token-is-min src/lock/acquire.rs "fencing" \
  'let token = *answers.get(quorum.size() - 1)?;' \
  'let token = *answers.first()?;'

m raise-round-skipped src/lock/acquire.rs "fencing" \
  'if !agreed {' \
  'if !agreed && false {'

m no-proposal src/lock/acquire.rs "fencing" \
  'let proposal = self.shared.instances.clock_proposal();' \
  'let proposal = 0u64;'

m extend-without-quorum src/lock/lease.rs "lock lease fencing" \
  'if quorum.reached(tally.yes.len()) && now < new_valid {' \
  'if now < new_valid {'

m extend-validity-ignores-drift src/lock/lease.rs "lock lease fencing" \
  'let validity = believed.saturating_sub(shared.cfg.drift(believed));' \
  'let validity = believed;'

m not-held-not-detected src/lock/lease.rs "lock lease fencing" \
  'if quorum.ruled_out(tally.no.len()) {
            lease.mark_lost_locked(&mut st, LossReason::NotHeld);' \
  'if tally.no.len() > shared.instances.len() {
            lease.mark_lost_locked(&mut st, LossReason::NotHeld);'

m validity-end-not-enforced src/lock/lease.rs "lock waiting lease" \
  'if st.lost.is_none() && now >= st.valid_until {' \
  'if st.lost.is_none() && now >= st.valid_until + std::time::Duration::from_secs(3600) {'

m watchdog-renews-at-expiry src/lock/watchdog.rs "lease" \
  '(renewed + r.believed / 3).min(r.valid_until)' \
  'r.valid_until'

m set-waiter-keeps-a-release-it-cannot-use src/lock/retry.rs "lock waiting lease fencing multi holder bad_input" \
  'watch.pass_on();' \
  'let _ = &watch;'

m extension-cap-ignored src/lock/watchdog.rs "lease" \
  'cfg.max_extensions.is_none_or(|max| extensions < max)' \
  'cfg.max_extensions.is_none_or(|max| extensions < max + 1000)'

m cancel-ignored-in-pause src/lock/retry.rs "waiting" \
  'let _ = stop.recv_timeout(pause);' \
  'let _ = stop; std::thread::sleep(pause);'

# An operator's unlock deletes whatever it finds: a late copy takes a
# later holder's key.
m force-release-any-value lua/force_release.lua "late_requests holder" \
  "if value and redis.sha1hex(value) == ARGV[1] then" \
  "if value then"

# A hold rests on its release alone: a lost release cuts it short.
m hold-rests-on-release src/lock/acquire.rs "late_requests holder" \
  'let keys = if hold.is_zero() {' \
  'let keys = if true {'

m cancelled-grant-kept src/lock/call.rs "waiting" \
  'if cancelled {
        lease::undo(caller.shared, &lease);' \
  'if cancelled && false {
        lease::undo(caller.shared, &lease);'

# --- Rust: the native commands (src/protocol/native.rs), on Valkey 9.1 ----------------

m native-probe-finds-no-delifeq src/protocol/native.rs "native" \
  'delifeq: int(replies.first()),' \
  'delifeq: false,' valkey-9.1.2

m native-release-never-voids src/protocol/native.rs "native" \
  '(Form::Release { void, .. }, Some(Value::Int(0))) => Some(void),' \
  '(Form::Release { void, .. }, Some(Value::Int(2))) => Some(void),' valkey-9.1.2

m native-extension-read-as-lost src/protocol/native.rs "native lease" \
  'Value::Okay => *first = Value::Int(1),' \
  'Value::Okay => *first = Value::Int(0),' valkey-9.1.2

m native-refusal-not-retried src/transport/instance.rs "native" \
  'if Form::refused(values) {' \
  'if false {' valkey-9.1.2

m native-extension-under-a-longer-belief src/lock/lease.rs "native" \
  '&& st.valid_until <= began + ttl' \
  '&& true' valkey-9.1.2

m native-longer-round-believed-in-full src/lock/lease.rs "native" \
  'asked.min(self.native_ttl)' \
  'asked' valkey-9.1.2

m native-extension-of-a-hold src/lock/lease.rs "late_requests" \
  '&& lease.hold_until.is_none()' \
  '&& true' valkey-9.1.2

m watchdog-renews-by-the-asked-ttl src/lock/lease.rs "native" \
  'believed: self.believed(st, st.ttl),' \
  'believed: st.ttl,' valkey-9.1.2

# --- the client's own threads: schedule exploration (.ci/loom.sh) ----------
# Test files "loom": the `loom_checks` unit tests, built with --cfg loom.

m leaving-call-takes-its-wake-ups-before-locking src/transport/notify/mod.rs "loom" \
  "        let mut channels = self.registry.channels.lock();
        // A wake-up this call did not use goes to the next in line (of each
        // of its channels: it cannot tell which one announced it).
        // (An observer's wake-ups are its own: the turn went elsewhere.)
        // Each tagged one, a permit freed, goes to a call of its own.
        let mut tags = std::mem::take(&mut *self.held.lock());
        let mut lock_release = false;
        if !self.observer {
            for wake in self.wake.try_iter() {
                match wake {
                    Some(tag) => tags.push(tag),
                    None => lock_release = true,
                }
            }
        }
" \
  "        let mut tags = std::mem::take(&mut *self.held.lock());
        let mut lock_release = false;
        if !self.observer {
            for wake in self.wake.try_iter() {
                match wake {
                    Some(tag) => tags.push(tag),
                    None => lock_release = true,
                }
            }
        }
        let mut channels = self.registry.channels.lock();
"

m lock-release-wakes-every-waiter src/transport/notify/mod.rs "loom" \
  "            if let Some(first) = waiters.iter().find(|w| !w.observer) {
                let _ = first.wake.try_send(None);
            }" \
  "            for first in waiters.iter().filter(|w| !w.observer) {
                let _ = first.wake.try_send(None);
            }"

m tag-delivery-read-before-the-registry-lock src/transport/notify/mod.rs "loom" \
  "        let channels = self.channels.lock();
        let Some(waiters) = channels.get(channel) else {
            return;
        };
        if payload == UNTAGGED {
            if let Some(first) = waiters.iter().find(|w| !w.observer) {
                let _ = first.wake.try_send(None);
            }
        } else {
            let earlier = self.delivered_to(channel, payload);
" \
  "        let earlier = self.delivered_to(channel, payload);
        let channels = self.channels.lock();
        let Some(waiters) = channels.get(channel) else {
            return;
        };
        if payload == UNTAGGED {
            if let Some(first) = waiters.iter().find(|w| !w.observer) {
                let _ = first.wake.try_send(None);
            }
        } else {
"

m leaving-call-drops-queued-permit-releases src/transport/notify/mod.rs "loom" \
  "        let mut tags = std::mem::take(&mut *self.held.lock());
        let mut lock_release = false;
        if !self.observer {
            for wake in self.wake.try_iter() {
                match wake {
                    Some(tag) => tags.push(tag),
                    None => lock_release = true,
                }
            }
        }" \
  "        let tags = std::mem::take(&mut *self.held.lock());
        let mut lock_release = false;
        if !self.observer {
            for wake in self.wake.try_iter() {
                if wake.is_none() {
                    lock_release = true;
                }
            }
        }"

m round-notifies-only-when-all-answered src/transport/round.rs "loom" \
  "        if everyone || (!was_decided && self.is_decided(&st.tally)) {" \
  "        let _ = was_decided;
        if everyone {"

m round-caller-checks-before-it-waits src/transport/round.rs "loom" \
  "        let mut st = self.state.lock();
        while !done(self, &st) {
            if self.decided.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }" \
  "        let already = done(self, &self.state.lock());
        let mut st = self.state.lock();
        if !already {
            let _timed_out = self.decided.wait_until(&mut st, deadline).timed_out();
        }"

m timer-filed-first-decided-after-insert src/lock/watchdog.rs "loom" \
  "        let first = timers.next_due().is_none_or(|next| at < next);
        timers.seq += 1;
        let seq = timers.seq;
        timers.due.insert((at, seq), entry);" \
  "        timers.seq += 1;
        let seq = timers.seq;
        timers.due.insert((at, seq), entry);
        let first = timers.next_due().is_none_or(|next| at < next);"

m watchdog-stop-without-a-wake-up src/lock/watchdog.rs "loom" \
  "        self.timers.lock().stopping = true;
        self.changed.notify_all();" \
  "        self.timers.lock().stopping = true;"

m watchdog-sleeps-after-a-tick-without-looking src/lock/watchdog.rs "loom" \
  "            tick(due);
            timers = self.timers.lock();" \
  "            tick(due);
            timers = self.timers.lock();
            if !timers.stopping {
                self.changed.wait_for(&mut timers, IDLE);
            }"

m lease-listener-filed-after-a-second-look src/lock/lease.rs "loom" \
  "        let mut st = self.state.lock();
        match self.loss_locked(&mut st, Moment::now()) {
            Some(LossReason::Released) => {}
            Some(reason) => {
                let _ = tx.send(reason);
            }
            None => st.listeners.push(tx),
        }" \
  "        let loss = self.loss_locked(&mut self.state.lock(), Moment::now());
        match loss {
            Some(LossReason::Released) => {}
            Some(reason) => {
                let _ = tx.send(reason);
            }
            None => self.state.lock().listeners.push(tx),
        }"

m lease-loss-wakes-no-waiter src/lock/lease.rs "loom" \
  "            let _ = tx.try_send(reason);
        }
        self.changed.notify_all();" \
  "            let _ = tx.try_send(reason);
        }"

# ---------------------------------------------------------------------------

if [[ ${1:-} == --list ]]; then
    for n in "${NAMES[@]}"; do
        printf '%-30s %-22s tests: %s%s\n' "$n" "${FILE[$n]}" "${TESTS[$n]}" \
            "${SERVER[$n]:+ (on ${SERVER[$n]})}"
    done
    exit 0
fi

# --check: every mutant's original text is still in its file exactly once
# (no mutant went stale when the code moved); nothing is run.
if [[ ${1:-} == --check ]]; then
    stale=0
    for n in "${NAMES[@]}"; do
        if ! python3 -c 'import sys; t=open(sys.argv[1], encoding="utf-8").read(); sys.exit(t.count(sys.argv[2]) != 1)' \
            "${FILE[$n]}" "${ORIG[$n]}" 2>/dev/null; then
            echo "STALE     $n: original text not found exactly once in ${FILE[$n]}"
            stale=1
        fi
    done
    exit $stale
fi

selected=("$@")
if [[ ${#selected[@]} -eq 0 ]]; then
    selected=("${NAMES[@]}")
fi
for n in "${selected[@]}"; do
    if [[ -z ${FILE[$n]+set} ]]; then
        echo "unknown mutant: $n (see --list)" >&2
        exit 2
    fi
done

command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
source .ci/servers.sh
mkdir -p "$LOG_DIR"
BACKUP=$(mktemp -d)
CURRENT=""

restore() {
    if [[ -n $CURRENT ]]; then
        cp "$BACKUP/current" "$CURRENT"
        CURRENT=""
    fi
}
trap 'restore; rm -rf "$BACKUP"' EXIT
trap 'exit 130' INT TERM

# apply FILE ORIGINAL REPLACEMENT: exit 0 applied, 3 not found exactly once.
apply() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
path, orig, repl = sys.argv[1:4]
with open(path, encoding="utf-8") as f:
    text = f.read()
if text.count(orig) != 1:
    sys.exit(3)
with open(path, "w", encoding="utf-8") as f:
    f.write(text.replace(orig, repl, 1))
PY
}

declare -A OUTCOME
for n in "${selected[@]}"; do
    file=${FILE[$n]}
    failed=""
    log="$LOG_DIR/$n.log"
    cp "$file" "$BACKUP/current"
    CURRENT=$file
    if ! apply "$file" "${ORIG[$n]}" "${REPL[$n]}"; then
        restore
        OUTCOME[$n]=STALE
        echo "STALE     $n: original text not found exactly once in $file"
        continue
    fi
    args=()
    for t in ${TESTS[$n]}; do
        args+=(--test "$t")
    done
    server=redis-server
    if [[ -n ${SERVER[$n]} ]]; then
        server=$(server_path "${SERVER[$n]}")
    fi
    echo "--- $n ($file; tests: ${TESTS[$n]}; server: $server)" >"$log"
    if [[ ${TESTS[$n]} == loom ]]; then
        # The library's unit tests under --cfg loom (no server).
        if ! nice -n 5 cargo rustc --lib --profile test -- --cfg loom -D warnings >>"$log" 2>&1; then
            OUTCOME[$n]=unviable
        elif nice -n 5 timeout "$TEST_TIMEOUT" bash .ci/loom.sh >>"$log" 2>&1; then
            OUTCOME[$n]=SURVIVED
        else
            OUTCOME[$n]=caught
        fi
    elif ! nice -n 5 cargo test --features testing --no-run "${args[@]}" >>"$log" 2>&1; then
        OUTCOME[$n]=unviable
    elif [[ ! -x $server ]] && ! command -v "$server" >/dev/null; then
        OUTCOME[$n]=STALE
        echo "no server $server (bash .ci/setup fetches it)" >>"$log"
    elif REDFENCE_TEST_SERVER=$server nice -n 5 timeout "$TEST_TIMEOUT" \
        cargo test --features testing "${args[@]}" >>"$log" 2>&1; then
        OUTCOME[$n]=SURVIVED
    else
        OUTCOME[$n]=caught
    fi
    if [[ ${OUTCOME[$n]} == caught ]]; then
        failed=$(grep -E '^test .* FAILED$|^    [a-z_0-9]+$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/; s/^ +//' | sort -u | tr '\n' ' ')
    fi
    restore
    case ${OUTCOME[$n]} in
        caught) echo "caught    $n by: ${failed:-see $log}" ;;
        *) printf '%-9s %s (log: %s)\n' "${OUTCOME[$n]}" "$n" "$log" ;;
    esac
done

caught=0
others=()
for n in "${selected[@]}"; do
    if [[ ${OUTCOME[$n]} == caught ]]; then
        caught=$((caught + 1))
    else
        others+=("$n=${OUTCOME[$n]}")
    fi
done
echo
echo "mutants: ${#selected[@]}, caught: $caught, not caught: ${#others[@]} ${others[*]:-}"
[[ ${#others[@]} -eq 0 ]]
