//! [`Redlock::doctor`]: checks each instance against the deployment the
//! guarantees assume (README "Guarantees", docs/protocol.md): independent
//! masters, no eviction of keys with a TTL, persistence that matches the
//! restart policy, clocks that agree, and every command the client sends
//! allowed.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::{ClockOffset, Error, InstanceError, LockOptions, Redlock, MAX_CLOCK_OFFSET};

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; no precondition is violated (say, what a restart
    /// costs under this persistence mode).
    Notice,
    /// A precondition holds only under a condition the doctor cannot see
    /// (a master with replicas: a failover loses what was not replicated).
    Warning,
    /// A precondition of the guarantees is violated.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Notice => "notice",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One thing the doctor found on an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What was checked: `reachable`, `role`, `independence`, `eviction`,
    /// `persistence`, `clock`, `permissions`, `info`, `cluster`, `native`.
    pub check: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// What was found and what to do; never a password or a lock value.
    pub message: String,
}

/// What the doctor found on one server (each shard master of a cluster
/// position is a row of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceReport {
    /// The server, as `host:port/db` (a cluster shard: `cluster #i shard
    /// host:port`).
    pub instance: String,
    /// Whether it answered.
    pub reachable: bool,
    /// Its server and version (`redis 7.0.15`, `valkey 9.1.2`), if known.
    pub server: Option<String>,
    /// What was found, most severe first.
    pub findings: Vec<Finding>,
}

/// The doctor's report: see [`Redlock::doctor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorReport {
    /// Instances that must agree.
    pub quorum: usize,
    /// Positions that answered.
    pub answered: usize,
    /// One row per server.
    pub instances: Vec<InstanceReport>,
}

impl DoctorReport {
    /// Whether a quorum of positions answered.
    pub fn quorum_answered(&self) -> bool {
        self.answered >= self.quorum
    }

    /// Whether every precondition the doctor can see holds (notices and
    /// warnings allowed) and a quorum answered.
    pub fn is_healthy(&self) -> bool {
        self.quorum_answered() && self.worst() < Some(Severity::Error)
    }

    /// The most severe finding, if any.
    pub fn worst(&self) -> Option<Severity> {
        self.instances
            .iter()
            .flat_map(|i| i.findings.iter().map(|f| f.severity))
            .max()
    }
}

/// What `INFO` says of one server, by field.
struct Info(HashMap<String, String>);

impl Info {
    fn parse(text: &str) -> Info {
        let fields = text
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Info(fields)
    }

    fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    fn server(&self) -> Option<String> {
        self.get("valkey_version")
            .map(|v| format!("valkey {v}"))
            .or_else(|| self.get("redis_version").map(|v| format!("redis {v}")))
    }
}

impl Redlock {
    /// Checks every instance (every shard master of a cluster position)
    /// against the preconditions of the guarantees, and says per instance
    /// what holds: reachable, server and version; role (a replica is an
    /// error, a master with replicas a warning); the same server behind
    /// two positions (an error: the quorum is an illusion); eviction (a
    /// `maxmemory` with a policy other than `noeviction` may evict lock
    /// keys and counters: an error); persistence (a notice of what a
    /// restart costs); clocks (an instance further off the others than
    /// [`MAX_CLOCK_OFFSET`]: an error); permissions (a probe lock taken,
    /// extended and released on the resource `redfence-doctor`).
    ///
    /// The checks read `INFO`; a user without `+info` gets a notice saying
    /// which checks it could not make. Run it at start-up, or with
    /// `redfence doctor`.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let report = locks.doctor();
    /// for row in &report.instances {
    ///     for finding in &row.findings {
    ///         println!("{} {} {}: {}", row.instance, finding.severity, finding.check, finding.message);
    ///     }
    /// }
    /// assert!(report.is_healthy(), "fix the deployment first");
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn doctor(&self) -> DoctorReport {
        let mut pipe = redis::pipe();
        pipe.cmd("INFO")
            .arg("server")
            .arg("replication")
            .arg("memory")
            .arg("persistence");
        // Answered with an error by a standalone server; read on shards.
        pipe.cmd("CLUSTER").arg("INFO");
        let answers = self.ask_each_server(pipe.get_packed_pipeline().into(), 2);
        let clusters: Vec<bool> = self
            .shared()
            .instances
            .voters()
            .iter()
            .map(|v| v.is_cluster())
            .collect();
        let mut rows: Vec<InstanceReport> = Vec::with_capacity(answers.len());
        let mut run_ids: HashMap<String, Vec<usize>> = HashMap::new();
        let mut positions_up: Vec<bool> = vec![true; self.instance_count()];
        for (position, name, answer, _) in answers {
            let shard = clusters.get(position).copied().unwrap_or(false);
            let (mut row, run_id) = examine(name, answer, shard);
            if row.reachable && !shard {
                let commands = self.shared().instances.native_commands(position);
                row.findings.extend(commands.map(native_finding));
            }
            if !row.reachable {
                if let Some(up) = positions_up.get_mut(position) {
                    *up = false;
                }
            }
            if let Some(run_id) = run_id {
                run_ids.entry(run_id).or_default().push(rows.len());
            }
            rows.push(row);
        }
        flag_duplicates(&mut rows, &run_ids);
        self.check_clocks(&mut rows);
        self.check_permissions(&mut rows);
        for row in &mut rows {
            row.findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
        }
        DoctorReport {
            quorum: self.quorum(),
            answered: positions_up.iter().filter(|up| **up).count(),
            instances: rows,
        }
    }

    /// An instance further off the others than the bound the tokens
    /// assume is an error.
    fn check_clocks(&self, rows: &mut [InstanceReport]) {
        for (position, offset) in self.clock_offsets() {
            let Some(offset) = offset else { continue };
            let finding = clock_finding(offset);
            for row in rows
                .iter_mut()
                .filter(|r| r.instance.starts_with(&position))
            {
                row.findings.push(finding.clone());
            }
        }
    }

    /// A probe lock, extended and released: every command of a lock's life
    /// is allowed (a refusal names what is missing).
    fn check_permissions(&self, rows: &mut [InstanceReport]) {
        let probe = LockOptions::new()
            .ttl(Duration::from_secs(5))
            .wait(Duration::ZERO)
            .auto_extend(false);
        let result = self.lock_with(PROBE_RESOURCE, probe).and_then(|guard| {
            guard.extend(Duration::from_secs(5))?;
            guard.release()
        });
        let refusals: Vec<InstanceError> = match result {
            Ok(()) | Err(Error::Contended { .. }) => Vec::new(),
            Err(Error::AccessDenied { errors, .. }) | Err(Error::Unavailable { errors, .. }) => {
                errors
            }
            Err(_) => Vec::new(),
        };
        for e in refusals
            .iter()
            .filter(|e| e.kind() == crate::InstanceErrorKind::Auth)
        {
            for row in rows
                .iter_mut()
                .filter(|r| r.instance.starts_with(e.instance()))
            {
                row.findings.push(Finding {
                    check: "permissions",
                    severity: Severity::Error,
                    message: e.detail().to_string(),
                });
            }
        }
    }
}

/// The resource the doctor's probe lock is taken on.
pub(crate) const PROBE_RESOURCE: &str = "redfence-doctor";

/// One server's row from its answer to `INFO`, and its run id.
fn examine(
    instance: String,
    answer: Result<Vec<Value>, InstanceError>,
    shard: bool,
) -> (InstanceReport, Option<String>) {
    let cluster_info = match &answer {
        Ok(values) if shard => values.get(1).cloned(),
        _ => None,
    };
    // An error reply (NOPERM for a user without +info) is an answer too.
    let answer = answer.and_then(|values| match values.first() {
        Some(Value::ServerError(e)) => Err(InstanceError::new(
            &instance,
            crate::InstanceErrorKind::from_code(e.code()),
            format!("{} {}", e.code(), e.details().unwrap_or_default()),
        )),
        _ => Ok(values),
    });
    let mut row = InstanceReport {
        instance,
        reachable: false,
        server: None,
        findings: Vec::new(),
    };
    let text = match answer {
        Err(e) if e.kind() == crate::InstanceErrorKind::Auth => {
            row.reachable = true;
            row.findings.push(Finding {
                check: "info",
                severity: Severity::Notice,
                message: format!(
                    "INFO is not allowed for this user ({}): role, eviction, persistence and \
                     independence were not checked; run the doctor as a user with +info",
                    e.detail()
                ),
            });
            return (row, None);
        }
        Err(e) => {
            row.findings.push(Finding {
                check: "reachable",
                severity: Severity::Error,
                message: format!("{:?}: {}", e.kind(), e.detail()),
            });
            return (row, None);
        }
        Ok(values) => match values.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::VerbatimString { text, .. }) => text.clone(),
            _ => String::new(),
        },
    };
    row.reachable = true;
    let info = Info::parse(&text);
    row.server = info.server();
    row.findings.extend(role_findings(&info));
    row.findings.extend(eviction_findings(&info));
    row.findings.extend(persistence_findings(&info));
    row.findings
        .extend(cluster_info.and_then(|v| cluster_findings(&v)));
    (row, info.get("run_id").map(str::to_string))
}

fn role_findings(info: &Info) -> Option<Finding> {
    let replicas: u32 = info
        .get("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match info.get("role") {
        Some("slave") | Some("replica") => Some(Finding {
            check: "role",
            severity: Severity::Error,
            message: "a replica: locks must be taken on independent masters (a replica refuses \
                      writes, or loses them to its master)"
                .to_string(),
        }),
        Some("master") if replicas > 0 => Some(Finding {
            check: "role",
            severity: Severity::Warning,
            message: format!(
                "a master with {replicas} replica(s): a failover to a replica that missed the \
                 last writes counts as a restart without persistence (docs/faults.md)"
            ),
        }),
        _ => None,
    }
}

fn eviction_findings(info: &Info) -> Option<Finding> {
    let maxmemory: u64 = info.get("maxmemory")?.parse().ok()?;
    let policy = info.get("maxmemory_policy")?;
    (maxmemory > 0 && policy != "noeviction").then(|| Finding {
        check: "eviction",
        severity: Severity::Error,
        message: format!(
            "maxmemory {maxmemory} with maxmemory-policy {policy}: lock keys and fence counters \
             can be evicted; use noeviction"
        ),
    })
}

fn persistence_findings(info: &Info) -> Option<Finding> {
    let message = match info.get("aof_enabled")? {
        "1" => "append-only file on: a restart keeps what it wrote (with appendfsync always, \
                every write; see docs/protocol.md for the other modes)"
            .to_string(),
        _ => "no append-only file: a restart loses the lock keys and counters written since the \
              last snapshot; restart it only after the longest TTL (docs/protocol.md)"
            .to_string(),
    };
    Some(Finding {
        check: "persistence",
        severity: Severity::Notice,
        message,
    })
}

/// A shard's view of its cluster (`CLUSTER INFO`): a cluster that is not
/// `ok`, or whose slots are not all served, refuses some resources.
fn cluster_findings(reply: &Value) -> Option<Finding> {
    let text = match reply {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::ServerError(e) => {
            return Some(Finding {
                check: "cluster",
                severity: Severity::Notice,
                message: format!(
                    "CLUSTER INFO refused ({}): the cluster's state and slot coverage were not \
                     checked",
                    e.code()
                ),
            });
        }
        _ => return None,
    };
    let info = Info::parse(&text);
    let state = info.get("cluster_state").unwrap_or("unknown");
    let ok: u32 = info.get("cluster_slots_ok")?.parse().ok()?;
    if state == "ok" && ok == 16_384 {
        return None;
    }
    Some(Finding {
        check: "cluster",
        severity: Severity::Error,
        message: format!(
            "cluster state {state}, {ok} of 16384 slots served: resources in the others are \
             refused (see cluster-require-full-coverage, docs/cluster.md)"
        ),
    })
}

/// Which native commands replace the scripts on this server.
fn native_finding(commands: crate::protocol::native::Commands) -> Finding {
    let mut native = Vec::new();
    if commands.delifeq {
        native.push("DELIFEQ releases");
    }
    if commands.delex {
        native.push("DELEX releases");
    }
    if commands.set_ifeq {
        native.push("SET IFEQ extensions");
    }
    let message = if native.is_empty() {
        "no native commands: releases and extensions run the Lua scripts".to_string()
    } else {
        format!("native commands: {}", native.join(", "))
    };
    Finding {
        check: "native",
        severity: Severity::Notice,
        message,
    }
}

/// An instance clock's finding, judged with its reading's uncertainty:
/// past the bound even at its nearest (an error), possibly past it (a
/// warning: read again), or within it.
fn clock_finding(offset: ClockOffset) -> Finding {
    let off_ms = offset.as_secs_f64() * 1000.0;
    let within_ms = offset.uncertainty().as_secs_f64() * 1000.0;
    let reading = format!("clock {off_ms:+.1} ms (± {within_ms:.1} ms) from the others");
    let bound_ms = MAX_CLOCK_OFFSET.as_millis();
    let (severity, message) = if offset.magnitude().saturating_sub(offset.uncertainty())
        > MAX_CLOCK_OFFSET
    {
        let message =
            format!("{reading}, past the {bound_ms} ms fencing tokens assume: fix its time source");
        (Severity::Error, message)
    } else if offset.magnitude() + offset.uncertainty() > MAX_CLOCK_OFFSET {
        let message = format!(
            "{reading}: may be past the {bound_ms} ms fencing tokens assume; the reading \
             was too slow to tell, run the doctor again"
        );
        (Severity::Warning, message)
    } else {
        (Severity::Notice, reading)
    };
    Finding {
        check: "clock",
        severity,
        message,
    }
}

/// The same server (one run id) behind two rows: the quorum is an
/// illusion.
fn flag_duplicates(rows: &mut [InstanceReport], run_ids: &HashMap<String, Vec<usize>>) {
    for same in run_ids.values().filter(|rows| rows.len() > 1) {
        let names: Vec<String> = same.iter().map(|&i| rows[i].instance.clone()).collect();
        for &i in same {
            rows[i].findings.push(Finding {
                check: "independence",
                severity: Severity::Error,
                message: format!(
                    "the same server as {}: one server counted twice makes the quorum an \
                     illusion",
                    names
                        .iter()
                        .filter(|n| **n != rows[i].instance)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any INFO text parses, and the checks read it: never a panic.
        #[test]
        fn any_info_text_parses(text in "[ -~\\r\\n:]{0,200}") {
            let info = Info::parse(&text);
            let _ = (role_findings(&info), eviction_findings(&info), persistence_findings(&info));
        }
    }

    #[test]
    fn info_fields_give_each_finding() {
        let info = Info::parse(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n# Replication\r\nrole:master\r\n\
             connected_slaves:1\r\n# Memory\r\nmaxmemory:1000\r\nmaxmemory_policy:allkeys-lru\r\n\
             # Persistence\r\naof_enabled:0\r\n",
        );
        assert_eq!(info.server().as_deref(), Some("redis 7.0.15"));
        assert_eq!(role_findings(&info).unwrap().severity, Severity::Warning);
        assert_eq!(eviction_findings(&info).unwrap().severity, Severity::Error);
        assert_eq!(
            persistence_findings(&info).unwrap().severity,
            Severity::Notice
        );
        let quiet = Info::parse("maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\nrole:master\r\n");
        assert!(eviction_findings(&quiet).is_none());
        assert!(role_findings(&quiet).is_none());
        let replica = Info::parse("role:slave\r\n");
        assert_eq!(role_findings(&replica).unwrap().severity, Severity::Error);
        let far = clock_finding(ClockOffset::from_micros(2_000_000));
        assert_eq!(far.severity, Severity::Error);
        assert_eq!(
            clock_finding(ClockOffset::from_micros(300)).severity,
            Severity::Notice
        );
        let unsure = ClockOffset::from_micros(900_000).with_uncertainty(Duration::from_millis(200));
        assert_eq!(clock_finding(unsure).severity, Severity::Warning);
        let sure = ClockOffset::from_micros(1_500_000).with_uncertainty(Duration::from_millis(200));
        assert_eq!(clock_finding(sure).severity, Severity::Error);
        assert!(clock_finding(sure).message.contains("± 200.0 ms"));
    }
}
