//! The command line: every flag is a public contract (scripts and outside
//! checks run the bench with them), so a flag that is wrong is an error
//! naming it, never a silent default.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::nemesis::Nemesis;

pub const USAGE: &str = "\
usage: nemesis [--workload register|run-once|election|multi|semaphore|rw|
                           operator|cancel|fenced-kv|fenced-rw|clocks|fair|all]
               [--nemesis pause,kill,restart,rollback,partition,late,clock,client-pause|none]
               [--duration SECONDS] [--seed N] [--instances N] [--clients N]
               [--server PATH] [--unfenced] [--report DIR]
       nemesis --check DIR

Runs clients through redfence's public API against real servers while a
seeded schedule of faults breaks them, then checks the recorded history
(written to DIR/history.jsonl with --report DIR).
Exit 0: no violation; 1: a violation; 2: the run could not be set up.

--check DIR judges DIR/history.jsonl again, with no servers.
Exit 0: no violation; 1: a violation; 2: the history is missing or
unreadable.";

/// What the clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    Register,
    RunOnce,
    Election,
    Multi,
    Semaphore,
    Rw,
    /// Forced unlocks of live and dead holders (`force_release`).
    Operator,
    /// Lock calls of every kind cancelled in flight.
    Cancel,
    /// Read-modify-writes through `fenced_get`/`fenced_set`.
    FencedKv,
    /// A reader-writer lock's readers (`fenced_get_shared`) and writers
    /// (`fenced_get`/`fenced_set`) on the storage server.
    FencedRw,
    /// `clock_offsets()`, `doctor()` and `ping()` against the clock faults.
    Clocks,
    /// The registers taken as fair locks (`fair_lock`): the same locks as
    /// the `register` workload's, so the checks of exclusion and tokens
    /// span both kinds of callers.
    Fair,
}

impl Workload {
    pub const ALL: [Workload; 12] = [
        Workload::Register,
        Workload::Multi,
        Workload::Election,
        Workload::RunOnce,
        Workload::Semaphore,
        Workload::Rw,
        Workload::Operator,
        Workload::Cancel,
        Workload::FencedKv,
        Workload::FencedRw,
        Workload::Clocks,
        Workload::Fair,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Register => "register",
            Workload::RunOnce => "run-once",
            Workload::Election => "election",
            Workload::Multi => "multi",
            Workload::Semaphore => "semaphore",
            Workload::Rw => "rw",
            Workload::Operator => "operator",
            Workload::Cancel => "cancel",
            Workload::FencedKv => "fenced-kv",
            Workload::FencedRw => "fenced-rw",
            Workload::Clocks => "clocks",
            Workload::Fair => "fair",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Args {
    pub workloads: Vec<Workload>,
    /// `None`: every nemesis the server supports.
    pub nemeses: Option<Vec<Nemesis>>,
    pub duration: Duration,
    pub seed: u64,
    pub instances: usize,
    pub clients: usize,
    pub server: Option<PathBuf>,
    pub unfenced: bool,
    pub report: Option<PathBuf>,
    /// `--check DIR`: judge a stored history instead of running.
    pub check: Option<PathBuf>,
}

/// Parses the arguments after the program name. `Ok(None)`: `--help`.
pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args {
        workloads: Workload::ALL.to_vec(),
        nemeses: None,
        duration: Duration::from_secs(60),
        seed: default_seed(),
        instances: 5,
        clients: 13,
        server: None,
        unfenced: false,
        report: None,
        check: None,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--workload" => args.workloads = workloads(&value()?)?,
            "--nemesis" => args.nemeses = Some(nemeses(&value()?)?),
            "--duration" => {
                let secs: u64 = number(&flag, &value()?)?;
                if !(1..=86_400).contains(&secs) {
                    return Err(format!("--duration {secs}: 1 to 86400 seconds"));
                }
                args.duration = Duration::from_secs(secs);
            }
            "--seed" => args.seed = number(&flag, &value()?)?,
            "--instances" => args.instances = bounded(&flag, &value()?, 3, 9)?,
            "--clients" => args.clients = bounded(&flag, &value()?, 1, 64)?,
            "--server" => args.server = Some(PathBuf::from(value()?)),
            "--unfenced" => args.unfenced = true,
            "--report" => args.report = Some(PathBuf::from(value()?)),
            "--check" => args.check = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(args))
}

fn workloads(list: &str) -> Result<Vec<Workload>, String> {
    if list == "all" {
        return Ok(Workload::ALL.to_vec());
    }
    let found = Workload::ALL.iter().find(|w| w.name() == list);
    found.map(|w| vec![*w]).ok_or_else(|| {
        format!(
            "--workload {list:?}: one of register, run-once, election, multi, semaphore, rw, \
             operator, cancel, fenced-kv, fenced-rw, clocks, fair, all"
        )
    })
}

fn nemeses(list: &str) -> Result<Vec<Nemesis>, String> {
    if list == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim) {
        let nemesis = Nemesis::ALL
            .iter()
            .find(|n| n.name() == name)
            .ok_or_else(|| {
                format!(
                    "--nemesis: unknown {name:?}; known: {}, or none",
                    Nemesis::ALL.map(Nemesis::name).join(", ")
                )
            })?;
        if !out.contains(nemesis) {
            out.push(*nemesis);
        }
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag} {value:?}: not a whole number"))
}

fn bounded(flag: &str, value: &str, min: usize, max: usize) -> Result<usize, String> {
    let n: usize = number(flag, value)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{flag} {n}: {min} to {max}"))
    }
}

/// A seed from the wall clock, printed by the run so it can be replayed.
fn default_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
}
