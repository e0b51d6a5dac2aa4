//! The faults, one at a time on a seeded schedule, each healed before the
//! next and all healed before the run's final read.
//!
//! Faults that lose data or move clocks touch at most a minority, as the
//! guarantees assume; pauses, partitions and late requests may take a
//! majority (they cost liveness, never safety). A killed instance comes
//! back only after the longest lease has run out (the restart the
//! guarantees assume); `restart` and `rollback` come back at once, which
//! the guarantees do not cover for exclusion (a known Redlock limit).
//! Each fault records what it did to each instance's keys and when (an
//! `Effect`: keys lost, a clock stepped and by how much): the checker
//! excuses two holders at once only by such an effect that can explain
//! them (`checker::excuse`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use redfence::testing::Fault;

use crate::cluster::Cluster;
use crate::history::{Effect, EffectKind, FaultRecord, History};
use crate::MAX_KEY_LIFE;

/// The longest a `late` fault holds a request: under the registers' TTL,
/// so that a held acquire always lands while its clean-up's void key
/// lives (past it, a lock nobody owns is the documented outcome).
pub const LATE_MAX: Duration = Duration::from_millis(800);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Nemesis {
    Pause,
    Kill,
    Restart,
    Rollback,
    Partition,
    Late,
    Clock,
    ClientPause,
}

impl Nemesis {
    pub const ALL: [Nemesis; 8] = [
        Nemesis::Pause,
        Nemesis::Kill,
        Nemesis::Restart,
        Nemesis::Rollback,
        Nemesis::Partition,
        Nemesis::Late,
        Nemesis::Clock,
        Nemesis::ClientPause,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Nemesis::Pause => "pause",
            Nemesis::Kill => "kill",
            Nemesis::Restart => "restart",
            Nemesis::Rollback => "rollback",
            Nemesis::Partition => "partition",
            Nemesis::Late => "late",
            Nemesis::Clock => "clock",
            Nemesis::ClientPause => "client-pause",
        }
    }

    /// Whether this fault may leave a lock key on its instances after its
    /// holder is gone, until the key expires: it keeps a release or a
    /// clean-up from arriving, brings old keys back, or moves the clock
    /// the expiry is measured on.
    pub fn excuses_orphans(self) -> bool {
        !matches!(self, Nemesis::Late | Nemesis::ClientPause)
    }
}

/// Stalls the client-pause nemesis asks for: each is taken by the next
/// holder that checks, and (the `fair` workload) the pause of the next
/// fair waiter to join the queues (see `workloads.rs`).
#[derive(Default)]
pub struct Stalls {
    holders: AtomicUsize,
    waiters: AtomicUsize,
}

impl Stalls {
    pub fn request(&self) {
        self.holders.fetch_add(1, Ordering::SeqCst);
        self.waiters.fetch_add(1, Ordering::SeqCst);
    }

    /// Takes one requested stall of a holder, if any.
    pub fn take(&self) -> bool {
        take_one(&self.holders)
    }

    /// Takes one requested pause of a fair waiter, if any.
    pub fn take_waiter(&self) -> bool {
        take_one(&self.waiters)
    }
}

fn take_one(count: &AtomicUsize) -> bool {
    count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// The clock offset the clock nemesis has applied to each instance, as the
/// `clocks` workload judges `clock_offsets()` and `doctor()` against it. A
/// step is announced before its file is written (`changing`) and published
/// once the server reads the new clock, each time with a new generation:
/// a check whose call saw one generation, settled, from start to end knows
/// every instance's clock during the call.
pub struct Clocks {
    state: Mutex<ClockState>,
    changed: Condvar,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockState {
    pub generation: u64,
    /// A step is being applied: the offsets below may not be in force.
    pub changing: bool,
    /// Milliseconds ahead of the machine's clock, per instance.
    pub offsets_ms: Vec<i64>,
}

impl Clocks {
    pub fn new(instances: usize) -> Clocks {
        Clocks {
            state: Mutex::new(ClockState {
                generation: 0,
                changing: false,
                offsets_ms: vec![0; instances],
            }),
            changed: Condvar::new(),
        }
    }

    pub fn now(&self) -> ClockState {
        self.state.lock().clone()
    }

    /// Waits until the generation is past `seen` or `timeout` passes.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> ClockState {
        let mut state = self.state.lock();
        let deadline = Instant::now() + timeout;
        while state.generation == seen {
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.clone()
    }

    fn begin(&self) {
        let mut state = self.state.lock();
        state.generation += 1;
        state.changing = true;
        self.changed.notify_all();
    }

    fn settle(&self, offsets_ms: Vec<i64>) {
        let mut state = self.state.lock();
        state.generation += 1;
        state.changing = false;
        state.offsets_ms = offsets_ms;
        self.changed.notify_all();
    }
}

pub struct Schedule<'a> {
    pub cluster: &'a Cluster,
    pub history: &'a History,
    pub stalls: &'a Stalls,
    pub clocks: &'a Clocks,
    pub enabled: Vec<Nemesis>,
    pub rng: StdRng,
    /// No fault starts after this; each ends by `end`.
    pub until: Instant,
    /// What the fault being injected did to each instance, so far.
    effects: Vec<Effect>,
}

impl Schedule<'_> {
    pub fn new<'a>(
        cluster: &'a Cluster,
        history: &'a History,
        stalls: &'a Stalls,
        clocks: &'a Clocks,
        enabled: Vec<Nemesis>,
        seed: u64,
        until: Instant,
    ) -> Schedule<'a> {
        Schedule {
            cluster,
            history,
            stalls,
            clocks,
            enabled,
            rng: StdRng::seed_from_u64(seed ^ 0x006e_656d_6573_6973),
            until,
            effects: Vec::new(),
        }
    }

    /// Injects faults until `until`: a quiet gap, then one fault.
    pub fn run(mut self) {
        if self.enabled.is_empty() {
            return;
        }
        while Instant::now() < self.until {
            let gap = self.millis(200, 900);
            self.sleep(gap);
            if Instant::now() >= self.until {
                break;
            }
            let nemesis = self.choose();
            let start = Instant::now();
            let (instances, detail) = self.inject(nemesis);
            self.history.faults.lock().push(FaultRecord {
                nemesis,
                instances,
                start,
                end: Instant::now(),
                detail,
                effects: std::mem::take(&mut self.effects),
            });
        }
    }

    /// A nemesis at random. Late requests weigh triple: they are what the
    /// scripts' every rule is written for, and each one only reaches the
    /// requests in flight as it starts. Clock faults weigh double: a client
    /// takes an instance's new clock into its proposals only when it reads
    /// it again (at most every 10 s while busy).
    fn choose(&mut self) -> Nemesis {
        let weight = |n: &Nemesis| match n {
            Nemesis::Late => 3,
            Nemesis::Clock => 2,
            _ => 1,
        };
        let total: u32 = self.enabled.iter().map(weight).sum();
        let mut pick = self.rng.random_range(0..total);
        for n in &self.enabled {
            if pick < weight(n) {
                return *n;
            }
            pick -= weight(n);
        }
        self.enabled[0]
    }

    fn inject(&mut self, nemesis: Nemesis) -> (Vec<usize>, String) {
        match nemesis {
            Nemesis::Pause => self.pause(),
            Nemesis::Kill => self.kill(),
            Nemesis::Restart => self.restart(),
            Nemesis::Rollback => self.rollback(),
            Nemesis::Partition => self.partition(),
            Nemesis::Late => self.late(),
            Nemesis::Clock => self.clock(),
            Nemesis::ClientPause => {
                self.stalls.request();
                let what = "the next holder stalls past its lease (fair: and the next waiter to \
                            join pauses past its heartbeat)";
                (Vec::new(), what.into())
            }
        }
    }

    fn pause(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.len() / 2 + 1);
        let hold = self.millis(300, 2000);
        for &i in &victims {
            self.cluster.server(i).stop();
        }
        self.sleep(hold);
        for &i in &victims {
            self.cluster.server(i).cont();
        }
        (victims, format!("SIGSTOP for {} ms", hold.as_millis()))
    }

    /// Records that instance `i`'s keys are lost now (written after
    /// `since`, or all of them).
    fn lost(&mut self, i: usize, since: Option<Instant>) {
        self.effects.push(Effect {
            instance: i,
            at: Instant::now(),
            kind: EffectKind::Loss { since },
        });
    }

    fn kill(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.minority());
        // Back only once every lease it held has run out.
        let down = MAX_KEY_LIFE + self.millis(500, 1500);
        for &i in &victims {
            self.lost(i, None);
            self.cluster.kill(i);
        }
        self.sleep(down);
        let detail = self.start_again(&victims);
        (
            victims,
            format!(
                "kill -9, no persistence, down {} ms{detail}",
                down.as_millis()
            ),
        )
    }

    fn restart(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.minority());
        for &i in &victims {
            self.lost(i, None);
            self.cluster.kill(i);
        }
        let detail = self.start_again(&victims);
        (
            victims,
            format!("kill -9, no persistence, back at once{detail}"),
        )
    }

    fn rollback(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.minority());
        let age = self.millis(500, 3000);
        // Taken before the snapshot starts: whatever is written after may
        // be missing from it.
        let snapshot = Instant::now();
        let saved: Vec<usize> = victims
            .iter()
            .copied()
            .filter(|&i| self.cluster.snapshot(i).is_ok())
            .collect();
        self.sleep(age);
        let mut failed = String::new();
        for &i in &saved {
            self.lost(i, Some(snapshot));
            if let Err(e) = self.cluster.roll_back(i) {
                failed.push_str(&format!("; #{i} did not start: {e}"));
            }
        }
        let detail = format!("back from a snapshot {} ms old{failed}", age.as_millis());
        (saved, detail)
    }

    fn start_again(&self, victims: &[usize]) -> String {
        let mut failed = String::new();
        for &i in victims {
            if let Err(e) = self.cluster.start_again(i) {
                failed.push_str(&format!("; #{i} did not start: {e}"));
            }
        }
        failed
    }

    fn partition(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.len());
        let hold = self.millis(300, 2500);
        let (fault, what) = if self.rng.random_bool(0.5) {
            (Fault::BlackHole, "black hole")
        } else {
            (Fault::Reset, "connections reset")
        };
        self.with_fault(&victims, fault, hold);
        (victims, format!("{what} for {} ms", hold.as_millis()))
    }

    /// Requests on the connections open now are held, then delivered:
    /// after the client gave up on them and sent more on new connections.
    fn late(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.len());
        let delay = self.millis(200, LATE_MAX.as_millis() as u64);
        let hold = delay + self.millis(100, 1000);
        self.with_fault(&victims, Fault::DelayOpen(delay), hold);
        (
            victims,
            format!("held {} ms, for {} ms", delay.as_millis(), hold.as_millis()),
        )
    }

    fn with_fault(&mut self, victims: &[usize], fault: Fault, hold: Duration) {
        for &i in victims {
            self.cluster.set_fault(i, fault);
        }
        self.sleep(hold);
        for &i in victims {
            self.cluster.set_fault(i, Fault::Pass);
        }
    }

    /// A minority's clocks jump forward or back, or strobe between the
    /// two, then are set right.
    fn clock(&mut self) -> (Vec<usize>, String) {
        let victims = self.pick(1, self.cluster.minority());
        let by = self.millis(1000, 5000);
        let hold = self.millis(1000, 5000);
        let kind = self.rng.random_range(0..3);
        match kind {
            0 => self.shift_clocks(&victims, by.as_millis() as i64),
            1 => self.shift_clocks(&victims, -(by.as_millis() as i64)),
            _ => self.strobe(&victims, by, hold),
        }
        if kind < 2 {
            self.sleep(hold);
        }
        for &i in &victims {
            let off = self.cluster.server(i).clock_offset_ms();
            self.shift_clocks(&[i], -off);
        }
        let what = ["forward", "back", "strobed ±"][kind];
        let detail = format!(
            "clock {what} {} ms for {} ms",
            by.as_millis(),
            hold.as_millis()
        );
        (victims, detail)
    }

    fn strobe(&mut self, victims: &[usize], by: Duration, hold: Duration) {
        let end = Instant::now() + hold;
        let step = by.as_millis() as i64;
        let mut sign = 1;
        while Instant::now() < end {
            self.shift_clocks(victims, sign * step);
            sign = -sign;
            self.sleep(Duration::from_millis(100));
        }
    }

    fn shift_clocks(&mut self, victims: &[usize], by_ms: i64) {
        self.clocks.begin();
        for &i in victims {
            if by_ms != 0 {
                self.effects.push(Effect {
                    instance: i,
                    at: Instant::now(),
                    kind: EffectKind::Clock { by_ms },
                });
            }
            let server = self.cluster.server(i);
            let by = Duration::from_millis(by_ms.unsigned_abs());
            if by_ms >= 0 {
                server.jump_clock_forward(by);
            } else {
                server.jump_clock_back(by);
            }
        }
        // Each jump returned once its server read the new clock (or it is
        // down and reads it when back): now in force.
        let offsets = (0..self.cluster.len())
            .map(|i| self.cluster.server(i).clock_offset_ms())
            .collect();
        self.clocks.settle(offsets);
    }

    /// Between `min` and `max` distinct instances, at random.
    fn pick(&mut self, min: usize, max: usize) -> Vec<usize> {
        let n = self.cluster.len();
        let k = self.rng.random_range(min..=max.max(min).min(n));
        let mut victims = sample(&mut self.rng, n, k).into_vec();
        victims.sort_unstable();
        victims
    }

    fn millis(&mut self, min: u64, max: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(min..=max))
    }

    /// Waits, but never past the run's end plus the fault's own bound:
    /// faults are over before the final read.
    fn sleep(&self, d: Duration) {
        let latest = self.until + MAX_KEY_LIFE * 2;
        let left = latest.saturating_duration_since(Instant::now());
        thread::sleep(d.min(left));
    }
}
