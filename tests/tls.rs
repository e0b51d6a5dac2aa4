//! TLS against real redis-server processes serving TLS only, with
//! certificates made at start-up (feature `tls-rustls`), and the clear
//! error a build without it gives for `rediss://` URLs.

mod common;

#[cfg(not(feature = "tls-rustls"))]
#[test]
fn rediss_without_the_feature_is_invalid_config() {
    let err = redfence::Redlock::builder(["rediss://127.0.0.1:6380", "redis://127.0.0.1:6381"])
        .allow_even_instances(true)
        .build()
        .unwrap_err();
    match err {
        redfence::Error::InvalidConfig { reason } => {
            assert!(reason.contains("tls-rustls"), "{reason}");
            assert!(reason.contains("instance #0"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[cfg(feature = "tls-rustls")]
mod with_tls {
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    use super::common::unavailable;
    use redfence::testing::{Fault, FaultProxy, RedisServers, ServerOptions, TestPki};
    use redfence::{Error, InstanceError, InstanceErrorKind, LockOptions, Redlock};

    /// `n` TLS servers, or `None` (the test is skipped, saying why) when
    /// the server program is a build without TLS: the Valkey and Redis 8
    /// binaries that `REDFENCE_TEST_SERVER` may name are; Debian's
    /// redis-server is not.
    fn tls_servers(n: usize, options: ServerOptions) -> Option<RedisServers> {
        match RedisServers::try_start_with(n, options) {
            Ok(cluster) => Some(cluster),
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                let first_line = e.to_string();
                let first_line = first_line.lines().next().unwrap_or_default();
                eprintln!("skipped: {first_line}");
                None
            }
            Err(e) => panic!("could not start {n} TLS servers: {e}"),
        }
    }

    fn tls_cluster(n: usize, client_auth: bool) -> Option<RedisServers> {
        tls_servers(
            n,
            ServerOptions {
                tls: true,
                tls_auth_clients: client_auth,
                ..Default::default()
            },
        )
    }

    /// TLS on two shared cores: room beyond the 50 ms default per request,
    /// so only the faults a test makes fail a call.
    fn client_with(urls: Vec<String>, certs: redis::TlsCertificates) -> Redlock {
        Redlock::builder(urls)
            .tls_certificates(certs)
            .instance_timeout(Duration::from_millis(300))
            .build()
            .expect("client builds")
    }

    fn client(cluster: &RedisServers) -> Redlock {
        client_with(cluster.urls(), cluster.tls_certificates().unwrap())
    }

    fn assert_tls_errors(errors: &[InstanceError], words: &str) {
        assert!(!errors.is_empty());
        for e in errors {
            assert_eq!(e.kind(), InstanceErrorKind::Tls, "{e}");
            assert!(e.detail().contains(words), "{e}");
        }
    }

    #[test]
    fn five_tls_instances_lock_extend_wait_and_release() {
        let Some(cluster) = tls_cluster(5, false) else {
            return;
        };
        assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
        // Built and used at once: the first call waits for the handshakes
        // instead of failing.
        let first = client(&cluster);
        let guard = first.try_lock("invoice:42").expect("first call is granted");
        let second = client(&cluster);
        match second.try_lock("invoice:42") {
            Err(Error::Contended { .. }) => {}
            other => panic!("a fresh client's first call must see contention, got {other:?}"),
        }
        guard.extend(Duration::from_secs(20)).unwrap();
        assert!(guard.validity() > Duration::from_secs(15));

        let (tx, rx) = mpsc::channel();
        let waiter = thread::Builder::new()
            .name("tls-waiter".into())
            .spawn(move || {
                let opts = LockOptions::new().wait(Duration::from_secs(15));
                let got = second.lock_with("invoice:42", opts);
                let _ = tx.send(
                    got.as_ref()
                        .map(|g| g.token().get())
                        .map_err(Error::to_string),
                );
            })
            .unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the waiter must wait while the lock is held"
        );
        let token = guard.token().get();
        guard.release().unwrap();
        // Well before the 20 s lease would have run out.
        let next = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the waiter is woken by the release")
            .expect("the waiter gets the lock");
        assert!(next > token);
        waiter.join().unwrap();

        for (name, result) in first.ping() {
            assert!(result.is_ok(), "{name}: {result:?}");
        }
    }

    #[test]
    fn first_calls_wait_for_handshakes_slower_than_the_instance_timeout() {
        let Some(cluster) = tls_cluster(5, false) else {
            return;
        };
        // 40 ms each way: a request takes 80 ms, within the 200 ms instance
        // timeout; a connection set-up needs at least three round trips
        // (TLS, redis-rs's set-up, script loading), 240 ms: longer.
        let proxies: Vec<FaultProxy> = cluster
            .iter()
            .map(|s| {
                let proxy = FaultProxy::start(s.addr()).unwrap();
                proxy.set_fault(Fault::Delay(Duration::from_millis(40)));
                proxy
            })
            .collect();
        let urls: Vec<String> = proxies
            .iter()
            .map(|p| format!("rediss://127.0.0.1:{}/", p.addr().port()))
            .collect();
        let build = || {
            Redlock::builder(urls.clone())
                .tls_certificates(cluster.tls_certificates().unwrap())
                .instance_timeout(Duration::from_millis(200))
                .build()
                .unwrap()
        };
        let first = build();
        let guard = first.try_lock("slow").expect("first call is granted");
        let second = build();
        match second.try_lock("slow") {
            Err(Error::Contended { .. }) => {}
            other => panic!("a fresh client's first call must see contention, got {other:?}"),
        }
        guard.release().unwrap();
    }

    #[test]
    fn mutual_tls_required_and_given() {
        let Some(cluster) = tls_cluster(3, true) else {
            return;
        };
        let locks = client(&cluster);
        let guard = locks
            .try_lock("mtls")
            .expect("granted with a client certificate");
        guard.release().unwrap();
        // The call returned at a quorum; the third handshake may still be
        // under way. Every instance answers once it is done.
        assert!(crate::common::eventually(Duration::from_secs(5), || locks
            .ping()
            .iter()
            .all(|(_, r)| r.is_ok())));
    }

    #[test]
    fn missing_client_certificate_is_refused_with_the_tls_kind() {
        let Some(cluster) = tls_cluster(3, true) else {
            return;
        };
        let no_client_cert = cluster.pki().unwrap().certificates(false);
        let locks = client_with(cluster.urls(), no_client_cert);
        let errors = unavailable(locks.try_lock("mtls"));
        assert_tls_errors(&errors, "client certificate");
        for (name, result) in locks.ping() {
            let err = result.expect_err("ping must fail");
            assert_eq!(err.kind(), InstanceErrorKind::Tls, "{name}: {err}");
        }
    }

    #[test]
    fn untrusted_ca_is_refused_with_the_tls_kind() {
        let Some(cluster) = tls_cluster(3, false) else {
            return;
        };
        let stranger = TestPki::generate().unwrap();
        let locks = client_with(cluster.urls(), stranger.certificates(true));
        let errors = unavailable(locks.try_lock("untrusted"));
        assert_tls_errors(&errors, "not trusted");
        for (name, result) in locks.ping() {
            let err = result.expect_err("ping must fail");
            assert_eq!(err.kind(), InstanceErrorKind::Tls, "{name}: {err}");
            assert!(err.to_string().contains("tls_certificates"), "{err}");
        }
        // Without certificates the platform's roots are used: they do not
        // know the test CA either.
        let platform = Redlock::new(cluster.urls()).unwrap();
        assert_tls_errors(&unavailable(platform.try_lock("untrusted")), "not trusted");
    }

    #[test]
    fn a_certificate_for_another_host_name_is_refused_with_the_tls_kind() {
        let Some(cluster) = tls_cluster(3, false) else {
            return;
        };
        // The servers also listen on [::1]; their certificate names only
        // 127.0.0.1 and localhost.
        let urls: Vec<String> = cluster
            .iter()
            .map(|s| format!("rediss://[::1]:{}/", s.port()))
            .collect();
        let locks = client_with(urls, cluster.tls_certificates().unwrap());
        let errors = unavailable(locks.try_lock("wrong-name"));
        assert_tls_errors(&errors, "host name");
    }

    #[test]
    fn a_minority_of_stopped_tls_instances_still_locks() {
        let Some(cluster) = tls_cluster(5, false) else {
            return;
        };
        // Room for TLS on a busy machine: the three live instances must all
        // answer each call in time.
        let steady = || {
            crate::common::builder(&cluster)
                .tls_certificates(cluster.tls_certificates().unwrap())
                .instance_timeout(Duration::from_millis(500))
                .build()
                .expect("client builds")
        };
        let locks = steady();
        drop(locks.try_lock("before").unwrap());
        cluster.stop(&[1, 3]);
        let guard = locks
            .try_lock("during")
            .expect("three of five still answer");
        guard.release().unwrap();
        // A client built while they are stopped: its first call goes ahead
        // as soon as a quorum is connected.
        let fresh = steady();
        let guard = fresh
            .try_lock("fresh")
            .expect("a fresh client's first call is granted by three of five");
        guard.release().unwrap();
        cluster.cont(&[1, 3]);
    }

    #[test]
    fn insecure_fragment_skips_certificate_checks() {
        let Some(servers) = tls_servers(
            1,
            ServerOptions {
                tls: true,
                ..Default::default()
            },
        ) else {
            return;
        };
        let url = format!("{}#insecure", servers.server(0).url());
        let locks = Redlock::new([url]).unwrap();
        let guard = locks.try_lock("insecure").expect("no certificate check");
        guard.release().unwrap();
    }

    #[test]
    fn secrets_never_appear_in_errors_or_debug() {
        let password = "tls-pa55word-never-shown";
        let Some(cluster) = tls_servers(
            3,
            ServerOptions {
                tls: true,
                tls_auth_clients: true,
                acl_users: vec![format!("app on >{password} ~* &* +@all")],
                ..Default::default()
            },
        ) else {
            return;
        };
        let stranger = TestPki::generate().unwrap();
        let key_pem = String::from_utf8(stranger.client_key_pem().to_vec()).unwrap();
        let key_line = key_pem.lines().nth(1).unwrap().to_string();
        let wrong_password = "wrong-pa55word-never-shown";

        let mut texts = Vec::new();
        let untrusted = client_with(
            cluster.urls_as("app", password),
            stranger.certificates(true),
        );
        texts.push(format!("{untrusted:?}"));
        let err = untrusted.try_lock("secret").unwrap_err();
        texts.push(format!("{err} {err:?}"));
        let refused = client_with(
            cluster.urls_as("app", wrong_password),
            cluster.tls_certificates().unwrap(),
        );
        texts.push(format!("{refused:?}"));
        let err = refused.try_lock("secret").unwrap_err();
        let errors = match &err {
            Error::AccessDenied { errors, .. } => errors.clone(),
            other => panic!("expected AccessDenied, got {other:?}"),
        };
        assert!(
            errors.iter().all(|e| e.kind() == InstanceErrorKind::Auth),
            "{err}"
        );
        texts.push(format!("{err} {err:?}"));
        texts.extend(refused.ping().iter().map(|p| format!("{p:?}")));
        // A certificate that cannot be parsed is refused at build().
        let broken = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: stranger.client_cert_pem().to_vec(),
                client_key: key_pem.replace("PRIVATE KEY", "SECRET THING").into_bytes(),
            }),
            root_cert: Some(stranger.ca_pem().to_vec()),
        };
        match crate::common::builder(&cluster)
            .tls_certificates(broken)
            .build()
        {
            Err(e @ Error::InvalidConfig { .. }) => texts.push(format!("{e} {e:?}")),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
        for text in &texts {
            for secret in [password, wrong_password, key_line.as_str(), "PRIVATE KEY"] {
                assert!(!text.contains(secret), "{secret:?} leaked in {text}");
            }
        }
    }

    #[test]
    fn certificates_without_a_rediss_instance_are_refused() {
        let pki = TestPki::generate().unwrap();
        let err = Redlock::builder(["redis://127.0.0.1:6379"])
            .tls_certificates(pki.certificates(false))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    }
}
