//! ACL users against real redis-server processes: the documented least
//! privilege is enough, and a missing permission is a clear error.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redfence::testing::{RedisServers, ServerOptions};
use redfence::{acl_rules, Error, InstanceError, InstanceErrorKind, LockOptions, Redlock};

const USER: &str = "redfence";
const PASSWORD: &str = "acl-pa55word";

/// A cluster whose `redfence` user has the documented rules, changed by
/// `edit`.
fn cluster_with_rules(n: usize, edit: impl Fn(Vec<String>) -> Vec<String>) -> RedisServers {
    let rules = edit(acl_rules("redfence:")).join(" ");
    RedisServers::start_with(
        n,
        ServerOptions {
            acl_users: vec![format!("{USER} on >{PASSWORD} {rules}")],
            ..Default::default()
        },
    )
}

fn without(rule: &'static str) -> impl Fn(Vec<String>) -> Vec<String> {
    move |rules| {
        let before = rules.len();
        let rules: Vec<String> = rules.into_iter().filter(|r| r != rule).collect();
        assert_eq!(rules.len() + 1, before, "{rule} is not a documented rule");
        rules
    }
}

fn client(cluster: &RedisServers) -> Redlock {
    Redlock::new(cluster.urls_as(USER, PASSWORD)).unwrap()
}

/// Every instance refused for lack of a permission, and says which.
fn assert_refused(errors: &[InstanceError], words: &str) {
    assert!(!errors.is_empty());
    for e in errors {
        assert_eq!(e.kind(), InstanceErrorKind::Auth, "{e}");
        assert!(e.detail().contains(words), "{e}");
        assert!(!e.to_string().contains(PASSWORD), "{e}");
    }
}

/// The instances' errors of a call refused by a quorum for its
/// credentials or permissions.
fn denied(result: Result<redfence::LockGuard, Error>) -> Vec<InstanceError> {
    match result {
        Err(Error::AccessDenied { errors, .. }) => errors,
        other => panic!("expected AccessDenied, got {other:?}"),
    }
}

/// ACL refusals a server logged, except for redis-rs's CLIENT SETINFO on
/// connect (its answer is ignored).
fn acl_refusals(cluster: &RedisServers) -> Vec<String> {
    let mut refusals = Vec::new();
    for server in cluster {
        let log = server.cmd(&["ACL", "LOG"]).unwrap();
        let text = format!("{log:?}");
        if let redis::Value::Array(entries) = log {
            if !entries.is_empty() && !text.to_lowercase().contains("setinfo") {
                refusals.push(text);
            }
        }
    }
    refusals
}

#[test]
fn least_privilege_user_locks_extends_waits_and_releases() {
    let cluster = cluster_with_rules(5, |rules| rules);
    let first = client(&cluster);
    let second = client(&cluster);
    let guard = first.try_lock("report:7").expect("granted");
    assert!(first.ping().iter().all(|(_, r)| r.is_ok()));
    guard.extend(Duration::from_secs(20)).unwrap();
    assert!(matches!(
        second.try_lock("report:7"),
        Err(Error::Contended { .. })
    ));

    let (tx, rx) = mpsc::channel();
    let waiter = thread::Builder::new()
        .name("acl-waiter".into())
        .spawn(move || {
            let opts = LockOptions::new().wait(Duration::from_secs(15));
            let got = second.lock_with("report:7", opts);
            let _ = tx.send(got.map(|g| g.release()).map_err(|e| e.to_string()));
        })
        .unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    guard.release().unwrap();
    let released = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter is woken by the release")
        .expect("the waiter gets the lock");
    released.expect("and releases it");
    waiter.join().unwrap();
    // Nothing redfence sent was refused, subscriptions included.
    assert_eq!(acl_refusals(&cluster), Vec::<String>::new());
}

#[test]
fn least_privilege_user_takes_permits_and_reads_and_writes() {
    let cluster = cluster_with_rules(3, |rules| rules);
    let locks = client(&cluster);
    let permit = locks.semaphore("pool", 2).try_acquire().expect("a permit");
    permit.extend(Duration::from_secs(20)).unwrap();
    permit.release().unwrap();
    let lock = locks.rw_lock("config");
    let reading = lock.try_read().expect("a read");
    reading.extend(Duration::from_secs(20)).unwrap();
    // A writer refused by the reader marks its wait.
    assert!(matches!(
        lock.try_write_for(Duration::from_millis(50)),
        Err(Error::Contended { .. })
    ));
    reading.release().unwrap();
    lock.try_write_for(Duration::from_secs(5))
        .expect("a write")
        .release()
        .unwrap();
    assert_eq!(acl_refusals(&cluster), Vec::<String>::new());
}

/// A command the scripts call is refused inside the script, where Redis
/// does not name it: the error says so and points to the rules.
#[test]
fn a_missing_command_is_reported_per_instance() {
    let cluster = cluster_with_rules(3, without("+exists"));
    let errors = denied(client(&cluster).try_lock("r"));
    // The call stops at a majority of refusals.
    assert!(errors.len() >= 2, "{errors:?}");
    assert_refused(&errors, "script");
    assert_refused(&errors, "acl_rules");
}

/// Every operation runs a script, and says so when the user may not.
#[test]
fn a_missing_evalsha_is_named() {
    let cluster = cluster_with_rules(3, without("+evalsha"));
    let errors = denied(client(&cluster).try_lock("r"));
    assert_refused(&errors, "'evalsha'");
    assert_refused(&errors, "missing ACL rule +evalsha");
}

#[test]
fn a_missing_script_load_is_named_when_connecting() {
    let cluster = cluster_with_rules(3, without("+script|load"));
    let errors = denied(client(&cluster).try_lock("r"));
    assert_refused(&errors, "'script|load'");
}

#[test]
fn a_command_the_scripts_call_is_an_acl_error_not_contention() {
    // DEL is only called from the release script: Redis 7.0 reports a
    // refusal inside a script without naming the command.
    let cluster = cluster_with_rules(3, without("+del"));
    let guard = client(&cluster)
        .try_lock("r")
        .expect("acquiring needs no DEL");
    match guard.release() {
        Err(Error::AccessDenied { errors, .. }) => assert_refused(&errors, "acl_rules"),
        other => panic!("expected AccessDenied, got {other:?}"),
    }
}

#[test]
fn keys_outside_the_allowed_pattern_are_refused() {
    let cluster = cluster_with_rules(3, |rules| rules);
    let locks = Redlock::builder(cluster.urls_as(USER, PASSWORD))
        .key_prefix("other:")
        .build()
        .unwrap();
    let errors = denied(locks.try_lock("r"));
    assert_refused(&errors, "key");
}

#[test]
fn a_wrong_password_is_an_auth_error_that_hides_it() {
    let cluster = cluster_with_rules(3, |rules| rules);
    let locks = Redlock::new(cluster.urls_as(USER, "not-the-pa55word")).unwrap();
    let err = locks.try_lock("r").unwrap_err();
    let text = format!("{err} {err:?} {locks:?}");
    assert!(!text.contains("not-the-pa55word"), "{text}");
    match err {
        Error::AccessDenied { errors, .. } => {
            assert!(errors.iter().all(|e| e.kind() == InstanceErrorKind::Auth))
        }
        other => panic!("expected AccessDenied, got {other:?}"),
    }
}

/// A wrong password or a missing permission on a quorum is a configuration
/// error: a lock call with an hour to wait, and a campaign (which retries
/// what waiting can fix), return it at once instead of waiting it out.
#[test]
fn a_refusal_by_a_quorum_fails_fast_and_is_never_retried() {
    let cluster = cluster_with_rules(3, without("+evalsha"));
    let (tx, rx) = mpsc::channel();
    let locks = client(&cluster);
    let waiter = thread::spawn(move || {
        let hour = LockOptions::new().wait(Duration::from_secs(3600));
        let _ = tx.send(locks.lock_with("r", hour).map(|g| g.token()));
        let election = locks.election("leader").unwrap();
        let _ = tx.send(election.campaign().map(|t| t.term()));
    });
    for call in ["lock_with", "campaign"] {
        let result = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{call} waited on a refusal"));
        assert!(
            matches!(result, Err(Error::AccessDenied { .. })),
            "{call}: {result:?}"
        );
    }
    waiter.join().unwrap();

    let wrong = Redlock::new(cluster.urls_as(USER, "not-the-pa55word")).unwrap();
    let hour = LockOptions::new().wait(Duration::from_secs(3600));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(wrong.lock_with("r", hour).map(|g| g.token()));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a wrong password is not waited out");
    assert!(
        matches!(result, Err(Error::AccessDenied { .. })),
        "{result:?}"
    );
}
