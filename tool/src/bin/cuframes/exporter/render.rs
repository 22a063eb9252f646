//! The metrics text of one scrape, from [`inspect::list`]: what `stat --json` says, in the
//! OpenMetrics text format (what Prometheus asks for first; the classic text parser reads it
//! too).
//!
//! Rates are not sampled by sleeping inside a scrape: they are the difference between this
//! snapshot and the one of the previous render (whoever asked for it), so they are absent on
//! the first render that sees a key.
//!
//! One ring that cannot be read (corrupt, not ours to read, gone half-way) gives
//! `cuframes_up{key} 0` and counts in `cuframes_read_errors_total`; it never fails the scrape,
//! and nothing here panics on what a ring holds (the core checks every header; a panic all
//! the same is caught and answered with a 500, and the next scrape is served).
//!
//! Anyone who can create a file in /dev/shm can plant rings, so what one render costs is
//! capped: at most `max_rings` keys are inspected at all (chosen from the directory listings
//! alone: publishers with a socket in the runtime directory first, which a stranger cannot
//! plant, then by key) and `max_subscribers` subscribers over all of them are shown (a ring
//! holds at most 31); what is left out is counted in `cuframes_exporter_*_omitted`. Renders
//! run one at a time on their own thread, off the HTTP reactor, and a scrape that arrives
//! within `reuse` of a render's start is answered with that render, so many scrapers cost no
//! more than one.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use cuframes_core::inspect::{self, FrameSnapshot, PublisherInfo, Rates, SocketState};
use cuframes_core::paths::{validate_key, Key, PACKET_SHM_SUFFIX, SHM_PREFIX};
use hyper::body::Bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::{mpsc, oneshot};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubLabels {
    key: String,
    subscriber: String,
    bit: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    key: String,
    subscriber: String,
    bit: u64,
    reason: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// What one render may cost.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Keys (publishers) rendered per scrape.
    pub max_rings: usize,
    /// Subscribers rendered per scrape, over all keys.
    pub max_subscribers: usize,
    /// A scrape that arrives at most this long after a render started gets that render.
    pub reuse: Duration,
}

/// Counters that the HTTP side keeps and every render shows.
#[derive(Clone, Default)]
pub struct ServeCounters {
    /// Connections closed at once because `--max-connections` were open.
    pub refused: Counter,
}

/// A render: the body, or `None` when it failed (a panic, answered with a 500).
pub type Body = Option<Bytes>;

struct Job {
    arrived: Instant,
    reply: oneshot::Sender<Body>,
}

/// The way to the render thread.
#[derive(Clone)]
pub struct Renders {
    jobs: mpsc::Sender<Job>,
}

impl Renders {
    /// Start the render thread; `queue` bounds the scrapes waiting for it (one per
    /// connection is enough: a connection asks for one response at a time).
    pub fn start(
        dir: PathBuf,
        keys: Vec<Key>,
        limits: Limits,
        counters: ServeCounters,
        queue: usize,
    ) -> std::io::Result<Renders> {
        let (tx, mut rx) = mpsc::channel::<Job>(queue.max(1));
        let mut r = Renderer {
            dir,
            keys,
            limits,
            counters,
            state: State::default(),
            last: None,
        };
        std::thread::Builder::new()
            .name("render".into())
            .spawn(move || {
                let serve = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    while let Some(job) = rx.blocking_recv() {
                        // A scraper that went away meanwhile is owed nothing.
                        if job.reply.is_closed() {
                            continue;
                        }
                        let body = r.body_for(job.arrived);
                        let _ = job.reply.send(body);
                    }
                }));
                // Each render catches its own panics; one outside them leaves an exporter
                // that can only answer 500: better stopped, and restarted by its service
                // manager (a non-zero status).
                if serve.is_err() {
                    eprintln!("cuframes exporter: the render thread failed; exiting");
                    std::process::exit(1);
                }
            })?;
        Ok(Renders { jobs: tx })
    }

    /// The metrics for a scrape that arrived at `arrived`.
    pub async fn get(&self, arrived: Instant) -> Body {
        let (reply, rx) = oneshot::channel();
        self.jobs.send(Job { arrived, reply }).await.ok()?;
        rx.await.ok().flatten()
    }
}

/// What the exporter keeps between renders.
#[derive(Default)]
struct State {
    /// The previous render's snapshot of each key it showed: the other end of the rates.
    prev: BTreeMap<String, PublisherInfo>,
    /// Objects or directories that could not be read, over the exporter's life.
    read_errors: Counter,
    /// Renders over the exporter's life (scrapes answered with a reused one are not).
    renders: Counter,
    /// The last error said on stderr for each key (each is said once, not every scrape).
    said: BTreeMap<String, String>,
}

struct Renderer {
    dir: PathBuf,
    keys: Vec<Key>,
    limits: Limits,
    counters: ServeCounters,
    state: State,
    /// The latest render and when it started.
    last: Option<(Instant, Bytes)>,
}

impl Renderer {
    fn body_for(&mut self, arrived: Instant) -> Body {
        if let Some((started, body)) = &self.last {
            if arrived.saturating_duration_since(*started) <= self.limits.reuse {
                return Some(body.clone());
            }
        }
        let started = Instant::now();
        let filter = (!self.keys.is_empty()).then_some(self.keys.as_slice());
        let (state, dir, limits, counters) =
            (&mut self.state, &self.dir, self.limits, &self.counters);
        match std::panic::catch_unwind(AssertUnwindSafe(|| {
            scrape(state, dir, filter, limits, counters)
        })) {
            Ok(text) => {
                let body = Bytes::from(text);
                self.last = Some((started, body.clone()));
                Some(body)
            }
            Err(_) => {
                // Not expected; the next scrape starts from nothing.
                self.state.prev.clear();
                self.last = None;
                None
            }
        }
    }
}

/// Saturating: a u64 seq or counter as a gauge value.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Which keys a capped render shows first: those whose socket listens in the runtime
/// directory, then those with any socket file there (neither can be planted by someone who
/// cannot write the runtime directory), then the rest; by key within each.
fn rank(info: &PublisherInfo) -> u8 {
    match info.socket {
        SocketState::Listening { .. } => 0,
        ref s if s.exists() => 1,
        _ => 2,
    }
}

/// The keys one render inspects, chosen from the names in the runtime directory and in
/// /dev/shm alone (nothing is opened): at most `max`, those with a socket file first, then by
/// key; and how many were left out.
fn choose(dir: &Path, filter: Option<&[Key]>, max: usize) -> (Vec<Key>, usize) {
    let wanted = |k: &str| {
        validate_key(k).is_ok() && filter.map_or(true, |f| f.iter().any(|w| w.as_str() == k))
    };
    // Key -> 0 with a socket file, 1 with SHM objects only.
    let mut found: BTreeMap<String, u8> = BTreeMap::new();
    // `cuframes-X-packets` is X's packet ring or the frame ring of the key `X-packets`
    // (inspect reads its magic to tell): the second reading, inspected along with X.
    let mut other_reading: BTreeMap<String, String> = BTreeMap::new();
    let names = |d: &Path| {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
    };
    // Unreadable directories are said by `inspect::list`, which reads them again.
    for name in names(dir) {
        if let Some(k) = name.strip_suffix(".sock").filter(|k| wanted(k)) {
            found.insert(k.to_owned(), 0);
        }
    }
    for name in names(Path::new(inspect::SHM_DIR)) {
        let Some(rest) = name.strip_prefix(SHM_PREFIX) else {
            continue;
        };
        let packets_of = rest.strip_suffix(PACKET_SHM_SUFFIX).filter(|k| wanted(k));
        let key = match (packets_of, wanted(rest)) {
            (Some(k), true) => {
                other_reading.insert(k.to_owned(), rest.to_owned());
                k
            }
            (Some(k), false) => k,
            (None, true) => rest,
            (None, false) => continue,
        };
        found.entry(key.to_owned()).or_insert(1);
    }
    let mut ranked: Vec<(u8, String)> = found.into_iter().map(|(k, r)| (r, k)).collect();
    ranked.sort();
    let omitted = ranked.len().saturating_sub(max);
    let mut keys = Vec::new();
    for (_, k) in ranked.into_iter().take(max) {
        if let Some(other) = other_reading.get(&k) {
            keys.extend(Key::new(other).ok());
        }
        keys.extend(Key::new(&k).ok());
    }
    (keys, omitted)
}

/// One scrape: a snapshot of the chosen keys, capped and rendered.
fn scrape(
    state: &mut State,
    dir: &Path,
    filter: Option<&[Key]>,
    limits: Limits,
    counters: &ServeCounters,
) -> String {
    state.renders.inc();
    let (chosen, mut rings_omitted) = choose(dir, filter, limits.max_rings);
    let mut infos = match inspect::list(dir, Some(&chosen)) {
        Ok(v) => v,
        Err(e) => {
            state.read_errors.inc();
            let msg = e.message().to_owned();
            if state.said.get("").map(String::as_str) != Some(msg.as_str()) {
                eprintln!("cuframes exporter: {msg}");
                state.said.insert(String::new(), msg);
            }
            Vec::new()
        }
    };
    // `list` gives them by key; a stable sort keeps that order within a rank.
    infos.sort_by_key(rank);
    // A second reading of a `-packets` name may have added one.
    rings_omitted += infos.len().saturating_sub(limits.max_rings);
    infos.truncate(limits.max_rings);
    let m = Metrics::default();
    let mut sub_budget = limits.max_subscribers;
    let mut subs_omitted = 0usize;
    for info in &infos {
        let errors = info.errors();
        if !errors.is_empty() {
            state.read_errors.inc_by(errors.len() as u64);
            let msg = errors
                .iter()
                .map(|e| e.message())
                .collect::<Vec<_>>()
                .join("; ");
            if state.said.get(&info.key) != Some(&msg) {
                eprintln!("cuframes exporter: {}: {msg}", info.key);
                state.said.insert(info.key.clone(), msg);
            }
        } else {
            state.said.remove(&info.key);
        }
        let prev = state.prev.get(&info.key);
        let subs = info.frame_snapshot().map_or(0, |f| f.subscribers.len());
        let shown = subs.min(sub_budget);
        sub_budget -= shown;
        subs_omitted += subs - shown;
        m.add(info, prev, errors.is_empty(), shown);
    }
    state.prev = infos.into_iter().map(|i| (i.key.clone(), i)).collect();
    state
        .said
        .retain(|k, _| k.is_empty() || state.prev.contains_key(k));
    let omitted = Omitted {
        rings: rings_omitted,
        subscribers: subs_omitted,
    };
    m.render(state, omitted, counters)
}

/// What a capped render left out.
struct Omitted {
    rings: usize,
    subscribers: usize,
}

#[derive(Default)]
struct Metrics {
    up: Family<KeyLabels, Gauge>,
    alive: Family<KeyLabels, Gauge>,
    owner_mismatch: Family<KeyLabels, Gauge>,
    subscribers: Family<KeyLabels, Gauge>,
    frame_seq: Family<KeyLabels, Gauge>,
    fps: Family<KeyLabels, FloatGauge>,
    packet_seq: Family<KeyLabels, Gauge>,
    packets_per_second: Family<KeyLabels, FloatGauge>,
    packet_bytes_per_second: Family<KeyLabels, FloatGauge>,
    packet_written: Family<KeyLabels, Counter>,
    keyframe_age: Family<KeyLabels, FloatGauge>,
    sub_alive: Family<SubLabels, Gauge>,
    sub_lag: Family<SubLabels, Gauge>,
    sub_seen: Family<SubLabels, Gauge>,
    sub_ack_age: Family<SubLabels, FloatGauge>,
    sub_delivered: Family<SubLabels, Counter>,
    sub_fps: Family<SubLabels, FloatGauge>,
    sub_drops: Family<DropLabels, Counter>,
}

impl Metrics {
    /// `info` with its first `subs` subscribers.
    fn add(&self, info: &PublisherInfo, prev: Option<&PublisherInfo>, readable: bool, subs: usize) {
        let k = KeyLabels {
            key: info.key.clone(),
        };
        self.up.get_or_create(&k).set(i64::from(readable));
        self.alive
            .get_or_create(&k)
            .set(i64::from(info.liveness.is_alive()));
        self.owner_mismatch
            .get_or_create(&k)
            .set(i64::from(!info.owner_mismatch.is_empty()));
        if let Some(n) = info.subscriber_count() {
            self.subscribers.get_or_create(&k).set(int(n as u64));
        }
        let rates = prev.map_or_else(Rates::default, |p| Rates::between(p, info));
        if let Some(f) = info.frame_snapshot() {
            self.frame_seq.get_or_create(&k).set(int(f.global_seq));
            if let Some(r) = rates.frames_per_sec {
                self.fps.get_or_create(&k).set(r);
            }
            self.add_subscribers(&info.key, f, prev.and_then(|p| p.frame_snapshot()), subs);
        }
        if let Some(p) = info.packet_snapshot() {
            self.packet_seq.get_or_create(&k).set(int(p.global_seq));
            self.packet_written.get_or_create(&k).inc_by(p.write_offset);
            if let Some(r) = rates.packets_per_sec {
                self.packets_per_second.get_or_create(&k).set(r);
            }
            if let Some(r) = rates.packet_bytes_per_sec {
                self.packet_bytes_per_second.get_or_create(&k).set(r);
            }
            if let Some(a) = p.keyframe_age() {
                self.keyframe_age.get_or_create(&k).set(a.as_secs_f64());
            }
        }
    }

    fn add_subscribers(
        &self,
        key: &str,
        f: &FrameSnapshot,
        prev: Option<&FrameSnapshot>,
        subs: usize,
    ) {
        let dt = prev.map_or(Duration::ZERO, |p| {
            f.taken.saturating_duration_since(p.taken)
        });
        for s in f.subscribers.iter().take(subs) {
            let l = SubLabels {
                key: key.to_owned(),
                subscriber: s.name.clone(),
                bit: s.bit as u64,
            };
            self.sub_alive.get_or_create(&l).set(i64::from(s.pid_alive));
            if s.reads_frames {
                self.sub_lag.get_or_create(&l).set(int(s.lag));
            }
            self.sub_seen.get_or_create(&l).set(int(s.last_seen_seq));
            if let Some(a) = s.ack_age {
                self.sub_ack_age.get_or_create(&l).set(a.as_secs_f64());
            }
            self.sub_delivered.get_or_create(&l).inc_by(s.delivered);
            // The same subscriber (slot, process and name) in the previous scrape.
            let before = prev.and_then(|p| {
                p.subscribers
                    .iter()
                    .find(|o| o.bit == s.bit && o.pid == s.pid && o.name == s.name)
            });
            if let Some(b) = before {
                if !dt.is_zero() && s.delivered >= b.delivered {
                    let r = (s.delivered - b.delivered) as f64 / dt.as_secs_f64();
                    self.sub_fps.get_or_create(&l).set(r);
                }
            }
            for (reason, n) in [("overrun", s.dropped_overrun), ("torn", s.dropped_torn)] {
                let d = DropLabels {
                    key: key.to_owned(),
                    subscriber: s.name.clone(),
                    bit: s.bit as u64,
                    reason,
                };
                self.sub_drops.get_or_create(&d).inc_by(n);
            }
        }
    }

    fn render(self, state: &State, omitted: Omitted, counters: &ServeCounters) -> String {
        let rate_note = "between the previous scrape of this exporter and this one (absent on \
                         the first scrape that sees the key)";
        let mut r = Registry::with_prefix("cuframes");
        r.register(
            "up",
            "1 when every shared-memory object of the key could be read, 0 when one could \
             not (corrupt, not readable by the exporter, vanished meanwhile)",
            self.up,
        );
        r.register(
            "publisher_alive",
            "1 while the publisher is alive (its socket listens or its producer pid lives), \
             0 when it is dead or cannot be told",
            self.alive,
        );
        r.register(
            "publisher_owner_mismatch",
            "1 when the key's objects are not all owned by one user (the SHM object's owner \
             differs from the socket's or the producer process's: planted by someone else, \
             `cuframes stat` names the owners); such a publisher is never counted alive",
            self.owner_mismatch,
        );
        r.register(
            "subscribers",
            "Subscribers of the key (frame ring slots in use; accepted connections of a \
             packets-only publisher)",
            self.subscribers,
        );
        r.register(
            "frame_seq",
            "Sequence number of the newest published frame",
            self.frame_seq,
        );
        r.register(
            "frames_per_second",
            format!("Frames published per second, {rate_note}"),
            self.fps,
        );
        r.register(
            "packet_seq",
            "Sequence number of the newest published packet",
            self.packet_seq,
        );
        r.register(
            "packets_per_second",
            format!("Packets published per second, {rate_note}"),
            self.packets_per_second,
        );
        r.register_with_unit(
            "packet",
            format!("Packet payload bytes published per second, {rate_note}"),
            Unit::Other("bytes_per_second".into()),
            self.packet_bytes_per_second,
        );
        r.register_with_unit(
            "packet_written",
            "Packet payload bytes published since the packet ring was created",
            Unit::Bytes,
            self.packet_written,
        );
        r.register_with_unit(
            "packet_keyframe_age",
            "Stream time from the newest keyframe to the newest packet",
            Unit::Seconds,
            self.keyframe_age,
        );
        r.register(
            "subscriber_alive",
            "1 while the subscriber's process is alive",
            self.sub_alive,
        );
        r.register_with_unit(
            "subscriber_lag",
            "Frames published that the subscriber has not ACKed yet (frame readers only)",
            Unit::Other("frames".into()),
            self.sub_lag,
        );
        r.register(
            "subscriber_last_seen_seq",
            "Sequence number of the newest frame the subscriber has ACKed",
            self.sub_seen,
        );
        r.register_with_unit(
            "subscriber_last_ack_age",
            "Time since the subscriber's last ACK (absent before its first)",
            Unit::Seconds,
            self.sub_ack_age,
        );
        r.register(
            "subscriber_delivered",
            "Frames delivered to the subscriber",
            self.sub_delivered,
        );
        r.register(
            "subscriber_frames_per_second",
            format!("Frames delivered to the subscriber per second, {rate_note}"),
            self.sub_fps,
        );
        r.register(
            "subscriber_drops",
            "Frames the subscriber did not get, by reason: overrun (overwritten before it \
             read them: its overruns) and torn (rewritten while it read them)",
            self.sub_drops,
        );
        r.register(
            "read_errors",
            "Shared-memory objects or directories the exporter could not read, summed over \
             its scrapes",
            state.read_errors.clone(),
        );
        r.register(
            "exporter_renders",
            "Renders of the metrics, over the exporter's life (a scrape that arrives within \
             --reuse of a render's start gets that render)",
            state.renders.clone(),
        );
        let rings_omitted: Gauge = Gauge::default();
        rings_omitted.set(int(omitted.rings as u64));
        r.register(
            "exporter_rings_omitted",
            "Publishers (keys) left out of this scrape by --max-rings (those with a socket \
             in the runtime directory are shown first)",
            rings_omitted,
        );
        let subs_omitted: Gauge = Gauge::default();
        subs_omitted.set(int(omitted.subscribers as u64));
        r.register(
            "exporter_subscribers_omitted",
            "Subscribers left out of this scrape by --max-subscribers (their publisher's \
             cuframes_subscribers still counts them)",
            subs_omitted,
        );
        r.register(
            "exporter_connections_refused",
            "HTTP connections closed at once because --max-connections were open, over the \
             exporter's life",
            counters.refused.clone(),
        );
        let mut body = String::new();
        if prometheus_client::encoding::text::encode(&mut body, &r).is_err() {
            // Writing to a String does not fail; say so rather than serve half a page.
            body = "# EOF\n".into();
        }
        body
    }
}
