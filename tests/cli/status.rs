//! `ping` and `status`, `unlock` and `doctor`.

use std::time::Duration;

use crate::common::cli::{
    code, finish, output, ping_line, redfence, redfence_at, run_cmd, stderr, stdout, RUN_LIMIT,
    SIGNAL_LIMIT,
};
use crate::common::{builder, client, eventually, fence_key, holders, lock_key};
use redfence::testing::{Fault, FaultProxy, RedisServer, RedisServers, ServerOptions};
use serde_json::Value;

/// `ping` reports the round trip in milliseconds: through a proxy that
/// holds each chunk 30 ms each way, at least 60 ms, and no more than the
/// instance timeout (950 ms: a later answer is a timeout). (Catches: `millis` constant, or with `+` or `/` for
/// `*`.)
#[test]
fn ping_reports_the_round_trip_in_milliseconds() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    proxy.set_fault(Fault::Delay(Duration::from_millis(30)));
    let out =
        output(redfence_at(&[proxy.url()]).args(["ping", "--json", "--instance-timeout", "950ms"]));
    assert_eq!(code(out.status), 0, "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("ping --json parses");
    let rtt = doc["instances"][0]["rtt_ms"].as_f64().expect("rtt_ms");
    assert!((60.0..1000.0).contains(&rtt), "rtt_ms {rtt}: {doc}");
    let out = output(redfence_at(&[proxy.url()]).args(["ping", "--instance-timeout", "950ms"]));
    let text = stdout(&out);
    let shown: f64 = text
        .split_whitespace()
        .skip_while(|w| *w != "ok")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no round trip in {text}"));
    assert!((60.0..1000.0).contains(&shown), "{text}");
}

/// A lock key without expiry (written by something else than redfence) is
/// shown as held with no TTL: `ttl_ms` null, "no expiry" in the table.
/// (Catches: PTTL -1 read as a TTL of 1 ms.)
#[test]
fn status_shows_a_lock_key_without_expiry() {
    let cluster = RedisServers::start(3);
    for server in &cluster {
        server
            .cmd(&["SET", &lock_key("forever"), "abcdefghij"])
            .expect("SET");
    }
    // A generous instance timeout: every instance must answer.
    let status = |extra: &[&str]| {
        output(
            redfence(&cluster)
                .args(["status", "forever", "--instance-timeout", "2s"])
                .args(extra),
        )
    };
    let out = status(&["--json"]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["locked"], 3, "{doc}");
    for i in doc["instances"].as_array().expect("instances") {
        assert_eq!(i["locked"], true, "{i}");
        assert!(i["ttl_ms"].is_null(), "{i}");
        assert_eq!(i["holder"], "abcdef", "{i}");
    }
    let out = status(&[]);
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.contains("no expiry")).count(),
        3,
        "{text}"
    );
}

/// `status` names the kind of each instance's failure, as `ping` does:
/// refused, unanswered, cut, and a wrong password.
/// (Catches: `describe` empty or constant, and its kind tests.)
#[test]
fn status_names_the_kind_of_each_instance_error() {
    let cluster = RedisServers::start(3);
    let secured = RedisServer::start_with(ServerOptions {
        password: Some("s3cret".to_string()),
        ..ServerOptions::default()
    });
    let reset = FaultProxy::start(cluster.server(2).addr()).expect("proxy starts");
    reset.set_fault(Fault::Reset);
    cluster.server(0).kill();
    cluster.stop(&[1]);
    let port = secured.addr().port();
    let urls = vec![
        cluster.server(0).url(),
        cluster.server(1).url(),
        reset.url(),
        cluster.server(2).url(),
        format!("redis://:wrong@127.0.0.1:{port}/"),
    ];
    let out =
        output(redfence_at(&urls).args(["status", "r", "--json", "--instance-timeout", "1s"]));
    cluster.cont(&[1]);
    assert_eq!(code(out.status), 69, "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    let errors: Vec<&str> = doc["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| i["error"].as_str().unwrap_or(""))
        .collect();
    let kinds = ["Connect: ", "Timeout: ", "Io: ", "", "Auth: "];
    assert_eq!(doc["answered"], 1, "{doc}");
    assert!(doc["instances"][3]["error"].is_null(), "{doc}");
    for (error, kind) in errors.iter().zip(kinds) {
        assert!(error.starts_with(kind), "{kind:?} expected: {errors:?}");
        assert!(kind.is_empty() || error.len() > kind.len(), "{errors:?}");
    }
}

/// `redfence unlock`, as an operator runs it after a holder crashed with a
/// long TTL: it names the holder, deletes the lock on every instance and
/// leaves the fence counter; with a majority down it exits 69.
#[test]
fn unlock_deletes_a_lock_held_elsewhere_and_keeps_the_counter() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).identity("stuck-host:42").build().unwrap();
    let long = redfence::LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    let _stuck = locks.lock_with("report", long).unwrap();
    // The grant landed everywhere (a quorum's replies return it).
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster, "report"
    ) == 3));
    let out = output(redfence(&cluster).args(["unlock", "report"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "report: released (held by stuck-host:42)"
    );
    assert_eq!(holders(&cluster, "report"), 0);
    assert!(cluster.iter().all(|s| s.exists(&fence_key("report"))));

    cluster.server(0).stop();
    cluster.server(1).stop();
    let out = output(redfence(&cluster).args(["--instance-timeout", "200ms", "unlock", "report"]));
    cluster.server(0).cont();
    cluster.server(1).cont();
    assert_eq!(code(out.status), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("report"), "{}", stderr(&out));
}

/// `redfence unlock --permits N` and `--rw` revoke a crashed holder's
/// permits and a crashed writer, naming each; the plain form on a
/// semaphore's name releases nothing, and says so.
#[test]
fn unlock_frees_permits_and_rw_locks() {
    let cluster = RedisServers::start(3);
    let crashed = builder(&cluster).identity("stuck:7").build().unwrap();
    let long = redfence::LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    std::mem::forget(crashed.semaphore("pool", 2).acquire_with(long).unwrap());
    std::mem::forget(crashed.rw_lock("doc").write_with(long).unwrap());

    let out = output(redfence(&cluster).args(["unlock", "pool"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "pool: nothing to release (no holder on a quorum)"
    );
    let out = output(redfence(&cluster).args(["unlock", "--permits", "2", "pool"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).trim().starts_with("pool: released slot ")
            && stdout(&out).trim().ends_with("(held by stuck:7)"),
        "{}",
        stdout(&out)
    );
    let out = output(redfence(&cluster).args(["unlock", "--rw", "doc"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "doc: released the writer (held by stuck:7)"
    );
    let locks = client(&cluster);
    drop(
        locks
            .semaphore("pool", 2)
            .try_acquire()
            .expect("a permit is free"),
    );
    drop(
        locks
            .rw_lock("doc")
            .try_write()
            .expect("the rw lock is free"),
    );
}

/// A wrong password on every instance is a configuration error, not an
/// outage: `run` with an hour to wait exits 78 at once, says what to check,
/// and never shows the password.
#[test]
fn run_exits_78_at_once_when_a_quorum_refuses_the_credentials() {
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec!["worker on >right-pa55 ~* &* +@all".to_string()],
            ..Default::default()
        },
    );
    let urls: Vec<String> = cluster
        .iter()
        .map(|s| s.url_as("worker", "wrong-pa55"))
        .collect();
    let child = redfence_at(&urls)
        .args(["run", "-w", "1h", "job", "--", "true"])
        .spawn()
        .expect("redfence starts");
    let out = finish(child, SIGNAL_LIMIT);
    let err = stderr(&out);
    assert_eq!(code(out.status), 78, "{err}");
    assert!(err.contains("refused") && err.contains("password"), "{err}");
    assert!(
        !err.contains("wrong-pa55") && !stdout(&out).contains("wrong-pa55"),
        "{err}"
    );
}

/// A job that queued and whose wait ran out did not run: it says so on
/// stderr even under `-q`, and exits 75; one attempt (`-n`) stays silent.
#[test]
fn a_wait_that_runs_out_is_said_even_quietly() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let _held = locks.lock("queue").expect("test holds the lock");
    let out = output(&mut run_cmd(
        &cluster,
        &["-q", "-w", "300ms"],
        "queue",
        "true",
    ));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the job did not run"),
        "{}",
        stderr(&out)
    );
    let out = output(&mut run_cmd(&cluster, &["-q", "-n"], "queue", "true"));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "one attempt under -q is silent");
}

/// A user allowed everything but `PUBLISH`: `run` takes the lock, runs the
/// command and releases it, exit 0, without a "release not confirmed"
/// warning (the announcement's refusal once failed the whole release).
#[test]
fn run_releases_cleanly_for_a_user_without_publish() {
    let mut rules = redfence::acl_rules("redfence:");
    rules.retain(|r| r != "+publish");
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec![format!("worker on >pw-42 {}", rules.join(" "))],
            ..Default::default()
        },
    );
    let urls: Vec<String> = cluster
        .iter()
        .map(|s| s.url_as("worker", "pw-42"))
        .collect();
    let child = redfence_at(&urls)
        .args(["run", "job", "--", "true"])
        .spawn()
        .expect("redfence starts");
    let out = finish(child, RUN_LIMIT);
    let err = stderr(&out);
    assert_eq!(code(out.status), 0, "{err}");
    assert!(!err.contains("not confirmed"), "{err}");
    assert_eq!(holders(&cluster, "job"), 0, "released");
}

/// `redfence doctor` as an operator runs it: a table, `--json`, and the
/// exit code says whether the deployment holds (0), a precondition is
/// violated (78: here an eviction policy), or a quorum did not answer (69).
#[test]
fn doctor_reports_each_instance_and_exits_by_what_it_found() {
    let cluster = RedisServers::start(3);
    let out = output(redfence(&cluster).arg("doctor"));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for server in &cluster {
        assert!(text.contains(&server.addr().to_string()), "{text}");
    }
    assert!(
        text.contains("every precondition the doctor can see holds"),
        "{text}"
    );

    cluster
        .server(1)
        .cmd(&["CONFIG", "SET", "maxmemory", "100mb"])
        .unwrap();
    cluster
        .server(1)
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .unwrap();
    let out = output(redfence(&cluster).args(["doctor", "--json"]));
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(doc["healthy"], false);
    assert_eq!(doc["answered"], 3);
    let flagged: Vec<&Value> = doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| {
            row["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["check"] == "eviction" && f["severity"] == "error")
        })
        .collect();
    assert_eq!(flagged.len(), 1, "{doc}");
    assert_eq!(
        flagged[0]["instance"].as_str().unwrap(),
        format!("{}/0", cluster.server(1).addr())
    );

    cluster.server(0).stop();
    cluster.server(2).stop();
    let out = output(redfence(&cluster).args(["--instance-timeout", "200ms", "doctor"]));
    cluster.server(0).cont();
    cluster.server(2).cont();
    assert_eq!(code(out.status), 69, "{}", stdout(&out));
}

/// The doctor's verdicts as an operator meets them: a wrong password and
/// a missing `+evalsha` on two of five exit 78, name each, state the
/// margin and count the answers as `ping` does; a missing `+zadd` (which
/// only reader-writer locks need) is named before `run --read` meets it;
/// one instance down of three is a warning with the margin (exit 0, as
/// `ping`).
#[test]
fn doctor_names_each_unusable_instance_and_the_margin() {
    let rules = redfence::acl_rules("redfence:").join(" ");
    let options = ServerOptions {
        acl_users: vec![format!("app on >app-pa55 {rules}")],
        ..Default::default()
    };
    let cluster = RedisServers::start_with(5, options);
    let urls = cluster.urls_as("app", "app-pa55");
    cluster
        .server(1)
        .cmd(&["ACL", "SETUSER", "app", "resetpass", ">other-pa55"])
        .unwrap();
    cluster
        .server(3)
        .cmd(&["ACL", "SETUSER", "app", "-evalsha"])
        .unwrap();
    cluster
        .server(4)
        .cmd(&["ACL", "SETUSER", "app", "-zadd"])
        .unwrap();
    let out = output(redfence_at(&urls).arg("doctor"));
    let text = stdout(&out);
    assert_eq!(code(out.status), 78, "{text}{}", stderr(&out));
    let line = |i: usize| ping_line(&text, cluster.server(i));
    assert!(line(1).ends_with("refused credentials"), "{text}");
    assert!(
        line(3).ends_with("missing permissions (+evalsha)"),
        "{text}"
    );
    assert!(line(4).ends_with("missing permissions (+zadd)"), "{text}");
    assert_eq!(text.matches("+evalsha").count(), 2, "{text}");
    assert!(
        text.contains("4 of 5 positions answered, 2 usable (quorum 3)")
            && text.contains("no quorum is left"),
        "{text}"
    );
    assert!(!text.contains("pa55"), "{text}");
    let ping = output(redfence_at(&urls).arg("ping"));
    assert!(
        stdout(&ping).contains("4 of 5 instances answered"),
        "{}",
        stdout(&ping)
    );

    let out = output(redfence_at(&urls).args(["doctor", "--json"]));
    assert_eq!(code(out.status), 78);
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(
        (
            &doc["answered"],
            &doc["usable"],
            &doc["margin"],
            &doc["healthy"]
        ),
        (
            &Value::from(4),
            &Value::from(2),
            &Value::Null,
            &Value::from(false)
        )
    );
    let verdicts: Vec<&str> = doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        // Without +info, persistence is not read: usable.
        [
            "usable",
            "refused-credentials",
            "usable",
            "missing-permissions",
            "missing-permissions"
        ]
    );
    assert_eq!(
        doc["instances"][4]["missing_rules"],
        serde_json::json!(["+zadd"])
    );

    let cluster = RedisServers::start(3);
    cluster.server(2).kill();
    let out = output(redfence(&cluster).arg("doctor"));
    let text = stdout(&out);
    assert_eq!(code(out.status), 0, "{text}");
    assert!(
        ping_line(&text, cluster.server(2)).ends_with("unreachable"),
        "{text}"
    );
    assert!(
        text.contains("2 of 3 positions answered, 2 usable (quorum 2)")
            && text.contains("margin 0: losing one more position leaves no quorum"),
        "{text}"
    );
    assert_eq!(code(output(redfence(&cluster).arg("ping")).status), 0);
}
