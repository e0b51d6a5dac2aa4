//! A set of N independent [`RedisServer`]s, the shape Redlock runs on.
//!
//! Called `RedisCluster` before 0.2.0, a name that promised a Redis Cluster
//! (slots, redirects, failover); that is
//! [`ShardedCluster`](super::ShardedCluster). The old name stays a
//! deprecated alias for one release.

use std::io;
use std::thread;

use super::pki::TestPki;
use super::server::{RedisServer, ServerOptions};

/// N independent `redis-server` processes (not a Redis Cluster: no
/// replication, no slots; for that see
/// [`ShardedCluster`](super::ShardedCluster)), each on its own free port,
/// started in parallel and all killed on drop.
#[derive(Debug)]
pub struct RedisServers {
    servers: Vec<RedisServer>,
}

impl RedisServers {
    /// Starts `n` servers with default options.
    ///
    /// # Panics
    ///
    /// If `n` is 0 or any server fails to start; the message quotes its log.
    pub fn start(n: usize) -> RedisServers {
        Self::start_with(n, ServerOptions::default())
    }

    /// Starts `n` servers, all with `options`.
    ///
    /// # Panics
    ///
    /// If `n` is 0 or any server fails to start; the message quotes its log.
    pub fn start_with(n: usize, options: ServerOptions) -> RedisServers {
        match Self::try_start_with(n, options) {
            Ok(cluster) => cluster,
            Err(e) => panic!("could not start {n} redis-servers: {e}"),
        }
    }

    /// Starts `n` servers, all with `options`. If one fails, the others are
    /// stopped again and the first error is returned.
    pub fn try_start_with(n: usize, options: ServerOptions) -> io::Result<RedisServers> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a set of servers needs at least one server",
            ));
        }
        // One CA for all servers, so one set of client certificates fits
        // all servers.
        let pki = if options.tls {
            Some(std::sync::Arc::new(TestPki::generate()?))
        } else {
            None
        };
        // Each start waits for its server to answer; in parallel, N servers
        // take as long as one.
        let results: Vec<io::Result<RedisServer>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let options = options.clone();
                    let pki = pki.clone();
                    thread::Builder::new()
                        .name(format!("redfence-servers-start-{i}"))
                        .spawn_scoped(scope, move || RedisServer::try_start_sharing(options, pki))
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| match handle {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Err(io::Error::other("server start-up thread panicked"))
                    }),
                    Err(e) => Err(e),
                })
                .collect()
        });
        // Collecting into a Result drops the servers that did start when one
        // did not, which kills them.
        let servers = results.into_iter().collect::<io::Result<Vec<_>>>()?;
        Ok(RedisServers { servers })
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Always `false`: a set of servers has at least one server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The connection URLs of all servers, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The connection URLs of all servers for an ACL user (see
    /// [`RedisServer::url_as`]), in index order.
    pub fn urls_as(&self, user: &str, password: &str) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| s.url_as(user, password))
            .collect()
    }

    /// The certificates shared by the servers, with [`ServerOptions::tls`].
    pub fn pki(&self) -> Option<&TestPki> {
        self.servers.first().and_then(RedisServer::pki)
    }

    /// What a client of these TLS servers needs: the test CA and the client
    /// certificate. `None` without [`ServerOptions::tls`].
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        self.pki().map(|pki| pki.certificates(true))
    }

    /// The server at index `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    /// The server at index `i`, mutably.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// All servers, in index order.
    pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
        self.servers.iter()
    }

    /// Freezes the servers at `indices` with SIGSTOP (see
    /// [`RedisServer::stop`]).
    ///
    /// # Panics
    ///
    /// If an index is out of range or a server is killed.
    pub fn stop(&self, indices: &[usize]) {
        for &i in indices {
            self.server(i).stop();
        }
    }

    /// Resumes the servers at `indices` with SIGCONT (see
    /// [`RedisServer::cont`]).
    ///
    /// # Panics
    ///
    /// If an index is out of range or a server is killed.
    pub fn cont(&self, indices: &[usize]) {
        for &i in indices {
            self.server(i).cont();
        }
    }

    /// The servers, for a harness type built on them.
    pub(super) fn into_servers(self) -> Vec<RedisServer> {
        self.servers
    }

    /// Runs `FLUSHALL` on every server.
    ///
    /// # Panics
    ///
    /// If a server does not answer.
    pub fn flushall_all(&self) {
        for server in &self.servers {
            server.flushall();
        }
    }
}

impl<'a> IntoIterator for &'a RedisServers {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn process_exists(pid: u32) -> bool {
        Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    #[test]
    fn three_servers_start_and_drop_cleanly() {
        let cluster = RedisServers::start(3);
        assert_eq!(cluster.len(), 3);
        let urls = cluster.urls();
        assert_eq!(urls.len(), 3);
        let mut ports: Vec<u16> = cluster.iter().map(RedisServer::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
        for server in &cluster {
            server.cmd(&["SET", "k", "v"]).unwrap();
        }
        cluster.stop(&[1]);
        assert!(cluster.server(1).is_stopped());
        cluster.cont(&[1]);
        cluster.flushall_all();
        assert!(cluster.iter().all(|s| !s.exists("k")));

        let pids: Vec<u32> = cluster.iter().map(|s| s.pid().unwrap()).collect();
        assert!(pids.iter().all(|&pid| process_exists(pid)));
        cluster.stop(&[0, 2]);
        drop(cluster);
        for pid in pids {
            assert!(
                !process_exists(pid),
                "redis-server {pid} still alive after drop"
            );
        }
    }

    #[test]
    fn zero_servers_is_an_error() {
        let err = RedisServers::try_start_with(0, ServerOptions::default()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
