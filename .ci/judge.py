#!/usr/bin/env python3
"""A second, independent judge of a nemesis history (history.jsonl).

Written from the format in docs/testing.md, not from the bench's checker
(examples/nemesis/checker.rs), so that a bug in one is unlikely to hide
in both. It judges two rules:

1. Fencing tokens, the fenced-mutex rule of Jepsen's Hazelcast suite:
   every grant's token is above every token granted (returned to its
   caller) before the grant's call started, per resource; a semaphore's
   permits per slot (each slot is its own resource in the history). On a
   reader-writer lock, a write's token is above every token, read or
   write, granted before its call started, and a read's above every
   write's (reads share, so their tokens may tie).
2. The PostgreSQL fenced store: each resource's accepted writes, in
   commit order, have strictly increasing tokens (one write per guard and
   resource, so a repeated token is two guards with one token), each read
   the value the accepted writes before it made (no lost update), and the
   counter equals the number of accepted writes; the leader's accepted
   acts never go back to a lower term; a read guard's two accepted reads
   saw one value, the number of accepted writes with lower tokens.
3. The Redis fenced store (`kv` events: fenced_get/fenced_set on a
   storage server, and fenced_get_shared, the reads of a reader-writer
   lock's readers, `kv_final` its values at the end): per key, taken in
   token order, the accepted writes wrote 1, 2, 3, ... (each a
   read-modify-write of the one before: a repeat or a gap is a lost
   update, a write out of token order a stale one); an accepted read,
   shared or not, saw as many as were accepted with lower tokens; a
   refused get or set came after an accepted operation with a higher
   token had begun, a refused shared get after an accepted get or set (a
   writer's) with a higher token had begun: readers never refuse each
   other (kv-reader-refused when only newer readers had begun); the final
   value is the count. A write whose answer was lost (`accepted` null)
   makes the key's counts unknowable: only the refusal rule is judged.
4. The fair lock's order (`fair_call` events): a grant (the call's end)
   is out of order when another call on the resource was waiting, live,
   with its entry on a quorum of queues before the granted call took its
   place: it joined before the granted call's join began and with a lower
   ticket, or, for a call granted in its first round (no ticket), before
   that call began. Live: from its join to its call's end, or to its pause
   (the client-pause nemesis stops a waiter's heartbeats: dead from then).
   A fault other than a client pause that was active between the waiter's
   join and the grant, or healed less than 2 s (a heartbeat TTL and a
   second) before the join, explains it: counted, not a violation.

    python3 .ci/judge.py target/nemesis/redis-7.0/history.jsonl
    python3 .ci/judge.py --self-test

Exit 0: no violation; 1: a violation (or a self-test failed); 2: the
history is missing, unreadable or malformed.
"""

import bisect
import json
import sys
from collections import defaultdict

FORMAT = 1
SHOWN = 20


class Malformed(Exception):
    """The history cannot be judged."""


def need(obj, key, kind, line):
    """obj[key], which must be of `kind` (bool is not a number here)."""
    if key not in obj:
        raise Malformed(f"line {line}: no {key!r}")
    value = obj[key]
    if kind in (int, float) and isinstance(value, bool):
        raise Malformed(f"line {line}: {key!r} is not a number")
    if kind is float and isinstance(value, int):
        value = float(value)
    if not isinstance(value, kind):
        raise Malformed(f"line {line}: {key!r} is not {kind.__name__}")
    return value


def load(lines):
    """The events of a history, by type; raises Malformed."""
    events = defaultdict(list)
    first = True
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except json.JSONDecodeError as e:
            raise Malformed(f"line {n}: not JSON: {e}") from None
        if not isinstance(event, dict):
            raise Malformed(f"line {n}: not an object")
        kind = need(event, "type", str, n)
        if first:
            if kind != "run":
                raise Malformed(f"line {n}: the first event must be 'run'")
            if need(event, "format", int, n) != FORMAT:
                raise Malformed(f"line {n}: format {event['format']}, this judge reads {FORMAT}")
            first = False
        event["_line"] = n
        events[kind].append(event)
    if first:
        raise Malformed("no events (an empty file)")
    return events


def grants(events):
    """resource -> [(start, granted, token, mode, client)] of every hold."""
    out = defaultdict(list)
    for h in events["hold"]:
        n = h["_line"]
        start = need(h, "start", float, n)
        granted = need(h, "granted", float, n)
        mode = need(h, "mode", str, n)
        client = need(h, "client", int, n)
        for t in need(h, "tokens", list, n):
            if not isinstance(t, dict):
                raise Malformed(f"line {n}: a token is not an object")
            resource = need(t, "resource", str, n)
            out[resource].append((start, granted, need(t, "token", int, n), mode, client))
    return out


def fenced_mutex(resource, holds, problems):
    """Each grant above every token granted before its call started."""
    rw = any(mode in ("read", "write") for _, _, _, mode, _ in holds)
    by_grant = sorted(holds, key=lambda h: h[1])
    times = [h[1] for h in by_grant]
    # Running maxima, over every grant and over writes only, with whose.
    top_any, top_write = [], []
    best_any = best_write = None
    for h in by_grant:
        if best_any is None or h[2] > best_any[2]:
            best_any = h
        if h[3] == "write" and (best_write is None or h[2] > best_write[2]):
            best_write = h
        top_any.append(best_any)
        top_write.append(best_write)
    for start, granted, token, mode, client in holds:
        before = bisect.bisect_left(times, start)
        if before == 0:
            continue
        if rw and mode == "read":
            earlier = top_write[before - 1]
        else:
            earlier = top_any[before - 1]
        if earlier is not None and token <= earlier[2]:
            problems.append(
                f"token-regression on {resource}: client {client} ({mode}) called at "
                f"{start:.3f} s and got token {token}, not above token {earlier[2]} granted "
                f"to client {earlier[4]} at {earlier[1]:.3f} s"
            )


def fenced_store(events, problems):
    """Accepted writes, counters, acts and reads of the PostgreSQL store."""
    writes = defaultdict(list)
    for w in sorted(events["write"], key=lambda w: need(w, "seq", int, w["_line"])):
        n = w["_line"]
        writes[need(w, "resource", str, n)].append(
            (need(w, "token", int, n), need(w, "read", int, n), need(w, "client", int, n))
        )
    for resource, accepted in writes.items():
        for i, (token, read, client) in enumerate(accepted):
            if i > 0 and token <= accepted[i - 1][0]:
                problems.append(
                    f"stale-write on {resource}: write {i} (client {client}) token {token} "
                    f"after token {accepted[i - 1][0]} in commit order"
                )
            if read != i:
                problems.append(
                    f"lost-update on {resource}: write {i} (client {client}, token {token}) "
                    f"read {read}, {i} writes were accepted before it"
                )
    counters = {}
    for c in events["counter"]:
        n = c["_line"]
        counters[need(c, "resource", str, n)] = need(c, "value", int, n)
    for resource in sorted(set(counters) | set(writes)):
        value, accepted = counters.get(resource), len(writes.get(resource, []))
        if value != accepted:
            problems.append(
                f"lost-update on {resource}: the counter is {value}, {accepted} writes were accepted"
            )
    top = None
    for a in sorted(events["act"], key=lambda a: need(a, "seq", int, a["_line"])):
        term = need(a, "term", int, a["_line"])
        if top is not None and term < top:
            problems.append(f"stale-act on the leader's acts: term {term} accepted after term {top}")
        top = term if top is None else max(top, term)
    for r in events["read"]:
        n = r["_line"]
        resource, token = need(r, "resource", str, n), need(r, "token", int, n)
        first, second = need(r, "first", int, n), need(r, "second", int, n)
        below = sum(1 for t, _, _ in writes.get(resource, []) if t < token)
        if first != second:
            problems.append(f"torn-read on {resource}: token {token} saw {first}, then {second}")
        if first != below:
            problems.append(
                f"stale-read on {resource}: token {token} saw {first}; "
                f"{below} writes with lower tokens were accepted"
            )


def fenced_kv(events, problems):
    """The Redis fenced store, per key (rule 3)."""
    by_key = defaultdict(list)
    for e in events["kv"]:
        n = e["_line"]
        op = need(e, "op", str, n)
        if op not in ("get", "set", "get_shared"):
            raise Malformed(f"line {n}: op {op!r}")
        accepted = e.get("accepted")
        if accepted not in (True, False, None):
            raise Malformed(f"line {n}: accepted {accepted!r}")
        by_key[need(e, "key", str, n)].append(
            (op, need(e, "token", int, n), accepted, need(e, "value", int, n),
             need(e, "start", float, n), need(e, "end", float, n), need(e, "client", int, n)))
    finals = {}
    for e in events["kv_final"]:
        finals[need(e, "key", str, e["_line"])] = need(e, "value", int, e["_line"])
    for key, ops in sorted(by_key.items()):
        for op, token, accepted, value, start, end, client in ops:
            if accepted is not False:
                continue
            # Who may refuse it: anyone newer refuses a writer's get or set;
            # only a newer writer (get or set) refuses a reader's shared get.
            newer = {o for o, t, a, _, s, _, _ in ops if a is True and t > token and s <= end}
            if op == "get_shared" and not newer & {"get", "set"}:
                kind = "kv-reader-refused" if newer else "kv-refused-wrongly"
                problems.append(
                    f"{kind} on {key}: client {client}'s get_shared with token {token} at "
                    f"{start:.3f} s was refused, no newer writer had begun")
            elif not newer:
                problems.append(
                    f"kv-refused-wrongly on {key}: client {client}'s {op} with token {token} "
                    f"at {start:.3f} s was refused, no newer token had begun")
        if any(op == "set" and accepted is None for op, _, accepted, *_ in ops):
            continue
        sets = sorted((t, v, c) for op, t, a, v, _, _, c in ops if op == "set" and a is True)
        for i, (token, value, client) in enumerate(sets, 1):
            if value != i:
                problems.append(
                    f"kv-lost-update on {key}: the accepted write {i} in token order "
                    f"(client {client}, token {token}) wrote {value}")
        for op, token, accepted, value, start, _, client in ops:
            below = sum(1 for t, _, _ in sets if t < token)
            if op in ("get", "get_shared") and accepted is True and value != below:
                problems.append(
                    f"kv-stale-read on {key}: client {client} read {value} with token {token}; "
                    f"{below} writes with lower tokens were accepted")
        if key in finals and finals[key] != len(sets):
            problems.append(
                f"kv-final on {key}: the key holds {finals[key]}, {len(sets)} writes were accepted")


FAIR_EXCUSE_AFTER = 2.0


def fair_order(events, problems):
    """Grants past a live waiter ahead of them (rule 4); returns the
    counts (grants, out of order, explained)."""
    windows = [(need(f, "start", float, f["_line"]), need(f, "end", float, f["_line"]))
               for f in events["fault"] if f.get("nemesis") != "client-pause"]
    calls = defaultdict(list)
    for c in events["fair_call"]:
        n = c["_line"]
        ticket = c.get("ticket")
        paused = c.get("paused")
        end = need(c, "end", float, n)
        calls[need(c, "resource", str, n)].append({
            "client": need(c, "client", int, n),
            "start": need(c, "start", float, n),
            "end": end,
            "granted": need(c, "outcome", str, n) == "granted",
            "ticket": None if ticket is None else need(c, "ticket", int, n),
            "began": None if ticket is None else need(c, "join_start", float, n),
            "joined": None if ticket is None else need(c, "joined", float, n),
            "dead": end if not paused else min(end, float(paused[0])),
        })
    grants = late = explained = 0
    for resource, group in sorted(calls.items()):
        waiters = sorted((w for w in group if w["ticket"] is not None),
                         key=lambda w: w["joined"])
        for g in group:
            if not g["granted"]:
                continue
            grants += 1
            at = g["end"]
            took_place = g["start"] if g["ticket"] is None else g["began"]
            passed = [w for w in waiters
                      if w is not g and w["joined"] < took_place and w["joined"] <= at < w["dead"]
                      and (g["ticket"] is None or w["ticket"] < g["ticket"])]
            if not passed:
                continue
            unexplained = [w for w in passed
                           if not any(s <= at and w["joined"] <= e + FAIR_EXCUSE_AFTER
                                      for s, e in windows)]
            if not unexplained:
                explained += 1
                continue
            late += 1
            w = unexplained[0]
            mine = "no ticket" if g["ticket"] is None else f"ticket {g['ticket']}"
            problems.append(
                f"fair-out-of-order on {resource}: client {g['client']} ({mine}) was granted at "
                f"{at:.3f} s while client {w['client']} (ticket {w['ticket']}, joined at "
                f"{w['joined']:.3f} s) waited, live, until {w['dead']:.3f} s")
    return grants, late, explained


def judge(lines):
    """Every violation found, as text; raises Malformed."""
    events = load(lines)
    problems = []
    for resource, holds in sorted(grants(events).items()):
        fenced_mutex(resource, holds, problems)
    fenced_store(events, problems)
    fenced_kv(events, problems)
    events["_fair"] = fair_order(events, problems)
    return events, problems


def main(path):
    try:
        with open(path, encoding="utf-8") as f:
            events, problems = judge(f)
    except OSError as e:
        print(f"judge: cannot read {path}: {e}", file=sys.stderr)
        return 2
    except (Malformed, UnicodeDecodeError) as e:
        print(f"judge: {path} is malformed: {e}", file=sys.stderr)
        return 2
    print(
        f"judge: {path}: {len(events['hold'])} grants, {len(events['write'])} accepted writes, "
        f"{len(events['act'])} acts, {len(events['read'])} reads, {len(events['kv'])} fenced "
        f"kv ops: {len(problems)} violations"
    )
    grants, late, explained = events["_fair"]
    if grants:
        share = (grants - late - explained) / grants
        print(f"judge: fair lock: {grants} grants, {late} out of order, {explained} out of order "
              f"explained by a fault, {share:.4f} in order")
    for p in problems[:SHOWN]:
        print(f"VIOLATION {p}")
    return 1 if problems else 0


def self_test():
    """Small planted histories: each planted bug is found, the clean one
    passes, a broken file is malformed."""
    run = {"type": "run", "format": FORMAT, "instances": 5, "quorum": 3}

    def hold(client, resource, token, start, granted, mode="exclusive"):
        return {"type": "hold", "client": client, "mode": mode, "start": start,
                "granted": granted, "tokens": [{"resource": resource, "token": token}]}

    def write(seq, resource, token, read):
        return {"type": "write", "seq": seq, "resource": resource, "token": token,
                "client": 0, "read": read}

    def kv(op, token, accepted, value, start, key="kv-0"):
        return {"type": "kv", "client": 0, "key": key, "op": op, "token": token,
                "accepted": accepted, "value": value, "start": start, "end": start + 0.01}

    def shared(token, accepted, value, start):
        return kv("get_shared", token, accepted, value, start, "doc")

    def fair(client, start, end, ticket=None, joined=None, outcome="granted", paused=None):
        return {"type": "fair_call", "client": client, "resource": "reg-1", "start": start,
                "end": end, "ticket": ticket,
                "join_start": None if ticket is None else start + 0.001,
                "joined": joined, "outcome": outcome, "token": None, "paused": paused}

    clean = [
        run,
        hold(0, "reg-0", 10, 0.0, 0.1),
        hold(1, "reg-0", 20, 0.05, 0.5),  # called before the first returned: any token
        hold(2, "reg-0", 30, 0.6, 0.7),
        hold(0, "pool#0", 50, 0.0, 0.1, "permit"),
        hold(1, "pool#1", 40, 0.2, 0.3, "permit"),  # another slot: its own sequence
        hold(0, "doc", 5, 0.0, 0.1, "read"),
        hold(1, "doc", 5, 0.2, 0.3, "read"),  # reads may tie
        hold(2, "doc", 6, 0.4, 0.5, "write"),
        write(0, "reg-0", 10, 0), write(1, "reg-0", 30, 1),
        {"type": "counter", "resource": "reg-0", "value": 2},
        {"type": "act", "seq": 0, "term": 3, "client": 0},
        {"type": "act", "seq": 1, "term": 3, "client": 0},
        {"type": "read", "seq": 0, "resource": "reg-0", "token": 20, "client": 1,
         "first": 1, "second": 1},
        kv("get", 10, True, 0, 0.0), kv("set", 10, True, 1, 0.1),
        kv("get", 20, True, 1, 0.2), kv("set", 9, False, 1, 0.3),
        kv("set", 20, True, 2, 0.4),
        {"type": "kv_final", "key": "kv-0", "value": 2},
        # A reader-writer lock's key: readers 5 and 6 share it, writer 7
        # reads and writes, then refuses reader 5; reader 8 refuses the
        # writer's late second write.
        shared(5, True, 0, 0.0), shared(6, True, 0, 0.05),
        kv("get", 7, True, 0, 0.1, "doc"), kv("set", 7, True, 1, 0.15, "doc"),
        shared(5, False, 0, 0.2), shared(8, True, 1, 0.3),
        kv("set", 7, False, 2, 0.4, "doc"),
        {"type": "kv_final", "key": "doc", "value": 1},
        # The fair lock: ticket 1 then 2 in order; ticket 3 was paused (dead)
        # when ticket 4 passed it; ticket 6 passed ticket 5 while a fault
        # was on (explained: the self-test checks it is found without).
        fair(0, 0.0, 1.0, 1, 0.1), fair(1, 0.2, 2.0, 2, 0.3), fair(2, 0.0, 0.05),
        fair(0, 3.0, 6.0, 3, 3.1, "skipped", [3.1, 4.6]), fair(1, 3.2, 4.2, 4, 3.3),
        fair(2, 7.0, 9.0, 5, 7.1), fair(0, 7.2, 8.0, 6, 7.3),
        {"type": "fault", "nemesis": "pause", "instances": [0, 1, 2], "start": 7.5,
         "end": 7.9},
        {"type": "fault", "nemesis": "client-pause", "instances": [], "start": 0.0,
         "end": 0.0},
    ]
    planted = {
        "token-regression": [hold(3, "reg-0", 30, 0.8, 0.9)],
        "token-regression ": [hold(3, "pool#0", 50, 0.2, 0.25, "permit")],
        "token-regression  ": [hold(3, "doc", 6, 0.6, 0.7, "read")],
        "stale-write": [write(2, "reg-0", 30, 2),
                        {"type": "counter", "resource": "reg-0", "value": 3}],
        "lost-update": [write(2, "reg-0", 40, 1),
                        {"type": "counter", "resource": "reg-0", "value": 3}],
        "lost-update ": [{"type": "counter", "resource": "reg-0", "value": 5}],
        "stale-act": [{"type": "act", "seq": 2, "term": 2, "client": 1}],
        "torn-read": [{"type": "read", "seq": 1, "resource": "reg-0", "token": 31,
                       "client": 1, "first": 2, "second": 3}],
        "kv-lost-update": [kv("set", 30, True, 2, 0.5),
                           {"type": "kv_final", "key": "kv-0", "value": 3}],
        "kv-stale-read": [kv("get", 30, True, 1, 0.5)],
        "kv-refused-wrongly": [kv("set", 40, False, 3, 0.5)],
        "kv-final": [{"type": "kv_final", "key": "kv-0", "value": 1}],
        "kv-reader-refused": [shared(4, False, 0, 0.05)],
        "kv-refused-wrongly ": [shared(9, False, 1, 0.5)],
        "kv-stale-read ": [shared(9, True, 0, 0.5)],
        # Ticket 11 passes ticket 10, live; a first-round grant passes it.
        "fair-out-of-order": [fair(0, 10.0, 12.0, 10, 10.1), fair(1, 10.2, 11.0, 11, 10.3)],
        "fair-out-of-order ": [fair(0, 10.0, 12.0, 10, 10.1), fair(1, 10.5, 10.6)],
    }
    failures = []
    events, found = judge(json.dumps(e) for e in clean)
    if found:
        failures.append(f"the clean history: {found}")
    if events["_fair"] != (6, 0, 1):
        failures.append(f"fair counts {events['_fair']}, not 6 grants, 0 late, 1 explained")
    unexplained = [e for e in clean if e.get("nemesis") != "pause"]
    _, found = judge(json.dumps(e) for e in unexplained)
    if not any(p.startswith("fair-out-of-order ") for p in found):
        failures.append(f"fair-out-of-order without its fault not found: {found}")
    for name, extra in planted.items():
        # A later event replaces an earlier counter of the same resource.
        events = clean + extra
        _, found = judge(json.dumps(e) for e in events)
        if not any(p.startswith(name.strip() + " ") for p in found):
            failures.append(f"{name.strip()} not found: {found}")
    for broken in ([], ['{"type": "hold"}'], [json.dumps(run), "{not json"],
                   [json.dumps(run), json.dumps(hold(0, "r", "ten", 0.0, 0.1))]):
        try:
            judge(broken)
            failures.append(f"malformed history accepted: {broken}")
        except Malformed:
            pass
    for f in failures:
        print(f"SELF-TEST FAILED: {f}")
    if not failures:
        print(f"judge self-test: the clean history passes, {len(planted)} planted bugs found, "
              "4 malformed histories refused")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print("usage: judge.py HISTORY.jsonl | --self-test", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
