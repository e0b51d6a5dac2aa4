//! Leader election on real servers: three processes campaigning on one
//! election (this test binary, started again as a child), SIGSTOP of the
//! leader, resignation woken by the release, observers, and a leader cut
//! off from a majority.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::faults::Proxied;
use common::{eventually, subscribers};
use redfence::crossbeam_channel::{self, RecvTimeoutError};
use redfence::testing::{Fault, RedisServer, RedisServers};
use redfence::{Error, LeaderEvent, Redlock};

/// Set in a child process: the identity it campaigns under.
const CHILD_ENV: &str = "REDFENCE_ELECTION_CHILD";
const LEASE: Duration = Duration::from_secs(2);

/// The store's term-fenced increment: accepted only if the term is not
/// older than the highest seen; counts and logs `term identity` atomically.
const FENCED_INCR: &str = r"
local highest = redis.call('GET', KEYS[1])
if highest and tonumber(highest) > tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[3], ARGV[1] .. ' ' .. ARGV[2])
return 1
";

fn fenced_incr(store: &mut redis::Connection, term: u64, identity: &str) -> bool {
    let accepted: i64 = redis::Script::new(FENCED_INCR)
        .key("highest")
        .key("count")
        .key("log")
        .arg(term)
        .arg(identity)
        .invoke(store)
        .expect("store answers");
    accepted == 1
}

/// The child's body: lead while it can, writing with the term every 20 ms;
/// campaign again after each loss. Runs until killed.
#[test]
fn election_child() {
    let Ok(identity) = std::env::var(CHILD_ENV) else {
        return; // not a child: nothing to do
    };
    let urls: Vec<String> = std::env::var("URLS")
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    let mut store = redis::Client::open(std::env::var("STORE").unwrap())
        .unwrap()
        .get_connection()
        .unwrap();
    let locks = Redlock::builder(urls)
        .identity(identity.as_str())
        .build()
        .unwrap();
    let election = locks.election("scheduler").unwrap().lease(LEASE);
    assert_eq!(election.name(), "scheduler");
    let (_never, stop) = crossbeam_channel::bounded::<()>(0);
    election
        .run(&stop, |term| {
            while term.ensure_leader().is_ok() {
                fenced_incr(&mut store, term.term().get(), &identity);
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok::<(), Error>(())
        })
        .unwrap();
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_child(identity: &str, cluster: &RedisServers, store: &RedisServer) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "election_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, identity)
        .env("URLS", cluster.urls().join(","))
        .env("STORE", store.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("child starts")
}

/// `term identity` entries of the store's log of accepted writes.
fn log(store: &RedisServer) -> Vec<(u64, String)> {
    let mut conn = store.connection();
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg("log")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    entries
        .iter()
        .map(|e| {
            let (t, id) = e.split_once(' ').unwrap();
            (t.parse().unwrap(), id.to_string())
        })
        .collect()
}

/// Accepted writes never go back to an older term, each term belongs to
/// one identity, and every accepted write was counted (no lost update).
fn check_log(store: &RedisServer) -> Vec<(u64, String)> {
    let entries = log(store);
    for w in entries.windows(2) {
        assert!(
            w[0].0 <= w[1].0,
            "an older term was accepted after a newer one: {w:?}"
        );
        if w[0].0 == w[1].0 {
            assert_eq!(w[0].1, w[1].1, "two leaders with one term");
        }
    }
    let count: usize = store.get("count").map_or(0, |c| c.parse().unwrap());
    assert_eq!(count, entries.len(), "lost update");
    entries
}

#[test]
fn three_processes_one_leader_at_a_time_and_a_stopped_leader_is_replaced() {
    let cluster = RedisServers::start(5);
    let store = RedisServer::start();
    let mut children = Children(Vec::new());
    for id in ["node-a", "node-b", "node-c"] {
        children.0.push(spawn_child(id, &cluster, &store));
    }
    assert!(
        eventually(Duration::from_secs(20), || log(&store).len() >= 20),
        "nobody leads"
    );
    let (term, leader) = log(&store).last().cloned().unwrap();
    // Every write so far came from that one leader.
    assert!(check_log(&store)
        .iter()
        .all(|(t, id)| (*t, id.as_str()) == (term, &leader)));

    let index = ["node-a", "node-b", "node-c"]
        .iter()
        .position(|id| *id == leader)
        .unwrap();
    let pid = children.0[index].id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let stopped = Instant::now();
    // Another one is elected within the lease plus slack, and writes.
    assert!(
        eventually(LEASE + Duration::from_secs(5), || log(&store)
            .last()
            .is_some_and(|(t, id)| *t > term && *id != leader)),
        "no new leader {:?} after the leader stopped",
        stopped.elapsed()
    );
    let (new_term, _) = log(&store).last().cloned().unwrap();
    // The old leader's late write, with its term, is refused.
    let mut conn = store.connection();
    assert!(
        !fenced_incr(&mut conn, term, &leader),
        "a deposed leader's write was accepted"
    );
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    // It wakes up, learns it lost, and campaigns again; the leader goes on.
    let before = log(&store).len();
    assert!(eventually(Duration::from_secs(5), || log(&store).len() >= before + 20));
    let entries = check_log(&store);
    assert!(entries.iter().any(|(t, _)| *t == new_term));
}

#[test]
fn resign_hands_over_at_once_woken_by_the_release() {
    let cluster = RedisServers::start(5);
    // A long retry pause: a handover by polling would show.
    let client = |id: &str| {
        common::builder(&cluster)
            .identity(id)
            .retry_delay(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let (a, b) = (client("a"), client("b"));
    let ea = a.election("handover").unwrap().lease(LEASE);
    let eb = b.election("handover").unwrap().lease(LEASE);
    let mut took = Vec::new();
    let mut term = ea.campaign().expect("a leads");
    let mut last_term = term.term();
    for round in 0..6 {
        let standby = if round % 2 == 0 { &eb } else { &ea };
        let (next, elapsed) = std::thread::scope(|s| {
            let waiting = s.spawn(|| standby.campaign());
            // The standby waits on the release channel once subscribed on
            // a quorum of instances.
            assert!(eventually(Duration::from_secs(5), || subscribers(
                &cluster,
                "election:handover"
            ) >= 3));
            // Past its first refusal: its next attempt comes on a release
            // (or the fallback poll).
            std::thread::sleep(Duration::from_millis(50));
            let resigned = Instant::now();
            term.resign().expect("resigns");
            let next = waiting.join().unwrap().expect("the standby leads");
            (next, resigned.elapsed())
        });
        took.push(elapsed);
        assert!(next.term() > last_term);
        last_term = next.term();
        term = next;
    }
    took.sort();
    // Woken by the release: far below the 250 ms fallback poll.
    let median = took[took.len() / 2];
    assert!(
        median < Duration::from_millis(100),
        "handovers took {took:?}"
    );
    let err = ea.try_campaign().err().or_else(|| eb.try_campaign().err());
    match err {
        Some(Error::Contended { holder, .. }) => assert!(holder.is_some()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn observers_see_every_leader_with_identity_and_term() {
    let cluster = RedisServers::start(5);
    let client = |id: &str| common::builder(&cluster).identity(id).build().unwrap();
    let (a, b, watcher) = (client("a"), client("b"), client("watcher"));
    let ea = a.election("observed").unwrap().lease(LEASE);
    let eb = b.election("observed").unwrap().lease(LEASE);
    let ew = watcher.election("observed").unwrap().lease(LEASE);
    let events = ew.observe();
    assert_eq!(ew.leader().unwrap(), None);
    let mut expected = Vec::new();
    let mut elected = Vec::new();
    // Each leader resigns only once the observer reported it; the next one
    // campaigns at once.
    for (e, id) in [(&ea, "a"), (&eb, "b"), (&ea, "a"), (&eb, "b")] {
        let term = e.campaign().unwrap();
        let info = ew.leader().unwrap().expect("a leader");
        assert_eq!(info.identity.as_deref(), Some(id));
        assert_eq!(info.term, Some(term.term()));
        expected.push((id.to_string(), term.term()));
        loop {
            match events.recv_timeout(Duration::from_secs(5)) {
                Ok(LeaderEvent::Elected { identity, term: t }) => {
                    let seen = (identity.unwrap(), t.unwrap());
                    let done = seen == (id.to_string(), term.term());
                    elected.push(seen);
                    if done {
                        break;
                    }
                }
                Ok(LeaderEvent::Vacant) => assert!(!elected.is_empty(), "Vacant before Elected"),
                Ok(other) => panic!("{other:?}"),
                Err(e) => panic!("{id} was never reported elected: {e}"),
            }
        }
        term.resign().unwrap();
    }
    // After the last resignation: Vacant, and nothing else.
    assert_eq!(
        events.recv_timeout(Duration::from_secs(5)),
        Ok(LeaderEvent::Vacant)
    );
    assert_eq!(
        events.recv_timeout(Duration::from_millis(300)),
        Err(RecvTimeoutError::Timeout)
    );
    assert_eq!(elected, expected);
    drop(ew); // joins the observer
    assert!(events.recv_timeout(Duration::from_secs(1)).is_err());
}

/// One identity leads, loses its lock on two of three instances (expired
/// there, or a restart without persistence), and takes it again on those
/// two, its earlier lock and term still on the third. Until the new term is
/// recorded, observers must not report the earlier term for the new grant:
/// they count together only the instances that hold one lock value.
#[test]
fn a_leader_elected_again_is_never_reported_with_its_earlier_term() {
    let cluster = RedisServers::start(3);
    let client = |id: &str| common::builder(&cluster).identity(id).build().unwrap();
    let (before, after, watcher) = (client("sched"), client("sched"), client("watcher"));
    let first = before
        .election("twice")
        .unwrap()
        .lease(Duration::from_secs(60))
        .campaign()
        .unwrap();
    let key = common::lock_key("election:twice");
    for server in cluster.iter().skip(1) {
        assert!(server.del(&key));
    }
    // A grant whose term is not recorded yet: a plain lock on the
    // election's resource, by the same identity.
    let again = after.try_lock("election:twice").unwrap();
    assert!(again.token() > first.term());
    let info = watcher
        .election("twice")
        .unwrap()
        .leader()
        .unwrap()
        .expect("a quorum holds the new grant");
    assert_eq!(info.identity.as_deref(), Some("sched"));
    assert_eq!(
        info.term,
        None,
        "the earlier term {} reported for the grant with token {}",
        first.term(),
        again.token()
    );
}

#[test]
fn a_leader_cut_off_from_a_majority_knows_before_its_lease_ends() {
    let net = Proxied::start(5);
    let leader = net.builder().identity("cut-off").build().unwrap();
    let election = leader.election("partition").unwrap().lease(LEASE);
    let term = election.campaign().unwrap();
    let lost = term.loss_signal();
    // Extended by the watchdog meanwhile.
    std::thread::sleep(LEASE);
    assert!(term.is_leader());
    net.set(&[0, 1, 2], Fault::BlackHole);
    let cut = Instant::now();
    // The instances may keep it at most a lease from the last extension,
    // which came before the cut.
    let reason = lost
        .recv_timeout(LEASE)
        .expect("loss reported within the lease");
    assert!(
        cut.elapsed() < LEASE,
        "{reason:?} after {:?}",
        cut.elapsed()
    );
    assert!(!term.is_leader());
    assert!(matches!(term.ensure_leader(), Err(Error::Lost { .. })));
    net.pass_all();
    // Another client can lead once the old lease is gone from the instances.
    let other = net.builder().identity("next").build().unwrap();
    let next = other
        .election("partition")
        .unwrap()
        .lease(LEASE)
        .campaign_for(Duration::from_secs(10))
        .expect("a new leader");
    assert!(next.term() > term.term());
}

#[test]
fn election_names_are_validated_and_campaign_for_times_out_as_contended() {
    let cluster = RedisServers::start(3);
    let locks = Redlock::new(cluster.urls()).unwrap();
    assert!(matches!(
        locks.election(""),
        Err(Error::InvalidResource { .. })
    ));
    assert!(matches!(
        locks.election(&"x".repeat(2000)),
        Err(Error::InvalidResource { .. })
    ));
    let other = common::builder(&cluster)
        .identity("incumbent")
        .build()
        .unwrap();
    let _term = other.election("e").unwrap().campaign().unwrap();
    let started = Instant::now();
    match locks
        .election("e")
        .unwrap()
        .campaign_for(Duration::from_millis(500))
    {
        Err(Error::Contended { holder, .. }) => assert_eq!(holder.as_deref(), Some("incumbent")),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(format!("{:?}", locks.election("e").unwrap()).contains("Election"));
}

/// `run` calls nothing while another client leads, returns when `stop`
/// fires, and returns the closure's error (resigning first).
#[test]
fn run_leads_only_after_winning_stops_on_stop_and_returns_errors() {
    let cluster = RedisServers::start(3);
    let client = |id: &str| common::builder(&cluster).identity(id).build().unwrap();
    let (a, b) = (client("incumbent"), client("runner"));
    let incumbent = a.election("svc").unwrap().lease(LEASE);
    let runner = b.election("svc").unwrap().lease(LEASE);
    let held = incumbent.campaign().unwrap();

    let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
    let started = Instant::now();
    let result = std::thread::scope(|s| {
        let running = s.spawn(|| {
            runner.run(&stop, |_term| -> Result<(), Error> {
                panic!("called without having won")
            })
        });
        std::thread::sleep(Duration::from_millis(500)); // campaigning meanwhile
        drop(stop_tx);
        running.join().unwrap()
    });
    assert!(result.is_ok());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stop was not seen"
    );
    held.resign().unwrap();

    #[derive(Debug)]
    struct Failed(u64);
    impl From<Error> for Failed {
        fn from(_: Error) -> Self {
            Failed(0)
        }
    }
    let (_keep, stop) = crossbeam_channel::bounded::<()>(0);
    let failed = runner.run(&stop, |term| Err(Failed(term.term().get())));
    let Err(Failed(term)) = failed else {
        panic!("the closure's error was swallowed: {failed:?}")
    };
    assert!(term > 0);
    // Resigned on the way out: the incumbent leads again at once.
    let again = incumbent.try_campaign().expect("free after run returned");
    assert!(again.term().get() > term);
}

/// `Election::campaign`: "Returns early only on an error that waiting
/// cannot fix (a foreign value on the keys, bad options)": an election
/// whose lock key another program uses for a hash is an error at once,
/// not a campaign that never ends.
#[test]
fn a_campaign_on_a_foreign_key_returns_the_error() {
    let cluster = RedisServers::start(3);
    let locks = Redlock::new(cluster.urls()).unwrap();
    for server in cluster.iter() {
        server
            .cmd(&["HSET", "redfence:lock:{election:taken}", "f", "v"])
            .unwrap();
    }
    let election = locks.election("taken").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
    let (election, stop) = (&election, &stop);
    std::thread::scope(move |s| {
        let (campaign, run) = (tx.clone(), tx);
        s.spawn(move || campaign.send(election.campaign().map(drop)));
        // `run` campaigns the same way.
        s.spawn(move || run.send(election.run(stop, |_| Ok::<(), Error>(()))));
        for _ in 0..2 {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Err(Error::WrongType { .. })) => {}
                Ok(other) => panic!("expected WrongType, got {other:?}"),
                Err(_) => {
                    // Let the campaigns end (elected, then stopped) so the
                    // scope can end, then fail.
                    for server in cluster.iter() {
                        server.flushall();
                    }
                    drop(stop_tx);
                    panic!("the campaign did not return within 10 s");
                }
            }
        }
    });
}

/// What a leadership says about itself (rustdoc of `Leadership`): its
/// election, its identity, time left, a `Debug` with the term; `resign`
/// hands the leadership over at once, and the same client leading again
/// is a new term that observers are told about; dropping the election
/// joins its observer threads.
#[test]
fn a_leadership_describes_itself_and_a_new_term_is_reported() {
    let cluster = RedisServers::start(3);
    let locks = common::builder(&cluster)
        .identity("node-a")
        .build()
        .unwrap();
    let rival = Redlock::new(cluster.urls()).unwrap();
    let election = locks.election("self").unwrap();
    let events = election.observe();
    let first = election.try_campaign().unwrap();
    assert_eq!(first.election(), "self");
    assert_eq!(first.identity(), "node-a");
    assert!(first.validity() > Duration::from_secs(1));
    let shown = format!("{first:?}");
    assert!(
        shown.contains("self") && shown.contains("node-a"),
        "{shown}"
    );
    assert!(shown.contains(&first.term().get().to_string()), "{shown}");
    let elected = |events: &crossbeam_channel::Receiver<LeaderEvent>| loop {
        match events.recv_timeout(Duration::from_secs(10)) {
            Ok(LeaderEvent::Elected { identity, term }) => return (identity, term),
            Ok(LeaderEvent::Vacant) => continue,
            Err(e) => panic!("no election reported: {e}"),
            Ok(other) => panic!("unexpected {other:?}"),
        }
    };
    let (identity, term) = elected(&events);
    assert_eq!(identity.as_deref(), Some("node-a"));
    assert_eq!(term, Some(first.term()));

    let first_term = first.term();
    first.resign().unwrap();
    // The same client leads again at once: a new term.
    let again = election.try_campaign().unwrap();
    assert!(again.term() > first_term);
    // Same identity, new term: reported.
    loop {
        let (identity, term) = elected(&events);
        if term == Some(again.term()) {
            assert_eq!(identity.as_deref(), Some("node-a"));
            break;
        }
    }
    // Handed over at once: another client is elected without waiting.
    again.resign().unwrap();
    let other = rival.election("self").unwrap().try_campaign().unwrap();
    other.resign().unwrap();
    // Dropping the election stops and joins its observer: once the drop
    // returns, the stream has ended (after what it had already sent).
    drop(election);
    let end = loop {
        match events.try_recv() {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(end, crossbeam_channel::TryRecvError::Disconnected);
}

/// A standby's campaign, blocked while another client leads, returns
/// `Cancelled` once its handle is cancelled (a service shutting down).
#[test]
fn a_cancelled_campaign_returns_at_once() {
    let cluster = RedisServers::start(3);
    let leader = common::client(&cluster);
    let _term = leader.election("shutdown").unwrap().campaign().unwrap();
    let shutdown = redfence::Cancel::new();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let standby = common::client(&cluster);
    let election = standby.election("shutdown").unwrap().cancel(&shutdown);
    let campaign = std::thread::spawn(move || {
        let _ = tx.send(election.campaign().map(|t| t.term()));
    });
    assert!(eventually(Duration::from_secs(5), || subscribers(
        &cluster,
        "election:shutdown"
    ) >= 2));
    shutdown.cancel();
    let result = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the campaign returns");
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    campaign.join().unwrap();
}
