//! What `tests/telemetry.rs` observes through: a real `metrics` recorder
//! (metrics-util's debugging recorder) and a real `tracing` subscriber,
//! both installed process-wide, and the turns the tests take at them.
#![cfg(any(feature = "metrics", feature = "tracing"))]

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use redfence::testing::RedisServers;
use redfence::Redlock;

use super::builder;

/// The recorder and the subscriber are global: the tests take turns, and
/// each one looks only at what happened during its turn.
pub fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        #[cfg(feature = "metrics")]
        recorded::install();
        #[cfg(feature = "tracing")]
        captured::install();
    });
    let guard = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // Forget what earlier turns recorded.
    #[cfg(feature = "metrics")]
    recorded::take();
    #[cfg(feature = "tracing")]
    captured::take();
    guard
}

/// A client whose timeouts leave room for a loaded machine, so that only
/// the faults a test makes show up as instance errors.
pub fn patient(cluster: &RedisServers) -> Redlock {
    builder(cluster)
        .instance_timeout(Duration::from_millis(1000))
        .build()
        .expect("client builds")
}

/// How the telemetry names instance `i` of the cluster.
pub fn instance_name(cluster: &RedisServers, i: usize) -> String {
    format!("127.0.0.1:{}/0", cluster.server(i).port())
}

#[cfg(feature = "metrics")]
pub mod recorded {
    //! What the debugging recorder saw since the last look.

    use std::sync::OnceLock;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();

    pub fn install() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        let _ = SNAPSHOTTER.set(snapshotter);
    }

    /// One series' change since the last `take`: a counter's increase, a
    /// gauge's change (the recorder resets both when read), or the number
    /// of values a histogram received.
    #[derive(Debug)]
    pub struct Sample {
        pub name: String,
        pub labels: Vec<(String, String)>,
        pub value: f64,
    }

    /// The installed recorder's snapshotter (see `turn`).
    pub fn snapshotter() -> &'static Snapshotter {
        SNAPSHOTTER.get().expect("recorder installed")
    }

    pub fn take() -> Vec<Sample> {
        let snapshotter = snapshotter();
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| Sample {
                name: key.key().name().to_string(),
                labels: key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect(),
                value: match value {
                    DebugValue::Counter(n) => n as f64,
                    DebugValue::Gauge(g) => g.into_inner(),
                    DebugValue::Histogram(values) => values.len() as f64,
                },
            })
            // Series untouched since the last look read as zero.
            .filter(|s| s.value != 0.0)
            .collect()
    }

    /// Sum over the series of `name` that carry all of `labels`.
    pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
        samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// The histogram values of `name` (seconds) are checked through
    /// counts only; their label sets must never include the resource.
    pub fn assert_no_resource_label(samples: &[Sample], resource: &str) {
        for s in samples {
            assert!(
                s.labels.iter().all(|(_, v)| !v.contains(resource)),
                "resource name in the labels of {s:?}"
            );
        }
    }
}

#[cfg(feature = "tracing")]
pub mod captured {
    //! A subscriber layer that keeps every event and every closed span.

    use std::collections::BTreeMap;
    use std::fmt;
    use std::sync::Mutex;

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record as SpanValues};
    use tracing::{Event, Level, Subscriber};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    #[derive(Debug, Clone)]
    pub enum Record {
        Event {
            level: Level,
            target: String,
            fields: BTreeMap<String, String>,
            /// Names of the enclosing spans, outermost first.
            spans: Vec<String>,
        },
        SpanClosed {
            name: String,
            fields: BTreeMap<String, String>,
        },
    }

    impl Record {
        pub fn message(&self) -> &str {
            match self {
                Record::Event { fields, .. } => {
                    fields.get("message").map(String::as_str).unwrap_or("")
                }
                Record::SpanClosed { .. } => "",
            }
        }

        pub fn field(&self, name: &str) -> Option<&str> {
            match self {
                Record::Event { fields, .. } | Record::SpanClosed { fields, .. } => {
                    fields.get(name).map(String::as_str)
                }
            }
        }
    }

    static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

    #[derive(Default)]
    struct Fields(BTreeMap<String, String>);

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_string(), value.to_string());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0
                .insert(field.name().to_string(), format!("{value:?}"));
        }
    }

    struct Capture;

    impl<S> Layer<S> for Capture
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(fields);
            }
        }

        fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
            if let Some(span) = ctx.span(id) {
                if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                    values.record(fields);
                }
            }
        }

        fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let spans = ctx
                .event_scope(event)
                .map(|scope| scope.from_root().map(|s| s.name().to_string()).collect())
                .unwrap_or_default();
            lock().push(Record::Event {
                level: *event.metadata().level(),
                target: event.metadata().target().to_string(),
                fields: fields.0,
                spans,
            });
        }

        fn on_close(&self, id: Id, ctx: Context<'_, S>) {
            if let Some(span) = ctx.span(&id) {
                let fields = span
                    .extensions()
                    .get::<Fields>()
                    .map(|f| f.0.clone())
                    .unwrap_or_default();
                lock().push(Record::SpanClosed {
                    name: span.name().to_string(),
                    fields,
                });
            }
        }
    }

    fn lock() -> std::sync::MutexGuard<'static, Vec<Record>> {
        RECORDS.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn install() {
        let subscriber = tracing_subscriber::registry().with(Capture);
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    }

    /// Everything recorded since the last `take`.
    pub fn take() -> Vec<Record> {
        std::mem::take(&mut *lock())
    }

    /// Events at `level` with this message.
    pub fn events<'a>(records: &'a [Record], level: Level, message: &str) -> Vec<&'a Record> {
        records
            .iter()
            .filter(|r| matches!(r, Record::Event { level: l, .. } if *l == level))
            .filter(|r| r.message() == message)
            .collect()
    }

    /// The closed `lock` spans of `resource`.
    pub fn lock_spans<'a>(records: &'a [Record], resource: &str) -> Vec<&'a Record> {
        records
            .iter()
            .filter(|r| matches!(r, Record::SpanClosed { name, .. } if name == "lock"))
            .filter(|r| r.field("resource") == Some(resource))
            .collect()
    }

    /// No record mentions `secret` anywhere.
    pub fn assert_never_mentioned(records: &[Record], secret: &str) {
        for r in records {
            assert!(!format!("{r:?}").contains(secret), "{secret:?} in {r:?}");
        }
    }
}
