//! Arguments and configuration: bad URLs, no quorum, bad arguments, `status` and `ping` basics, the servers from the environment, help, an even instance count.

use std::time::Duration;

use crate::common::cli::{
    code, finish, output, ping_line, redfence, run, run_cmd, stderr, stdout, Scratch, RUN_LIMIT,
};
use crate::common::{eventually, lock_key};
use redfence::testing::RedisServers;
use serde_json::Value;

#[test]
fn bad_urls_give_78_and_say_what_is_wrong_without_credentials() {
    let cluster = RedisServers::start(1);
    let cases = [
        ("redis://admin:hunter2secret@127.0.0.1:notaport", "bad port"),
        ("redis://admin:hunter2secret@127.0.0.1:99999", "bad port"),
        (
            "http://admin:hunter2secret@127.0.0.1:6379",
            "unknown scheme \"http\"",
        ),
        (
            "redis://:hunter2secret@127.0.0.1:6379/first",
            "bad database number",
        ),
        ("hunter2secret", "no scheme"),
        ("127.0.0.1:6379", "no scheme"),
    ];
    for (url, words) in cases {
        for command in [&["run", "r", "--", "true"][..], &["status", "r"], &["ping"]] {
            let out = output(redfence(&cluster).args(["--servers", url]).args(command));
            let err = stderr(&out);
            assert_eq!(code(out.status), 78, "{url} {command:?}: {err}");
            assert!(err.contains("instance #0"), "{url}: {err}");
            assert!(err.contains(words), "{url}: {err}");
            assert!(!err.contains("hunter2secret"), "{url}: {err}");
            assert!(!err.contains("did not parse"), "{url}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
}

#[test]
fn no_quorum_gives_69_and_names_the_instances() {
    let cluster = RedisServers::start(3);
    cluster.server(1).kill();
    cluster.server(2).kill();
    let out = run(&cluster, &["-w", "300ms"], "r", "exit 0");
    assert_eq!(code(out.status), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&cluster.server(1).addr().to_string()), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A closed port reads the same in every command: refused, not timed out.
    assert!(err.contains("(Connect): connection refused"), "{err}");
    assert!(!err.contains("Timeout"), "{err}");
    for command in [&["ping"][..], &["status", "r"]] {
        for _ in 0..3 {
            let out = output(redfence(&cluster).args(command));
            assert_eq!(code(out.status), 69, "{}", stdout(&out));
            let text = stdout(&out);
            for i in [1, 2] {
                let line = ping_line(&text, cluster.server(i));
                assert!(
                    line.ends_with("error: Connect: connection refused"),
                    "{command:?}: {line}"
                );
            }
        }
    }
}

#[test]
fn bad_arguments_give_64_and_help_gives_0() {
    let cluster = RedisServers::start(1);
    let cases: &[&[&str]] = &[
        &["run", "r"],                                              // no command
        &["run", "-w", "soon", "r", "--", "true"],                  // bad duration
        &["run", "-E", "256", "r", "--", "true"],                   // code out of range
        &["run", "-s", "NOPE", "r", "--", "true"],                  // bad signal
        &["run", "--ttl", "2s", "-k", "1500ms", "r", "--", "true"], // kill-after > ttl/2
        &["frobnicate"],
        &[],
    ];
    for args in cases {
        let out = output(redfence(&cluster).args(*args));
        assert_eq!(code(out.status), 64, "{args:?}: {}", stderr(&out));
    }
    let out = output(
        redfence(&cluster)
            .env_remove("REDFENCE_SERVERS")
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let out = output(redfence(&cluster).args(args));
        assert_eq!(code(out.status), 0, "{args:?}");
        assert!(!stdout(&out).is_empty());
    }
}

#[test]
fn status_and_ping_show_each_instance() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("status");
    let script = format!(
        "echo $REDFENCE_TOKEN > {token}; while [ ! -e {go} ]; do sleep 0.05; done",
        token = scratch.path("token"),
        go = scratch.path("go")
    );
    let holder = run_cmd(&cluster, &[], "report", &script)
        .spawn()
        .expect("redfence starts");
    assert!(eventually(Duration::from_secs(10), || {
        !scratch.read("token").trim().is_empty()
    }));
    let token: u64 = scratch.read("token").trim().parse().unwrap();
    let value = (0..5)
        .find_map(|i| cluster.server(i).get(&lock_key("report")))
        .expect("a lock value");

    let out = output(redfence(&cluster).args(["status", "report"]));
    assert_eq!(code(out.status), 0);
    let text = stdout(&out);
    assert!(!text.contains(&value), "the lock value leaked: {text}");
    for server in &cluster {
        let line = text
            .lines()
            .find(|l| l.starts_with(&server.addr().to_string()))
            .unwrap_or_else(|| panic!("no line for {}: {text}", server.addr()));
        assert!(line.contains("held"), "{line}");
    }

    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    assert_eq!(code(out.status), 0);
    assert!(!stdout(&out).contains(&value));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["resource"], "report");
    assert_eq!(doc["quorum"], 3);
    assert_eq!(doc["answered"], 5);
    let instances = doc["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 5);
    // A quorum's counters reached the token (late instances may count
    // higher: the next grant's token goes above them).
    let reached = instances
        .iter()
        .filter(|i| i["fence"].as_u64().is_some_and(|f| f >= token))
        .count();
    assert!(reached >= 3, "{doc}");
    for i in instances {
        assert_eq!(i["ok"], true);
        assert_eq!(i["locked"], true);
        let ttl = i["ttl_ms"].as_u64().expect("ttl_ms");
        assert!(ttl > 0 && ttl <= 30_000, "{i}");
        // The identity (hostname:pid by default), never the secret part.
        let (secret, identity) = value.split_once(':').expect("RANDOM:IDENTITY");
        assert_eq!(i["holder"], identity, "{i}");
        assert!(!i.to_string().contains(secret), "{i}");
    }

    let out = output(redfence(&cluster).arg("ping"));
    assert_eq!(code(out.status), 0);
    assert_eq!(
        stdout(&out).lines().filter(|l| l.contains(" ok ")).count(),
        5
    );
    cluster.stop(&[3, 4]);
    let out = output(redfence(&cluster).args(["ping", "--json"]));
    assert_eq!(
        code(out.status),
        0,
        "two of five down still leaves a quorum"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("ping --json parses");
    assert_eq!(doc["answered"], 3);
    assert_eq!(doc["quorum"], 3);
    let instances = doc["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 5);
    for (i, entry) in instances.iter().enumerate() {
        assert_eq!(entry["instance"], format!("{}/0", cluster.server(i).addr()));
        assert_eq!(entry["ok"], i < 3, "{entry}");
        assert_eq!(entry["rtt_ms"].is_f64(), i < 3, "{entry}");
        assert_eq!(entry["error"].is_string(), i >= 3, "{entry}");
    }
    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["answered"], 3);
    assert_eq!(code(out.status), 0);
    cluster.cont(&[3, 4]);

    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(holder, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["locked"], 0);
}

#[test]
fn servers_come_from_redfence_servers_or_its_alias_redfence_urls() {
    let cluster = RedisServers::start(1);
    let urls = cluster.urls().join(",");
    let closed = "redis://127.0.0.1:1";
    let ping = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = redfence(&cluster);
        cmd.env_remove("REDFENCE_SERVERS");
        for (key, value) in env {
            cmd.env(key, value);
        }
        output(cmd.arg("ping").args(args))
    };
    // The variable of --servers, and its older name when it is unset.
    let out = ping(&[("REDFENCE_SERVERS", &urls)], &[]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = ping(&[("REDFENCE_URLS", &urls)], &[]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    // REDFENCE_SERVERS wins over the alias, --servers over both.
    let out = ping(
        &[("REDFENCE_SERVERS", &urls), ("REDFENCE_URLS", closed)],
        &[],
    );
    assert_eq!(code(out.status), 0, "{}", stdout(&out));
    let out = ping(
        &[("REDFENCE_SERVERS", closed), ("REDFENCE_URLS", &urls)],
        &[],
    );
    assert_eq!(code(out.status), 69, "{}", stdout(&out));
    let out = ping(
        &[("REDFENCE_SERVERS", closed), ("REDFENCE_URLS", closed)],
        &["--servers", &urls],
    );
    assert_eq!(code(out.status), 0, "{}", stdout(&out));
    // Neither: the message names the variable to set.
    let out = ping(&[], &[]);
    assert_eq!(code(out.status), 64);
    assert!(
        stderr(&out).contains("REDFENCE_SERVERS"),
        "{}",
        stderr(&out)
    );

    // Help names both variables, and never shows their values: URLs carry
    // passwords.
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_SERVERS", "redis://:hunter2secret@127.0.0.1:1")
            .args(["ping", "--help"]),
    );
    let help = stdout(&out);
    assert!(help.contains("REDFENCE_SERVERS"), "{help}");
    assert!(help.contains("REDFENCE_URLS"), "{help}");
    assert!(!help.contains("hunter2secret"), "{help}");
}

#[test]
fn help_lists_the_exit_codes() {
    let cluster = RedisServers::start(1);
    for flag in ["--help", "-h"] {
        let out = output(redfence(&cluster).args(["run", flag]));
        assert_eq!(code(out.status), 0);
        let help = stdout(&out);
        assert!(help.contains("Exit codes:"), "{help}");
        for (code, words) in [
            ("64", "bad arguments"),
            ("69", "too few instances"),
            ("71", "system"),
            ("75", "held elsewhere"),
            ("78", "bad URL"),
            ("124", "lease was lost"),
            ("126", "could not be executed"),
            ("127", "not found"),
            ("128+n", "signal n"),
        ] {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(code))
                .unwrap_or_else(|| panic!("no line for {code}: {help}"));
            assert!(line.contains(words), "{line}");
        }
    }
    for command in ["status", "ping"] {
        let out = output(redfence(&cluster).args([command, "--help"]));
        let help = stdout(&out);
        assert!(help.contains("Exit codes:"), "{help}");
        assert!(help.contains("69 "), "{help}");
    }
    let out = output(redfence(&cluster).arg("--help"));
    assert!(stdout(&out).contains("Exit codes"), "{}", stdout(&out));
}

#[test]
fn an_even_instance_count_names_the_flag_that_allows_it() {
    let cluster = RedisServers::start(2);
    let out = run(&cluster, &[], "even", "exit 0");
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--allow-even-instances"), "{err}");
    assert!(!err.contains("allow_even_instances"), "{err}");
    let out = run(&cluster, &["--allow-even-instances"], "even", "exit 3");
    assert_eq!(code(out.status), 3, "{}", stderr(&out));
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_ALLOW_EVEN_INSTANCES", "1")
            .arg("ping"),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_ALLOW_EVEN_INSTANCES", "no")
            .args(["status", "even"]),
    );
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
}
