//! TLS: client certificates, and advice in flag terms when TLS fails.

use crate::common::cli::{
    assert_no_key, code, output, ping_line, redfence, run, stderr, stdout, Scratch,
};
use redfence::testing::{RedisServers, ServerOptions};

/// A 3-server TLS cluster that requires client certificates, and its test
/// PKI's files: `ca.crt`, `client.crt`, `client.key`.
fn mtls_cluster(name: &str) -> (RedisServers, Scratch) {
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            tls: true,
            tls_auth_clients: true,
            ..Default::default()
        },
    );
    let scratch = Scratch::new(name);
    let pki = cluster.pki().expect("a TLS cluster has a PKI");
    std::fs::write(scratch.path("ca.crt"), pki.ca_pem()).unwrap();
    std::fs::write(scratch.path("client.crt"), pki.client_cert_pem()).unwrap();
    std::fs::write(scratch.path("client.key"), pki.client_key_pem()).unwrap();
    (cluster, scratch)
}

#[test]
fn run_status_and_ping_reach_tls_servers_that_require_a_client_certificate() {
    let (cluster, files) = mtls_cluster("mtls");
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
    let flags = [
        "--tls-ca-file",
        &files.path("ca.crt"),
        "--tls-cert-file",
        &files.path("client.crt"),
        "--tls-key-file",
        &files.path("client.key"),
    ];
    let out = run(&cluster, &flags, "tls-job", "echo token=$REDFENCE_TOKEN");
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("token="), "{}", stdout(&out));
    assert_no_key(&cluster, "tls-job");

    // Global flags: before the subcommand too.
    let out = output(redfence(&cluster).args(flags).args(["status", "tls-job"]));
    assert_eq!(code(out.status), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("locked on 0 of 3 instances, 3 answered"),
        "{}",
        stdout(&out)
    );

    // The same from the environment. Every instance answers once its
    // handshake is through: time enough for that on a loaded machine.
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_INSTANCE_TIMEOUT", "2s")
            .env("REDFENCE_TLS_CA_FILE", files.path("ca.crt"))
            .env("REDFENCE_TLS_CERT_FILE", files.path("client.crt"))
            .env("REDFENCE_TLS_KEY_FILE", files.path("client.key"))
            .arg("ping"),
    );
    assert_eq!(code(out.status), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        stdout(&out).lines().filter(|l| l.contains(" ok ")).count(),
        3,
        "{}",
        stdout(&out)
    );
}

/// Every instance line of a `ping` or `status` report, and the error of a
/// `run`, that reports a TLS failure carries `advice` and no library call;
/// every instance reports one. A handshake slowed past its time limit on a
/// loaded machine reads as a timeout instead: such a run is tried again, a
/// few times at most.
fn assert_tls_advice(cluster: &RedisServers, flags: &[&str], advice: &str) {
    const TRIES: usize = 5;
    let check_tls = |what: &str, text: &str| {
        assert!(text.contains(advice), "{what}: {text}");
        assert!(!text.contains("tls_certificates"), "{what}: {text}");
    };
    let flags = &[&["--instance-timeout", "1s"][..], flags].concat();
    for command in [&["ping"][..], &["status", "r"]] {
        let mut advised = vec![false; cluster.len()];
        for _ in 0..TRIES {
            let out = output(redfence(cluster).args(flags).args(command));
            let text = stdout(&out);
            assert_eq!(code(out.status), 69, "{command:?}: {text}{}", stderr(&out));
            for (i, server) in cluster.iter().enumerate() {
                let line = ping_line(&text, server);
                if line.contains("error: Tls: TLS: ") {
                    check_tls(&format!("{command:?}"), &line);
                    advised[i] = true;
                } else {
                    assert!(line.contains("error: Timeout: "), "{command:?}: {line}");
                }
            }
            if advised.iter().all(|a| *a) {
                break;
            }
        }
        assert!(advised.iter().all(|a| *a), "{command:?}: {advised:?}");
    }
    let args = [&["-w", "300ms"][..], flags].concat();
    let advised = (0..TRIES).any(|_| {
        let out = run(cluster, &args, "r", "exit 0");
        let err = stderr(&out);
        assert_eq!(code(out.status), 69, "{err}");
        assert!(!err.contains("tls_certificates"), "{err}");
        let tls = err.contains("(Tls): TLS: ");
        if tls {
            check_tls("run", &err);
        }
        tls
    });
    assert!(advised, "run never reported the TLS failure");
}

#[test]
fn tls_failures_give_advice_in_flag_terms() {
    let (cluster, files) = mtls_cluster("tls-advice");
    let (ca, cert, key) = (
        files.path("ca.crt"),
        files.path("client.crt"),
        files.path("client.key"),
    );
    // No CA: the system's roots do not know the test CA.
    assert_tls_advice(
        &cluster,
        &["--tls-cert-file", &cert, "--tls-key-file", &key],
        "--tls-ca-file",
    );
    // No client certificate for servers that require one.
    assert_tls_advice(
        &cluster,
        &["--tls-ca-file", &ca],
        "--tls-cert-file and --tls-key-file",
    );

    // Configuration mistakes: 78, naming the flags.
    std::fs::write(
        files.path("broken.key"),
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let broken = files.path("broken.key");
    let cases: [(&[&str], &str); 7] = [
        (
            &["--tls-cert-file", &cert, "--tls-key-file", &broken],
            "(--tls-cert-file, --tls-key-file) cannot be used",
        ),
        (
            &["--tls-cert-file", &cert, "--tls-key-file", &cert],
            "the client key (--tls-key-file)",
        ),
        (
            &["--tls-ca-file", &key],
            "the CA certificate (--tls-ca-file)",
        ),
        (
            &["--tls-cert-file", &cert],
            "--tls-cert-file needs --tls-key-file",
        ),
        (
            &["--tls-key-file", &key],
            "--tls-key-file needs --tls-cert-file",
        ),
        (
            &["--tls-ca-file", "/nonexistent/ca.crt"],
            "--tls-ca-file /nonexistent/ca.crt",
        ),
        (
            &["--tls-cert-file", "/dev/null", "--tls-key-file", &key],
            "--tls-cert-file /dev/null: not a PEM file",
        ),
    ];
    let key_pem = files.read("client.key");
    let key_line = key_pem.lines().nth(1).expect("a key body line");
    for (flags, words) in cases {
        for command in [&["run", "r", "--", "true"][..], &["status", "r"], &["ping"]] {
            let out = output(redfence(&cluster).args(flags).args(command));
            let err = stderr(&out);
            assert_eq!(code(out.status), 78, "{flags:?} {command:?}: {err}");
            assert!(err.contains(words), "{flags:?}: {err}");
            assert!(!err.contains(key_line), "{flags:?}: {err}");
        }
    }
    // TLS files for plain redis:// instances.
    let plain = RedisServers::start(1);
    let out = output(redfence(&plain).args(["--tls-ca-file", &ca, "ping"]));
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
    assert!(stderr(&out).contains("rediss://"), "{}", stderr(&out));
}
