//! Faults and other processes: a cluster with a fault proxy in front of
//! every server, child processes that run one test of this binary (and
//! report back on stdout), a seeded PRNG, and a Redis-backed
//! read-modify-write store that several processes can share.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use redfence::testing::{Fault, FaultProxy, RedisServers, ServerOptions};
use redfence::{LockGuard, Redlock, RedlockBuilder};

use super::lock_key;

/// Five (or N) servers, each reached through its own [`FaultProxy`]: the
/// client only knows the proxies' addresses, the test reads and writes the
/// servers directly.
pub struct Proxied {
    // Declared first so the proxies (and their threads) go before the
    // servers they forward to.
    pub proxies: Vec<FaultProxy>,
    pub cluster: RedisServers,
}

impl Proxied {
    pub fn start(n: usize) -> Proxied {
        Self::start_with(n, ServerOptions::default())
    }

    pub fn start_with(n: usize, options: ServerOptions) -> Proxied {
        let cluster = RedisServers::start_with(n, options);
        let proxies = cluster
            .iter()
            .map(|s| FaultProxy::start(s.addr()).expect("proxy starts"))
            .collect();
        Proxied { proxies, cluster }
    }

    /// The URLs a client must use: the proxies'.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(FaultProxy::url).collect()
    }

    pub fn builder(&self) -> RedlockBuilder {
        Redlock::builder(self.urls())
    }

    pub fn set(&self, indices: &[usize], fault: Fault) {
        for &i in indices {
            self.proxies[i].set_fault(fault);
        }
    }

    pub fn pass_all(&self) {
        for p in &self.proxies {
            p.set_fault(Fault::Pass);
        }
    }
}

/// The lock key's value on each server (`None` where it is absent).
pub fn lock_values(cluster: &RedisServers, resource: &str) -> Vec<Option<String>> {
    let key = lock_key(resource);
    cluster.iter().map(|s| s.get(&key)).collect()
}

/// Every redfence lock key on every server.
pub fn all_lock_keys(cluster: &RedisServers) -> Vec<String> {
    cluster
        .iter()
        .flat_map(|s| s.keys("redfence:lock:*"))
        .collect()
}

/// xorshift64*: reproducible from a printed seed, no `rand` needed.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        // A zero state would stay zero forever.
        XorShift((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    /// `k` distinct indices out of `0..n`.
    pub fn pick(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + self.below((n - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(k);
        all.sort_unstable();
        all
    }
}

/// The counter that contending holders increment through a store shared by
/// every process: a plain `GET` followed by a fenced write
/// ([`redfence::fenced_set`]). The read is deliberately not atomic with the
/// write, so two holders inside the critical section at once lose an update.
/// Each accepted write also appends its token to `<key>:log`, in write order.
pub struct SharedCounter {
    pub key: String,
}

impl SharedCounter {
    pub fn new(key: &str) -> SharedCounter {
        SharedCounter {
            key: key.to_string(),
        }
    }

    pub fn log_key(&self) -> String {
        format!("{}:log", self.key)
    }

    /// One read-modify-write under `guard`: `Ok(true)` if the store took
    /// it, `Ok(false)` if it refused it as stale or the lease was gone
    /// before the write.
    pub fn increment(
        &self,
        store: &mut redis::Connection,
        guard: &LockGuard,
        dwell: Duration,
    ) -> redis::RedisResult<bool> {
        let current: Option<u64> = redis::cmd("GET").arg(&self.key).query(store)?;
        // Widens the window in which a second holder would read the same
        // value; with mutual exclusion there is none.
        if !dwell.is_zero() {
            std::thread::sleep(dwell);
        }
        if guard.ensure_held().is_err() {
            return Ok(false);
        }
        let next = current.unwrap_or(0) + 1;
        let accepted = redfence::fenced_set(store, &self.key, guard.token(), next)?;
        if accepted {
            redis::cmd("RPUSH")
                .arg(self.log_key())
                .arg(guard.token().get())
                .exec(store)?;
        }
        Ok(accepted)
    }
}

/// A child process running one `#[ignore]`d test of the current test binary,
/// killed on drop (a failing parent must not leave it behind).
pub struct ChildTest {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stopped: bool,
}

/// Prefix of the lines a child reports on; everything else it prints (the
/// test harness's own output) is ignored.
pub const REPORT: &str = "REDFENCE-CHILD ";

impl ChildTest {
    pub fn spawn(test: &str, env: &[(&str, String)]) -> ChildTest {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                test,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("child test process starts");
        let stdin = child.stdin.take();
        let stdout: ChildStdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The harness prints "test name ... " without a newline
                // before the test's own output, so the prefix may be
                // mid-line.
                if let Some((_, report)) = line.split_once(REPORT) {
                    if tx.send(report.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        ChildTest {
            child,
            stdin,
            lines,
            stopped: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next report line, waiting at most `timeout`.
    pub fn next_report(&self, timeout: Duration) -> String {
        self.lines
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("child {} reported nothing: {e}", self.pid()))
    }

    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("flush child stdin");
    }

    /// SIGSTOP: the whole process freezes, watchdog included, like a VM
    /// paused by its hypervisor or a long stop-the-world pause.
    pub fn sigstop(&mut self) {
        super::cli::signal(self.pid(), "STOP");
        self.stopped = true;
    }

    pub fn sigcont(&mut self) {
        super::cli::signal(self.pid(), "CONT");
        self.stopped = false;
    }

    /// Waits for the child to exit and asserts it succeeded.
    pub fn wait_success(mut self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.child.try_wait().expect("child status") {
                Some(status) => {
                    assert!(status.success(), "child test failed: {status}");
                    return;
                }
                None if std::time::Instant::now() >= deadline => {
                    panic!("child {} did not finish within {timeout:?}", self.pid())
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl Drop for ChildTest {
    fn drop(&mut self) {
        if self.stopped {
            super::cli::signal(self.child.id(), "CONT");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `key=value` pairs of a report line.
pub fn report_field(report: &str, key: &str) -> String {
    report
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in child report {report:?}"))
        .to_string()
}

/// Reads one line from this process's stdin (a child waiting for its
/// parent's go-ahead).
pub fn read_stdin_line() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("read stdin");
    line.trim().to_string()
}

/// The instance URLs a parent passed to its child in the environment
/// variable `var`, comma-separated.
pub fn urls_from_env(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| panic!("child needs the instance URLs in {var}"))
        .split(',')
        .map(str::to_string)
        .collect()
}

/// A connection to a store at `url` (a redis-server of the test's), with
/// 2 s timeouts.
pub fn store_connection(url: &str) -> redis::Connection {
    let con = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    con
}

/// Prints a report line for the parent and flushes it at once.
pub fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{REPORT}{line}").expect("stdout");
    out.flush().expect("flush stdout");
}
