//! The instances under test: real servers, each behind a fault proxy that
//! the clients connect through, while the nemesis and the key watcher
//! reach the servers directly.

use std::fs;
use std::io;
use std::path::PathBuf;

use redfence::testing::{Fault, FaultProxy, RedisServer, RedisServers, ServerOptions};

pub struct Cluster {
    // First, so the proxies (and their threads) go before their servers.
    proxies: Vec<FaultProxy>,
    servers: RedisServers,
    /// Each server's directory (`CONFIG GET dir`, read at start).
    dirs: Vec<Option<PathBuf>>,
}

impl Cluster {
    /// Starts `n` servers, under libfaketime when `fake_clock` (the clock
    /// nemesis needs it), each behind its own proxy.
    pub fn start(n: usize, program: Option<PathBuf>, fake_clock: bool) -> io::Result<Cluster> {
        let options = ServerOptions {
            program,
            fake_clock,
            ..Default::default()
        };
        let servers = RedisServers::try_start_with(n, options)?;
        let proxies = servers
            .iter()
            .map(|s| FaultProxy::start(s.addr()))
            .collect::<io::Result<Vec<_>>>()?;
        let dirs = servers.iter().map(config_dir).collect();
        Ok(Cluster {
            proxies,
            servers,
            dirs,
        })
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Instances a fault may take away while a quorum remains.
    pub fn minority(&self) -> usize {
        self.len() - (self.len() / 2 + 1)
    }

    /// The URLs the clients use: the proxies'.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(FaultProxy::url).collect()
    }

    pub fn server(&self, i: usize) -> &RedisServer {
        self.servers.server(i)
    }

    pub fn set_fault(&self, i: usize, fault: Fault) {
        self.proxies[i].set_fault(fault);
    }

    pub fn version(&self) -> String {
        self.servers.server(0).server_version()
    }

    /// Kills the server and starts it again with no data: its snapshot
    /// file, if an earlier rollback left one, is removed first.
    pub fn kill(&self, i: usize) {
        self.server(i).kill();
        self.forget_snapshot(i);
    }

    pub fn start_again(&self, i: usize) -> io::Result<()> {
        self.server(i).try_restart()
    }

    /// Writes a snapshot (`SAVE`) that the next start loads.
    pub fn snapshot(&self, i: usize) -> io::Result<()> {
        self.server(i)
            .cmd(&["SAVE"])
            .map(drop)
            .map_err(io::Error::other)
    }

    /// Kills the server and starts it from its snapshot, which is then
    /// removed so that later kills lose everything again.
    pub fn roll_back(&self, i: usize) -> io::Result<()> {
        self.server(i).kill();
        let started = self.start_again(i);
        self.forget_snapshot(i);
        started
    }

    fn forget_snapshot(&self, i: usize) {
        if let Some(dir) = self.data_dir(i) {
            // Absent is the usual case; any other error only means the
            // next kill is a rollback too, which the history records.
            let _ = fs::remove_file(dir.join("dump.rdb"));
        }
    }

    fn data_dir(&self, i: usize) -> Option<&PathBuf> {
        self.dirs.get(i).and_then(Option::as_ref)
    }
}

fn config_dir(server: &RedisServer) -> Option<PathBuf> {
    let reply = server.cmd(&["CONFIG", "GET", "dir"]).ok()?;
    let pair: Vec<String> = redfence::redis::from_redis_value(reply).ok()?;
    pair.get(1).map(PathBuf::from)
}
