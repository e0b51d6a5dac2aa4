//! A fault-injecting TCP proxy, for the network faults `tc netem` would
//! give on a machine where it is available: latency, black holes, resets and
//! replies lost in flight.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How often a pump looks at the fault and the shutdown flag while no data
/// flows; short, so that a fault change reaches idle connections quickly.
const PUMP_POLL: Duration = Duration::from_millis(20);
/// How often the accept thread looks for new connections and the shutdown
/// flag.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// The upstream is a loopback address: a connect either succeeds or is
/// refused at once, so this bound is only a safety net.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A peer that stops reading must not wedge a pump (and with it the proxy's
/// drop) forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Slice in which a delayed chunk's sleep checks whether it should give up.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// What a [`FaultProxy`] does to the traffic through it.
///
/// The fault is read for every chunk of data, so a change applies to
/// connections that are already open, not only to new ones.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything unchanged.
    #[default]
    Pass,
    /// Hold each chunk this long before forwarding it, in both directions
    /// (so a request and its reply take at least twice this). Order is kept.
    Delay(Duration),
    /// Hold each chunk this long on the connections that were open when
    /// the fault was set, in both directions; connections opened since
    /// pass unharmed. What a client sees when requests it gave up on are
    /// stuck on a congested path (or in a paused server's socket buffer)
    /// while its new connection gets through: they land late, after what
    /// it sent since.
    DelayOpen(Duration),
    /// Like [`Delay`](Fault::Delay), with a delay drawn uniformly from
    /// `min..=max` for each chunk. Order is kept.
    Jitter {
        /// Shortest delay.
        min: Duration,
        /// Longest delay.
        max: Duration,
    },
    /// A network partition: accept connections, read and discard
    /// everything, never answer; new connections are never forwarded
    /// upstream. A connection that lost data this way is closed when the
    /// fault changes, since its requests and replies no longer pair up.
    BlackHole,
    /// Close client connections at once, new and existing.
    Reset,
    /// Forward requests upstream, but close the client connection as soon
    /// as a reply arrives, without forwarding it: the request was applied,
    /// and the client cannot know.
    DropReplies,
}

/// A TCP proxy on `127.0.0.1` and a free port in front of one address,
/// injecting a [`Fault`] that can be changed at any time.
///
/// It runs one accept thread and two threads per connection; all of them
/// stop and are joined when the proxy is dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    control: Arc<Control>,
    conns: Arc<Mutex<Vec<Conn>>>,
    accept: Option<JoinHandle<()>>,
}

/// What every proxy thread reads.
#[derive(Debug)]
struct Control {
    /// The fault, and how many faults were set before it (connections
    /// opened before then are "open" for [`Fault::DelayOpen`]).
    fault: Mutex<(Fault, u64)>,
    shutdown: AtomicBool,
    /// Chunks read and waiting out a delay.
    held: AtomicUsize,
}

impl Control {
    fn fault(&self) -> Fault {
        self.fault.lock().0
    }

    fn generation(&self) -> u64 {
        self.fault.lock().1
    }

    fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }
}

/// One proxied connection and the threads pumping it.
#[derive(Debug)]
struct Conn {
    link: Arc<Link>,
    pumps: Vec<JoinHandle<()>>,
}

impl Conn {
    fn finished(&self) -> bool {
        self.pumps.iter().all(JoinHandle::is_finished)
    }
}

/// The two sockets of one connection, shared by its pumps so either can
/// close both.
#[derive(Debug)]
struct Link {
    client: TcpStream,
    /// `None` for a connection accepted under [`Fault::BlackHole`].
    upstream: Option<TcpStream>,
    closed: AtomicBool,
    /// Some data was thrown away by [`Fault::BlackHole`].
    discarded: AtomicBool,
    /// The fault generation when the connection was opened.
    opened: u64,
}

impl Link {
    fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            // Shutting the sockets down (not just dropping our handles, the
            // pumps hold clones) is what wakes the other pump and shows the
            // client a closed connection.
            let _ = self.client.shutdown(std::net::Shutdown::Both);
            if let Some(upstream) = &self.upstream {
                let _ = upstream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the connection cannot carry traffic correctly once the
    /// black hole is over.
    fn broken_by_black_hole(&self) -> bool {
        self.upstream.is_none() || self.discarded.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

impl FaultProxy {
    /// Starts a proxy to `target`, passing traffic unchanged until
    /// [`set_fault`](Self::set_fault).
    pub fn start(target: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        // Non-blocking so the accept thread can notice shutdown.
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let control = Arc::new(Control {
            fault: Mutex::new((Fault::Pass, 0)),
            shutdown: AtomicBool::new(false),
            held: AtomicUsize::new(0),
        });
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let control = Arc::clone(&control);
            let conns = Arc::clone(&conns);
            thread::Builder::new()
                .name("redfence-proxy-accept".into())
                .spawn(move || accept_loop(listener, target, &control, &conns))?
        };
        Ok(FaultProxy {
            addr,
            target,
            control,
            conns,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address traffic is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// `redis://127.0.0.1:P/` for the proxy's port. For a server with a
    /// password, build the URL from [`addr`](Self::addr).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// Changes the fault for new and existing connections.
    ///
    /// [`Fault::Reset`] closes the live connections before returning, and
    /// leaving [`Fault::BlackHole`] closes those that lost data, so the next
    /// command a test sends sees the new fault.
    pub fn set_fault(&self, fault: Fault) {
        {
            let mut current = self.control.fault.lock();
            *current = (fault, current.1 + 1);
        }
        match fault {
            Fault::Reset => self.cut_all(),
            Fault::BlackHole => {}
            _ => {
                for conn in self.conns.lock().iter() {
                    if conn.link.broken_by_black_hole() {
                        conn.link.close();
                    }
                }
            }
        }
    }

    /// Chunks of traffic (either way) read and still held by a delay:
    /// zero once everything a delay held has been passed on (or dropped
    /// with its connection).
    pub fn held(&self) -> usize {
        self.control.held.load(Ordering::SeqCst)
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.control.fault()
    }

    /// The number of live connections through the proxy.
    pub fn connections(&self) -> usize {
        self.conns
            .lock()
            .iter()
            .filter(|conn| !conn.link.is_closed())
            .count()
    }

    /// Closes every live connection now; new ones are accepted as usual.
    pub fn cut_all(&self) {
        for conn in self.conns.lock().iter() {
            conn.link.close();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.control.shutdown.store(true, Ordering::SeqCst);
        // Joined first so that no connection is registered after the sweep
        // below.
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let conns = std::mem::take(&mut *self.conns.lock());
        for conn in &conns {
            conn.link.close();
        }
        // Every pump wakes within PUMP_POLL (reads) or at once (writes to a
        // shut-down socket), so these joins are bounded.
        for conn in conns {
            for pump in conn.pumps {
                let _ = pump.join();
            }
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    control: &Arc<Control>,
    conns: &Mutex<Vec<Conn>>,
) {
    while !control.shutting_down() {
        match listener.accept() {
            Ok((client, _)) => {
                if let Some(conn) = open_conn(client, target, control) {
                    conns.lock().push(conn);
                }
            }
            // WouldBlock is the idle case; other errors (e.g. out of file
            // descriptors) are retried after the same pause.
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
        // Reap finished connections so a long test does not accumulate
        // threads; joined outside the lock since they are already done.
        let finished: Vec<Conn> = {
            let mut conns = conns.lock();
            let (done, live) = std::mem::take(&mut *conns)
                .into_iter()
                .partition(Conn::finished);
            *conns = live;
            done
        };
        for conn in finished {
            for pump in conn.pumps {
                let _ = pump.join();
            }
        }
    }
}

/// Sets up one accepted connection according to the current fault; `None`
/// if it was closed straight away.
fn open_conn(client: TcpStream, target: SocketAddr, control: &Arc<Control>) -> Option<Conn> {
    let fault = control.fault();
    if fault == Fault::Reset {
        return None;
    }
    // Accepted sockets may inherit the listener's non-blocking mode on some
    // platforms; the pumps rely on blocking reads with a timeout.
    configure(&client).ok()?;
    let upstream = if fault == Fault::BlackHole {
        None
    } else {
        let upstream = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT).ok()?;
        configure(&upstream).ok()?;
        Some(upstream)
    };

    let link = Arc::new(Link {
        client,
        upstream,
        closed: AtomicBool::new(false),
        discarded: AtomicBool::new(false),
        opened: control.generation(),
    });
    let mut pumps = Vec::with_capacity(2);
    let to_server = (
        link.client.try_clone(),
        link.upstream.as_ref().map(TcpStream::try_clone).transpose(),
    );
    match to_server {
        (Ok(src), Ok(dst)) => {
            if let Some(pump) = spawn_pump(control, &link, Direction::ToServer, src, dst) {
                pumps.push(pump);
            }
        }
        _ => link.close(),
    }
    if let Some(upstream) = &link.upstream {
        match (upstream.try_clone(), link.client.try_clone()) {
            (Ok(src), Ok(dst)) => {
                if let Some(pump) = spawn_pump(control, &link, Direction::ToClient, src, Some(dst))
                {
                    pumps.push(pump);
                }
            }
            _ => link.close(),
        }
    }
    Some(Conn { link, pumps })
}

fn configure(stream: &TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(PUMP_POLL))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))
}

/// Spawns a pump; if the thread cannot be created the connection is closed,
/// since half a connection would only hang the client.
fn spawn_pump(
    control: &Arc<Control>,
    link: &Arc<Link>,
    direction: Direction,
    src: TcpStream,
    dst: Option<TcpStream>,
) -> Option<JoinHandle<()>> {
    let control = Arc::clone(control);
    let pump_link = Arc::clone(link);
    let spawned = thread::Builder::new()
        .name("redfence-proxy-pump".into())
        .spawn(move || pump(&control, &pump_link, direction, src, dst));
    match spawned {
        Ok(handle) => Some(handle),
        Err(_) => {
            link.close();
            None
        }
    }
}

fn pump(
    control: &Control,
    link: &Link,
    direction: Direction,
    mut src: TcpStream,
    mut dst: Option<TcpStream>,
) {
    let mut rng = XorShift::new();
    let mut buf = vec![0u8; 16 * 1024];
    while !control.shutting_down() && !link.is_closed() {
        // Checked while idle too, so that an open connection with no traffic
        // still sees a reset or the end of a black hole.
        match control.fault() {
            Fault::Reset => break,
            Fault::BlackHole => {}
            _ if link.broken_by_black_hole() => break,
            _ => {}
        }
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => break,
        };
        // Read after the data arrived, so a fault set before a request was
        // sent applies to that request.
        let delay = match control.fault() {
            Fault::Pass => Duration::ZERO,
            Fault::Delay(d) => d,
            Fault::DelayOpen(d) if link.opened < control.generation() => d,
            Fault::DelayOpen(_) => Duration::ZERO,
            Fault::Jitter { min, max } => rng.duration_between(min, max),
            Fault::BlackHole => {
                link.discarded.store(true, Ordering::SeqCst);
                continue;
            }
            Fault::Reset => break,
            Fault::DropReplies if direction == Direction::ToClient => break,
            Fault::DropReplies => Duration::ZERO,
        };
        let held = !delay.is_zero();
        if held {
            control.held.fetch_add(1, Ordering::SeqCst);
        }
        let forwarded = forward(control, link, delay, dst.as_mut(), &buf[..n]);
        if held {
            control.held.fetch_sub(1, Ordering::SeqCst);
        }
        if !forwarded {
            break;
        }
    }
    link.close();
}

/// Sleeps for `delay` unless the proxy shuts down or the connection closes
/// first; `false` in that case.
/// Waits out `delay`, then writes `chunk` on; false when the connection
/// is over.
fn forward(
    control: &Control,
    link: &Link,
    delay: Duration,
    dst: Option<&mut TcpStream>,
    chunk: &[u8],
) -> bool {
    if !sleep_while_open(control, link, delay) {
        return false;
    }
    match dst {
        Some(dst) => dst.write_all(chunk).is_ok(),
        None => {
            // No upstream: only possible for a black-holed connection,
            // which the fault check in `pump` closes once the black hole
            // ends.
            link.discarded.store(true, Ordering::SeqCst);
            true
        }
    }
}

fn sleep_while_open(control: &Control, link: &Link, delay: Duration) -> bool {
    let deadline = Instant::now() + delay;
    loop {
        if control.shutting_down() || link.is_closed() {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        thread::sleep(left.min(SLEEP_SLICE));
    }
}

/// Jitter only needs spread, not quality, and the crate has no `rand`.
struct XorShift(u64);

impl XorShift {
    fn new() -> XorShift {
        // A zero state would stay zero forever.
        XorShift((uuid::Uuid::new_v4().as_u128() as u64) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn duration_between(&mut self, a: Duration, b: Duration) -> Duration {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let span = u64::try_from((hi - lo).as_nanos()).unwrap_or(u64::MAX);
        match span.checked_add(1) {
            Some(range) => lo + Duration::from_nanos(self.next() % range),
            None => lo + Duration::from_nanos(self.next()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RedisServer;

    fn connect(url: &str, read_timeout: Duration) -> redis::RedisResult<redis::Connection> {
        let con = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(1))?;
        con.set_read_timeout(Some(read_timeout))?;
        con.set_write_timeout(Some(Duration::from_secs(1)))?;
        Ok(con)
    }

    fn ping(con: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(con)
    }

    #[test]
    fn pass_and_delay() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        assert_eq!(proxy.fault(), Fault::Pass);
        let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
        assert_eq!(ping(&mut con).unwrap(), "PONG");
        assert_eq!(proxy.connections(), 1);

        let delay = Duration::from_millis(100);
        proxy.set_fault(Fault::Delay(delay));
        let start = Instant::now();
        assert_eq!(ping(&mut con).unwrap(), "PONG");
        assert!(start.elapsed() >= delay, "took only {:?}", start.elapsed());

        proxy.set_fault(Fault::Jitter {
            min: Duration::from_millis(5),
            max: Duration::from_millis(10),
        });
        let start = Instant::now();
        assert_eq!(ping(&mut con).unwrap(), "PONG");
        assert!(start.elapsed() >= Duration::from_millis(5));

        proxy.cut_all();
        assert!(ping(&mut con).is_err());
        assert_eq!(proxy.connections(), 0);
    }

    #[test]
    fn black_hole_times_out_then_heals() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let mut con = connect(&proxy.url(), Duration::from_millis(200)).unwrap();
        assert_eq!(ping(&mut con).unwrap(), "PONG");

        proxy.set_fault(Fault::BlackHole);
        let err = ping(&mut con).unwrap_err();
        assert!(err.is_timeout(), "expected a timeout, got {err}");
        // New connections are accepted but never answered either; redis-rs
        // may already time out in its connection handshake.
        // A socket read with a timeout can also end in EINTR when this
        // process is stopped and resumed (another test's child signals can
        // do that on a loaded machine); that is no answer either, so ask
        // again, a bounded number of times.
        let mut err = None;
        for _ in 0..3 {
            let fresh =
                connect(&proxy.url(), Duration::from_millis(200)).and_then(|mut c| ping(&mut c));
            let e = fresh.unwrap_err();
            let interrupted = e.to_string().contains("os error 4");
            err = Some(e);
            if !interrupted {
                break;
            }
        }
        let err = err.expect("at least one try");
        assert!(err.is_timeout(), "expected a timeout, got {err}");
        assert!(proxy.connections() >= 1);

        proxy.set_fault(Fault::Pass);
        let mut healed = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
        assert_eq!(ping(&mut healed).unwrap(), "PONG");
    }

    #[test]
    fn reset_fails_commands() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
        assert_eq!(ping(&mut con).unwrap(), "PONG");

        proxy.set_fault(Fault::Reset);
        assert!(ping(&mut con).is_err());
        let fresh = connect(&proxy.url(), Duration::from_secs(2)).and_then(|mut c| ping(&mut c));
        assert!(fresh.is_err());
    }

    #[test]
    fn drop_replies_applies_the_write_but_fails_the_command() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
        proxy.set_fault(Fault::DropReplies);
        let result = redis::cmd("SET").arg("k").arg("v").exec(&mut con);
        assert!(result.is_err());
        assert!(!result.unwrap_err().is_timeout());
        assert_eq!(server.get("k").as_deref(), Some("v"));
    }

    #[test]
    fn jitter_stays_in_range() {
        let mut rng = XorShift::new();
        let (min, max) = (Duration::from_millis(3), Duration::from_millis(7));
        for _ in 0..1000 {
            let d = rng.duration_between(min, max);
            assert!(min <= d && d <= max);
        }
        assert_eq!(rng.duration_between(max, max), max);
    }
}
