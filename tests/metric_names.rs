//! The alert rules (contrib/prometheus/alerts.yml), their unit tests
//! (alerts_test.yml) and the Grafana dashboard (contrib/grafana/redfence.json)
//! name only series the library emits, as Prometheus stores them.
//!
//! What is emitted is read from the code, not from a list kept here: a
//! recorder installed process-wide takes the names and kinds from
//! `redfence::describe_metrics()`, and the label names and values from the
//! series a client registers against real servers (at build, by `ping()`, an
//! election and a semaphore permit). Every `redfence_…` identifier in the
//! three files must then be a counter or gauge by its name, or a histogram's
//! `_bucket`, `_sum` or `_count`; every label matcher must use a label the
//! series has (or `job`, `instance` and, for `_bucket`, `le`; the exporter's
//! `instance` label is matched as `exported_instance`, the name Prometheus
//! stores it under), and an `outcome`, `reason`, `kind` or `change` value
//! must be one the code emits. Renaming a metric or a label value in
//! src/telemetry.rs without the files fails here; so does a typo in the
//! files. `a_planted_rename_is_caught` shows the check failing.
//!
//! Run with `cargo test --features metrics --test metric_names` (without
//! the feature the file is empty).
#![cfg(feature = "metrics")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use redfence::testing::RedisServers;
use redfence::Redlock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Labels whose values depend on the deployment (an instance's address,
/// an election's or a semaphore's name): any value is allowed. Every other
/// label's values are the closed set the code registers.
const OPEN_LABELS: [&str; 3] = ["instance", "election", "semaphore"];

/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// What the library emits: each metric's kind, and each label's values.
#[derive(Debug, Default)]
struct Catalog {
    kinds: BTreeMap<String, Kind>,
    labels: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Names registered without a description.
    undescribed: BTreeSet<String>,
}

/// A recorder that keeps descriptions and registrations, and records
/// nothing.
#[derive(Default)]
struct Collector {
    described: Mutex<BTreeMap<String, Kind>>,
    registered: Mutex<BTreeMap<String, BTreeMap<String, BTreeSet<String>>>>,
}

impl Collector {
    fn describe(&self, name: KeyName, kind: Kind) {
        self.described
            .lock()
            .unwrap()
            .insert(name.as_str().to_string(), kind);
    }

    fn register(&self, key: &Key) {
        let mut registered = self.registered.lock().unwrap();
        let labels = registered.entry(key.name().to_string()).or_default();
        for label in key.labels() {
            labels
                .entry(label.key().to_string())
                .or_default()
                .insert(label.value().to_string());
        }
    }
}

impl Recorder for &'static Collector {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.describe(key, Kind::Counter);
    }
    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.describe(key, Kind::Gauge);
    }
    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.describe(key, Kind::Histogram);
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.register(key);
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.register(key);
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.register(key);
        Histogram::noop()
    }
}

/// The catalog, read once per test binary: descriptions first, then the
/// series a client registers on three real servers.
fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let collector: &'static Collector = Box::leak(Box::default());
        metrics::set_global_recorder(collector).expect("no other recorder in this binary");
        redfence::describe_metrics();
        let kinds = collector.described.lock().unwrap().clone();
        assert!(!kinds.is_empty(), "describe_metrics() described nothing");

        let cluster = RedisServers::start(3);
        let locks = Redlock::new(cluster.urls()).expect("client builds");
        for (instance, answer) in locks.ping() {
            answer.unwrap_or_else(|e| panic!("{instance} did not answer: {e}"));
        }
        let _election = locks.election("metric-names").expect("election");
        let permit = locks
            .semaphore("metric-names", 2)
            .try_acquire()
            .expect("a permit");
        permit.release().expect("released");
        drop(locks);

        let labels = collector.registered.lock().unwrap().clone();
        let undescribed = labels
            .keys()
            .filter(|name| !kinds.contains_key(*name))
            .cloned()
            .collect();
        Catalog {
            kinds,
            labels,
            undescribed,
        }
    })
}

/// One series selector found in a file: the name as written and its label
/// matchers (label, operator, value).
#[derive(Debug)]
struct Selector {
    name: String,
    matchers: Vec<(String, String, String)>,
}

/// Every `redfence_…` identifier in `text`, with the `{…}` matchers that
/// follow it, if any. `\"` is read as `"` (JSON strings, YAML double-quoted
/// scalars).
fn selectors(text: &str) -> Vec<Selector> {
    let text = text.replace("\\\"", "\"");
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("redfence_").map(|i| from + i) {
        from = at + 1;
        if at > 0 && ident(bytes[at - 1]) {
            continue;
        }
        let end = (at..bytes.len())
            .find(|&i| !ident(bytes[i]))
            .unwrap_or(bytes.len());
        let name = text[at..end].to_string();
        let rest = text[end..].trim_start();
        let matchers = if rest.starts_with('{') {
            let close = rest.find('}').unwrap_or(rest.len());
            parse_matchers(&rest[1..close])
        } else {
            Vec::new()
        };
        found.push(Selector { name, matchers });
        from = end;
    }
    found
}

/// `a="x", b=~"y|z"` as (label, operator, value) triples.
fn parse_matchers(inside: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = inside.trim();
    while !rest.is_empty() {
        let Some(op_at) = rest.find(['=', '!']) else {
            break;
        };
        let label = rest[..op_at].trim().to_string();
        let after = &rest[op_at..];
        let op_len =
            if after.starts_with("=~") || after.starts_with("!=") || after.starts_with("!~") {
                2
            } else {
                1
            };
        let op = after[..op_len].to_string();
        let after = after[op_len..].trim_start();
        let Some(quoted) = after.strip_prefix('"') else {
            break;
        };
        let close = quoted.find('"').unwrap_or(quoted.len());
        out.push((label, op, quoted[..close].to_string()));
        rest = quoted[(close + 1).min(quoted.len())..]
            .trim_start()
            .trim_start_matches(',')
            .trim_start();
    }
    out
}

/// The metric a name as Prometheus stores it belongs to, and whether it is
/// a histogram's `_bucket` series.
fn resolve<'c>(catalog: &'c Catalog, name: &str) -> Result<(&'c str, bool), String> {
    if let Some((metric, kind)) = catalog.kinds.get_key_value(name) {
        return match kind {
            Kind::Histogram => Err(format!(
                "{name} is a histogram: Prometheus stores {name}_bucket, {name}_sum and {name}_count"
            )),
            _ => Ok((metric.as_str(), false)),
        };
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some((metric, Kind::Histogram)) = catalog.kinds.get_key_value(base) {
                return Ok((metric.as_str(), suffix == "_bucket"));
            }
        }
    }
    Err(format!("{name} is not a metric redfence emits"))
}

/// Every problem with the metric names and label matchers in `text`.
fn problems(catalog: &Catalog, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for selector in selectors(text) {
        let (metric, bucket) = match resolve(catalog, &selector.name) {
            Ok(found) => found,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let emitted = catalog.labels.get(metric).cloned().unwrap_or_default();
        for (label, op, value) in &selector.matchers {
            if TARGET_LABELS.contains(&label.as_str()) || (bucket && label == "le") {
                continue;
            }
            // The exporter's `instance` is stored as `exported_instance`.
            let as_emitted = match label.as_str() {
                "exported_instance" => "instance",
                other => other,
            };
            let Some(values) = emitted.get(as_emitted) else {
                problems.push(format!(
                    "{}: no label {label} (it has {:?})",
                    selector.name,
                    emitted.keys().collect::<Vec<_>>()
                ));
                continue;
            };
            if OPEN_LABELS.contains(&as_emitted) {
                continue;
            }
            // A literal, or an alternation of literals: each must be a
            // value the code emits. Other regular expressions are not
            // judged.
            let literals: Vec<&str> = if op.ends_with('~') {
                if !value
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '|')
                {
                    continue;
                }
                value.split('|').collect()
            } else {
                vec![value.as_str()]
            };
            for literal in literals {
                if !values.contains(literal) {
                    problems.push(format!(
                        "{}: {label}=\"{literal}\" is never emitted (values: {values:?})",
                        selector.name
                    ));
                }
            }
        }
    }
    problems
}

fn read(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The queries of a Grafana dashboard, one per line: the panels'
/// `expr`s and the variables' `query` and `definition` (prose such as a
/// panel's description may name a histogram by its own name).
fn dashboard_queries(text: &str) -> String {
    fn walk(value: &serde_json::Value, key: &str, out: &mut String) {
        match value {
            serde_json::Value::String(s) if ["expr", "query", "definition"].contains(&key) => {
                out.push_str(s);
                out.push('\n');
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, key, out)),
            serde_json::Value::Object(fields) => fields.iter().for_each(|(k, v)| walk(v, k, out)),
            _ => {}
        }
    }
    let value: serde_json::Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let mut out = String::new();
    walk(&value, "", &mut out);
    out
}

/// Checks a file: it names at least one metric, and no problem.
fn assert_clean(path: &str, text: &str) {
    let catalog = catalog();
    assert!(
        !selectors(text).is_empty(),
        "{path} names no redfence metric"
    );
    let problems = problems(catalog, text);
    assert!(
        problems.is_empty(),
        "{path} names series redfence does not emit:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_emitted_series_is_described() {
    let catalog = catalog();
    assert!(
        catalog.undescribed.is_empty(),
        "registered without a description in describe_metrics(): {:?}",
        catalog.undescribed
    );
    // Each described metric was registered, so its labels are known.
    let unseen: Vec<_> = catalog
        .kinds
        .keys()
        .filter(|name| !catalog.labels.contains_key(*name))
        .collect();
    assert!(unseen.is_empty(), "never registered here: {unseen:?}");
}

#[test]
fn alert_rules_use_emitted_names() {
    assert_clean(
        "contrib/prometheus/alerts.yml",
        &read("contrib/prometheus/alerts.yml"),
    );
}

#[test]
fn alert_tests_use_emitted_names() {
    assert_clean(
        "contrib/prometheus/alerts_test.yml",
        &read("contrib/prometheus/alerts_test.yml"),
    );
}

#[test]
fn dashboard_uses_emitted_names() {
    assert_clean(
        "contrib/grafana/redfence.json",
        &dashboard_queries(&read("contrib/grafana/redfence.json")),
    );
}

/// The dashboard has a query on every metric, so a new metric gets a
/// panel.
#[test]
fn dashboard_shows_every_metric() {
    let catalog = catalog();
    let text = dashboard_queries(&read("contrib/grafana/redfence.json"));
    let shown: BTreeSet<&str> = selectors(&text)
        .iter()
        .filter_map(|s| resolve(catalog, &s.name).ok().map(|(m, _)| m))
        .collect();
    let missing: Vec<_> = catalog
        .kinds
        .keys()
        .filter(|name| !shown.contains(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "no dashboard query on {missing:?}");
}

/// The check fails on what a rename leaves behind: the rules with one
/// metric renamed (as if the code had renamed it and the rules kept the old
/// name), a histogram named without its suffix, a label value and a label
/// name the code does not emit.
#[test]
fn a_planted_rename_is_caught() {
    let catalog = catalog();
    let rules = read("contrib/prometheus/alerts.yml");
    assert!(rules.contains("redfence_lease_lost_total"));
    let planted = rules.replace("redfence_lease_lost_total", "redfence_leases_lost_total");
    let found = problems(catalog, &planted);
    assert!(
        !found.is_empty()
            && found
                .iter()
                .all(|p| p.starts_with("redfence_leases_lost_total is not a metric")),
        "{found:?}"
    );

    let cases = [
        (
            "histogram_quantile(0.99, rate(redfence_hold_duration_seconds[5m]))",
            "redfence_hold_duration_seconds is a histogram",
        ),
        (
            "rate(redfence_acquire{outcome=\"granted\"}[5m])",
            "redfence_acquire is not a metric",
        ),
        (
            "rate(redfence_acquire_total{outcome=~\"granted|timeout\"}[5m])",
            "outcome=\"timeout\" is never emitted",
        ),
        (
            "redfence_extend_total{outcome=\"contended\"}",
            "outcome=\"contended\" is never emitted",
        ),
        (
            "redfence_lease_lost_total{reason=\"released\"}",
            "reason=\"released\" is never emitted",
        ),
        (
            "redfence_owed_releases{exported_instance=\"a\", kind=\"io\"}",
            "no label kind",
        ),
        (
            "redfence_held_locks{instance=\"app:9000\", exported_instance=\"a\"}",
            "no label exported_instance",
        ),
    ];
    for (text, expected) in cases {
        let found = problems(catalog, text);
        assert!(
            found.len() == 1 && found[0].contains(expected),
            "{text}: {found:?}, expected {expected:?}"
        );
    }
    // And what is right passes.
    for text in [
        "redfence_acquire_duration_seconds_bucket{outcome=\"granted\", le=\"1\", job=\"a\"}",
        "sum by (exported_instance) (redfence_instance_errors_total{kind!~\"overloaded|auth\", instance=\"x\"})",
        "redfence_leader{election=\"anything\"}",
    ] {
        assert_eq!(problems(catalog, text), Vec::<String>::new(), "{text}");
    }
}
