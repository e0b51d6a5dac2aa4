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

mod permissions;

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
    /// What was checked: `reachable`, `credentials`, `role`,
    /// `independence`, `eviction`, `persistence`, `clock`, `permissions`,
    /// `info`, `cluster`, `native`.
    pub check: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// What was found and what to do; never a password or a lock value.
    pub message: String,
}

/// The doctor's verdict on one server: whether locks can count on it,
/// and if not, the first reason (in this order). See [`Redlock::doctor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Every precondition the doctor can see holds (notices and warnings
    /// aside).
    Usable,
    /// Usable, but a restart loses lock keys and counters (no append-only
    /// file): restart it only after the longest TTL, or enable AOF. A
    /// warning.
    Persistence,
    /// No answer (refused connection, timeout, reset): an outage, not a
    /// configuration error.
    Unreachable,
    /// The server refused the client's credentials (wrong user name or
    /// password, a disabled user, no password where one is required) or
    /// the TLS handshake failed.
    RefusedCredentials,
    /// The ACL user may not run commands, or touch keys or channels, that
    /// the client needs: the missing rules, as in
    /// [`acl_rules`](crate::acl_rules) (`+zadd`, `~redfence:*`,
    /// `&redfence:released:*`).
    MissingPermissions {
        /// The missing rules, each once.
        rules: Vec<String>,
    },
    /// A replica: locks must be taken on masters.
    WrongRole,
    /// The same server as another row: the quorum is an illusion.
    SameServer,
    /// An eviction policy may evict lock keys and fence counters.
    Eviction,
    /// Its clock is further off the others than
    /// [`MAX_CLOCK_OFFSET`].
    Clock,
    /// A cluster shard whose cluster is not `ok` or leaves slots unserved.
    Cluster,
}

impl Verdict {
    /// Whether locks can count on it: [`Usable`](Verdict::Usable) or
    /// [`Persistence`](Verdict::Persistence).
    pub fn is_usable(&self) -> bool {
        matches!(self, Verdict::Usable | Verdict::Persistence)
    }

    /// Unusable for a configuration reason (everything but usable and
    /// unreachable).
    pub fn is_misconfigured(&self) -> bool {
        !self.is_usable() && *self != Verdict::Unreachable
    }

    /// Its name in `redfence doctor --json`: `usable`, `persistence`,
    /// `unreachable`, `refused-credentials`, `missing-permissions`,
    /// `wrong-role`, `same-server`, `eviction`, `clock`, `cluster`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Usable => "usable",
            Verdict::Persistence => "persistence",
            Verdict::Unreachable => "unreachable",
            Verdict::RefusedCredentials => "refused-credentials",
            Verdict::MissingPermissions { .. } => "missing-permissions",
            Verdict::WrongRole => "wrong-role",
            Verdict::SameServer => "same-server",
            Verdict::Eviction => "eviction",
            Verdict::Clock => "clock",
            Verdict::Cluster => "cluster",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::MissingPermissions { rules } => {
                write!(f, "missing permissions ({})", rules.join(" "))
            }
            other => f.write_str(&other.name().replace('-', " ")),
        }
    }
}

/// What the doctor found on one server (each shard master of a cluster
/// position is a row of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceReport {
    /// The server, as `host:port/db` (a cluster shard: `cluster #i shard
    /// host:port`).
    pub instance: String,
    /// Its position among the instances the client was given (a cluster
    /// position's shards share one).
    pub position: usize,
    /// Whether it answered, if only to refuse the credentials.
    pub reachable: bool,
    /// Its server and version (`redis 7.0.15`, `valkey 9.1.2`), if known.
    pub server: Option<String>,
    /// Whether locks can count on it, and if not, why.
    pub verdict: Verdict,
    /// What was found, most severe first.
    pub findings: Vec<Finding>,
}

/// The doctor's report: see [`Redlock::doctor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorReport {
    /// Instances that must agree.
    pub quorum: usize,
    /// Positions that answered `PING` under the client's credentials, as
    /// [`Redlock::ping`] and `redfence ping` count them.
    pub answered: usize,
    /// Positions that answered at all (a refusal of the credentials is an
    /// answer).
    pub reachable: usize,
    /// Positions whose every server is usable ([`Verdict::is_usable`]).
    pub usable: usize,
    /// How many more positions can fail before no quorum is left
    /// (`usable − quorum`); `None` when fewer than a quorum are usable.
    pub margin: Option<usize>,
    /// One row per server.
    pub instances: Vec<InstanceReport>,
}

impl DoctorReport {
    /// Whether a quorum of positions answered.
    pub fn quorum_answered(&self) -> bool {
        self.answered >= self.quorum
    }

    /// Whether fewer than a quorum of positions could be reached at all:
    /// an outage (`redfence doctor` exits 69), whatever else is wrong.
    pub fn is_outage(&self) -> bool {
        self.reachable < self.quorum
    }

    /// Whether every precondition the doctor can see holds on every
    /// instance that answered (notices and warnings allowed: an
    /// unreachable minority is a warning) and a quorum is usable.
    pub fn is_healthy(&self) -> bool {
        self.margin.is_some() && self.worst() < Some(Severity::Error)
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
    /// against the preconditions of the guarantees, and gives each one a
    /// [`Verdict`], with what was found ([`Finding`]s, most severe first).
    ///
    /// - **unreachable**: no answer (a warning: an outage, not a
    ///   configuration error).
    /// - **refused credentials**: the server refused the user name and
    ///   password (or the TLS handshake failed).
    /// - **missing permissions**: the ACL user may not run a command, or
    ///   touch a key or channel, that the client sends; the finding names
    ///   each missing [`acl_rules`](crate::acl_rules) entry and what it is
    ///   needed for. Each command of [`ACL_COMMANDS`](crate::ACL_COMMANDS)
    ///   is probed on the instance under the client's user, on keys of
    ///   the resource `redfence-doctor` (each kind the scripts touch), so
    ///   every primitive is covered: locks, sets, semaphores,
    ///   reader-writer locks, elections, holder reads. Redis checks a
    ///   script's calls with the same rules as direct commands, so this
    ///   covers every path of every script. The subscriber's commands
    ///   (`subscribe`, `unsubscribe`, `punsubscribe`) are not probed, nor
    ///   key patterns on cluster shards (a probe lock taken, extended and
    ///   released there answers for them).
    /// - **wrong role**: a replica (a master with replicas is a warning).
    /// - **same server**: one server behind two positions.
    /// - **eviction**: a `maxmemory` with a policy other than `noeviction`.
    /// - **clock**: further off the others than [`MAX_CLOCK_OFFSET`] (read
    ///   in a fresh round, judged with its uncertainty).
    /// - **cluster**: a shard whose cluster is not `ok` or leaves slots
    ///   unserved.
    /// - **persistence**: usable, but no append-only file, so a restart
    ///   loses lock keys and counters and a second holder can get a lock
    ///   the first still holds: a warning that says the rule (restart it
    ///   only after the longest TTL, or enable AOF).
    /// - **usable**: none of the above.
    ///
    /// The report counts the positions that [`answered`](DoctorReport::answered)
    /// (as [`ping`](Self::ping) does), were
    /// [`reachable`](DoctorReport::reachable) and are
    /// [`usable`](DoctorReport::usable), and states the
    /// [`margin`](DoctorReport::margin): how many more positions can fail
    /// before no quorum is left. [`DoctorReport::is_healthy`] holds when no
    /// instance is unusable for a configuration reason and a quorum is
    /// usable; `redfence doctor` exits 69 on an outage
    /// ([`DoctorReport::is_outage`]), else 78 when any instance is
    /// misconfigured, whatever the count, else 0.
    ///
    /// Role, eviction, persistence and independence are read from `INFO`;
    /// a user without `+info` (as [`acl_rules`](crate::acl_rules) has it)
    /// gets a notice saying which checks it could not make. Run it at
    /// start-up, or with `redfence doctor`.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let report = locks.doctor();
    /// for row in &report.instances {
    ///     println!("{}: {}", row.instance, row.verdict);
    ///     for finding in &row.findings {
    ///         println!("  {} {}: {}", finding.severity, finding.check, finding.message);
    ///     }
    /// }
    /// match report.margin {
    ///     Some(n) => println!("{n} more position(s) can fail before no quorum is left"),
    ///     None => println!("no quorum is left"),
    /// }
    /// assert!(report.is_healthy(), "fix the deployment first");
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn doctor(&self) -> DoctorReport {
        let rules = permissions::Rules::of(&self.shared().cfg.prefix);
        let (mut rows, pinged) = self.examine_each_server(&rules);
        self.check_keys(&mut rows, &rules);
        self.check_clocks(&mut rows);
        self.check_permissions(&mut rows, &rules);
        for row in &mut rows {
            row.findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
            row.verdict = verdict_of(row);
        }
        self.report(rows, &pinged)
    }

    /// The report of these rows: the positions that answered (every
    /// server's `PING`, `pinged` by row), were reachable and are usable.
    fn report(&self, rows: Vec<InstanceReport>, pinged: &[bool]) -> DoctorReport {
        let positions = self.instance_count();
        let all = |p: usize, each: &dyn Fn(usize, &InstanceReport) -> bool| {
            rows.iter()
                .enumerate()
                .filter(|(_, r)| r.position == p)
                .all(|(i, r)| each(i, r))
        };
        let count = |each: &dyn Fn(usize, &InstanceReport) -> bool| {
            (0..positions).filter(|&p| all(p, each)).count()
        };
        let answered = count(&|i, _| pinged.get(i).copied().unwrap_or(false));
        let reachable = count(&|_, r| r.reachable);
        let usable = count(&|_, r| r.verdict.is_usable());
        let quorum = self.quorum();
        DoctorReport {
            quorum,
            answered,
            reachable,
            usable,
            margin: usable.checked_sub(quorum),
            instances: rows,
        }
    }

    /// One round to every server: `PING` (who answers, as
    /// [`ping`](Self::ping) counts), `INFO`, `CLUSTER INFO`, `CONFIG GET
    /// save` and the key-less permission probes; a row per server, and
    /// whether its `PING` was answered.
    fn examine_each_server(&self, rules: &permissions::Rules) -> (Vec<InstanceReport>, Vec<bool>) {
        let mut pipe = redis::pipe();
        pipe.cmd("PING");
        pipe.cmd("INFO")
            .arg("server")
            .arg("replication")
            .arg("memory")
            .arg("persistence");
        // Answered with an error by a standalone server; read on shards.
        pipe.cmd("CLUSTER").arg("INFO");
        // Refused to the least privilege: persistence is then judged
        // without the snapshot schedule.
        pipe.cmd("CONFIG").arg("GET").arg("save");
        let mut packed = pipe.get_packed_pipeline();
        let keyless = permissions::keyless();
        packed.extend(permissions::packed(&keyless));
        let answers = self.ask_each_server(packed.into(), PROBES + keyless.len());
        let instances = &self.shared().instances;
        let mut rows: Vec<InstanceReport> = Vec::with_capacity(answers.len());
        let mut pinged = Vec::with_capacity(answers.len());
        let mut run_ids: HashMap<String, Vec<usize>> = HashMap::new();
        for (position, name, answer, _) in answers {
            let shard = instances.voter(position).is_some_and(|v| v.is_cluster());
            let seen = examine(
                InstanceReport::new(name, position),
                answer,
                shard,
                &keyless,
                rules,
            );
            let mut row = seen.row;
            if row.reachable && !shard {
                let commands = self.shared().instances.native_commands(position);
                row.findings.extend(commands.map(native_finding));
            }
            if let Some(run_id) = seen.run_id {
                run_ids.entry(run_id).or_default().push(rows.len());
            }
            rows.push(row);
            pinged.push(seen.pinged);
        }
        flag_duplicates(&mut rows, &run_ids);
        (rows, pinged)
    }

    /// The permission probes on keys and the release channel, on each
    /// standalone instance that accepted the credentials.
    fn check_keys(&self, rows: &mut [InstanceReport], rules: &permissions::Rules) {
        let probes = permissions::on_keys(&self.shared().cfg.prefix, PROBE_RESOURCE);
        let packed = permissions::packed(&probes);
        for (position, replies) in self.ask_standalone(packed.into(), probes.len()) {
            let Ok(values) = replies else { continue };
            let missing = permissions::refusals(&probes, &values, rules);
            for row in rows.iter_mut().filter(|r| r.position == position) {
                add_missing(row, &missing);
            }
        }
    }

    /// An instance further off the others than the bound the tokens
    /// assume is an error.
    fn check_clocks(&self, rows: &mut [InstanceReport]) {
        for (position, offset) in self.clock_offsets().into_iter().enumerate() {
            let Some(offset) = offset.1 else { continue };
            let finding = clock_finding(offset);
            for row in rows.iter_mut().filter(|r| r.position == position) {
                row.findings.push(finding.clone());
            }
        }
    }

    /// A probe lock, extended and released: a lock's life end to end (on
    /// cluster positions, the key permissions the probes leave out). A
    /// refusal is recorded on an instance the probes found nothing
    /// wrong with.
    fn check_permissions(&self, rows: &mut [InstanceReport], rules: &permissions::Rules) {
        let probe = LockOptions::new()
            .ttl(Duration::from_secs(5))
            .wait(Duration::ZERO)
            .auto_extend(false);
        let result = self.lock_with(PROBE_RESOURCE, probe).and_then(|guard| {
            guard.extend(Duration::from_secs(5))?;
            guard.release()
        });
        let refusals: Vec<InstanceError> = match result {
            Err(Error::AccessDenied { errors, .. }) | Err(Error::Unavailable { errors, .. }) => {
                errors
            }
            _ => Vec::new(),
        };
        for e in refusals
            .iter()
            .filter(|e| e.kind() == crate::InstanceErrorKind::Auth)
        {
            let Some(missing) = permissions::refusal(e.detail(), None, None, rules) else {
                continue;
            };
            for row in rows
                .iter_mut()
                .filter(|r| r.instance.starts_with(e.instance()) && r.verdict == Verdict::Usable)
            {
                add_missing(row, std::slice::from_ref(&missing));
            }
        }
    }
}

/// The resource the doctor's probe lock is taken on.
pub(crate) const PROBE_RESOURCE: &str = "redfence-doctor";

/// Where the first round's replies are: `PING`, `INFO`, `CLUSTER INFO`,
/// `CONFIG GET save`, then the key-less probes.
const PING: usize = 0;
const INFO: usize = 1;
const CLUSTER_INFO: usize = 2;
const CONFIG_SAVE: usize = 3;
const PROBES: usize = 4;

impl InstanceReport {
    fn new(instance: String, position: usize) -> InstanceReport {
        InstanceReport {
            instance,
            position,
            reachable: false,
            server: None,
            verdict: Verdict::Usable,
            findings: Vec::new(),
        }
    }
}

/// One server's row from the first round, its run id, and whether it
/// answered `PING`.
struct Examined {
    row: InstanceReport,
    run_id: Option<String>,
    pinged: bool,
}

fn examine(
    mut row: InstanceReport,
    answer: Result<Vec<Value>, InstanceError>,
    shard: bool,
    keyless: &[permissions::Probe],
    rules: &permissions::Rules,
) -> Examined {
    let values = match answer {
        Ok(values) => values,
        Err(e) => {
            refused_or_unreachable(&mut row, &e, rules);
            return Examined {
                row,
                run_id: None,
                pinged: false,
            };
        }
    };
    row.reachable = true;
    let pinged = matches!(values.get(PING), Some(Value::SimpleString(s)) if s == "PONG");
    let probed = values.get(PROBES..).unwrap_or_default();
    add_missing(&mut row, &permissions::refusals(keyless, probed, rules));
    let run_id = read_info(&mut row, &values, shard);
    Examined {
        row,
        run_id,
        pinged,
    }
}

/// A server that gave no replies: it refused the credentials (or a
/// command of the connection's set-up), failed the TLS handshake, or did
/// not answer.
fn refused_or_unreachable(row: &mut InstanceReport, e: &InstanceError, rules: &permissions::Rules) {
    use crate::InstanceErrorKind as K;
    match e.kind() {
        K::Auth | K::Tls => {
            row.reachable = true;
            if let Some(missing) = permissions::refusal(e.detail(), None, None, rules) {
                add_missing(row, &[missing]);
                return;
            }
            row.verdict = Verdict::RefusedCredentials;
            row.findings.push(Finding {
                check: "credentials",
                severity: Severity::Error,
                message: format!(
                    "{}: locks cannot count on it; fix the user name and password in the URL (or \
                     the certificates)",
                    e.detail()
                ),
            });
        }
        kind => {
            row.verdict = Verdict::Unreachable;
            row.findings.push(Finding {
                check: "reachable",
                severity: Severity::Warning,
                message: format!(
                    "{kind:?}: {}: an outage, not a configuration error; the margin counts it out",
                    e.detail()
                ),
            });
        }
    }
}

/// Records the rules an instance is missing, each once (the verdict
/// lists them; one finding per new batch says what they are for).
fn add_missing(row: &mut InstanceReport, missing: &[permissions::Missing]) {
    let mut known = match std::mem::replace(&mut row.verdict, Verdict::Usable) {
        Verdict::MissingPermissions { rules } => rules,
        other => {
            row.verdict = other;
            Vec::new()
        }
    };
    let new: Vec<&permissions::Missing> = missing
        .iter()
        .filter(|m| !known.contains(&m.rule))
        .collect();
    if !new.is_empty() {
        let listed: Vec<String> = new
            .iter()
            .map(|m| format!("{} ({})", m.rule, m.what))
            .collect();
        row.findings.push(Finding {
            check: "permissions",
            severity: Severity::Error,
            message: format!(
                "the ACL user is missing {}: add {} to the user (see redfence::acl_rules)",
                listed.join("; "),
                if new.len() == 1 { "it" } else { "them" }
            ),
        });
        known.extend(new.iter().map(|m| m.rule.clone()));
    }
    if !known.is_empty() && row.verdict == Verdict::Usable {
        row.verdict = Verdict::MissingPermissions { rules: known };
    }
}

/// What `INFO` (and `CONFIG GET save`, `CLUSTER INFO`) say of the server;
/// its run id.
fn read_info(row: &mut InstanceReport, values: &[Value], shard: bool) -> Option<String> {
    let text = match values.get(INFO) {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::VerbatimString { text, .. }) => text.clone(),
        Some(Value::ServerError(e)) => {
            row.findings.push(Finding {
                check: "info",
                severity: Severity::Notice,
                message: format!(
                    "INFO is not allowed for this user ({} {}): role, eviction, persistence and \
                     independence were not checked; run the doctor as a user with +info",
                    e.code(),
                    e.details().unwrap_or_default()
                ),
            });
            return None;
        }
        _ => String::new(),
    };
    let info = Info::parse(&text);
    row.server = info.server();
    row.findings.extend(role_findings(&info));
    row.findings.extend(eviction_findings(&info));
    let save = values.get(CONFIG_SAVE).and_then(config_value);
    row.findings
        .extend(persistence_findings(&info, save.as_deref()));
    if shard {
        row.findings
            .extend(values.get(CLUSTER_INFO).and_then(cluster_findings));
    }
    info.get("run_id").map(str::to_string)
}

/// The value of a `CONFIG GET` of one parameter (a RESP2 pair or a RESP3
/// map); `None` when refused.
fn config_value(reply: &Value) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

/// The verdict of a row: a refusal or an outage found first, else the
/// first error in the order of [`Verdict`], else a persistence warning.
fn verdict_of(row: &InstanceReport) -> Verdict {
    if row.verdict != Verdict::Usable {
        return row.verdict.clone();
    }
    let has = |check: &str, severity: Severity| {
        row.findings
            .iter()
            .any(|f| f.check == check && f.severity == severity)
    };
    let errors = [
        ("role", Verdict::WrongRole),
        ("independence", Verdict::SameServer),
        ("eviction", Verdict::Eviction),
        ("clock", Verdict::Clock),
        ("cluster", Verdict::Cluster),
    ];
    for (check, verdict) in errors {
        if has(check, Severity::Error) {
            return verdict;
        }
    }
    if has("persistence", Severity::Warning) {
        return Verdict::Persistence;
    }
    Verdict::Usable
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

/// What a restart costs: with no append-only file, a restart loses the
/// lock keys and counters (all of them with snapshots off), and a second
/// holder can get a lock the first still holds: a warning with the rule.
/// `save` is the snapshot schedule, if `CONFIG GET` was allowed.
fn persistence_findings(info: &Info, save: Option<&str>) -> Option<Finding> {
    const RULE: &str = "restart it only after the longest TTL in use has passed since it went \
                        down, or enable the append-only file (appendonly yes, appendfsync \
                        always; docs/protocol.md)";
    let (severity, message) = match (info.get("aof_enabled")?, save) {
        ("1", _) => (
            Severity::Notice,
            "append-only file on: a restart keeps what it wrote (with appendfsync always, \
             every write; see docs/protocol.md for the other modes)"
                .to_string(),
        ),
        (_, Some("")) => (
            Severity::Warning,
            format!(
                "no persistence (no append-only file, snapshots off): a restart comes back \
                 empty, and a second holder can get a lock the first still holds; {RULE}"
            ),
        ),
        (_, Some(schedule)) => (
            Severity::Warning,
            format!(
                "snapshots only (save {schedule}), no append-only file: a restart loses the \
                 lock keys and counters written since the last snapshot, and a second holder \
                 can get a lock the first still holds; {RULE}"
            ),
        ),
        (_, None) => (
            Severity::Warning,
            format!(
                "no append-only file (the snapshot schedule was not readable: CONFIG GET \
                 refused): a restart loses the lock keys and counters written since the last \
                 snapshot, or all of them with snapshots off, and a second holder can get a \
                 lock the first still holds; {RULE}"
            ),
        ),
    };
    Some(Finding {
        check: "persistence",
        severity,
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
            let _ = (role_findings(&info), eviction_findings(&info), persistence_findings(&info, None));
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
        let unknown = persistence_findings(&info, None).unwrap();
        assert_eq!(unknown.severity, Severity::Warning);
        assert!(unknown.message.contains("longest TTL"), "{unknown:?}");
        let off = persistence_findings(&info, Some("")).unwrap();
        assert!(off.message.contains("snapshots off"), "{off:?}");
        assert!(!off.message.contains("last snapshot"), "{off:?}");
        let aof = Info::parse("aof_enabled:1\r\n");
        assert_eq!(
            persistence_findings(&aof, Some("")).unwrap().severity,
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
