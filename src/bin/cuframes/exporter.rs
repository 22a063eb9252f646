//! `cuframes exporter --listen ADDR [KEY...]`: the numbers of `stat --json`, for Prometheus.
//!
//! Each GET of `/metrics` takes one snapshot of every publisher (only `KEY`s when given) with
//! the same core functions that `ls` and `stat` use ([`inspect::list`]), and renders it in
//! the OpenMetrics text format (what Prometheus asks for first; the classic text parser reads
//! it too). Rates are not sampled by sleeping inside a scrape: they are the difference between
//! this snapshot and the one of the previous scrape of this exporter (whoever made it), so
//! they are absent on the first scrape that sees a key.
//!
//! One ring that cannot be read (corrupt, not ours to read, gone half-way) gives
//! `cuframes_up{key} 0` and counts in `cuframes_read_errors_total`; it never fails the scrape,
//! and nothing here panics on what a ring holds (the core checks every header; a panic all
//! the same is caught and answered with a 500, and the next scrape is served).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{anyhow, Result};
use cuframes_core::inspect::{self, FrameSnapshot, PublisherInfo, Rates};
use cuframes_core::paths::Key;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tiny_http::{Header, Method, Request, Response, Server};

/// What Prometheus is told the body is (prometheus-client writes OpenMetrics 1.0 text).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

/// What the exporter keeps between scrapes.
struct State {
    /// The previous scrape's snapshot of each key: the other end of the rates.
    prev: BTreeMap<String, PublisherInfo>,
    /// Objects or directories that could not be read, over the exporter's life.
    read_errors: Counter,
    /// The last error said on stderr for each key (each is said once, not every scrape).
    said: BTreeMap<String, String>,
}

pub fn exporter(dir: &Path, listen: &str, keys: &[Key]) -> Result<bool> {
    let server = Server::http(listen).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = server
        .server_addr()
        .to_ip()
        .map_or_else(|| listen.to_owned(), |a| a.to_string());
    // First line on stdout: where it listens (the port when `:0` was asked for).
    let mut out = std::io::stdout();
    writeln!(out, "cuframes exporter: serving http://{addr}/metrics")?;
    out.flush()?;
    let mut state = State {
        prev: BTreeMap::new(),
        read_errors: Counter::default(),
        said: BTreeMap::new(),
    };
    let filter = (!keys.is_empty()).then_some(keys);
    for request in server.incoming_requests() {
        serve(&mut state, dir, filter, request);
    }
    Ok(true)
}

fn serve(state: &mut State, dir: &Path, filter: Option<&[Key]>, request: Request) {
    let path = request.url().split('?').next().unwrap_or("");
    let response = if path != "/metrics" {
        Response::from_string("not found: the metrics are at /metrics\n").with_status_code(404)
    } else if !matches!(request.method(), Method::Get | Method::Head) {
        let mut r = Response::from_string("only GET and HEAD\n").with_status_code(405);
        if let Ok(h) = Header::from_bytes("Allow", "GET, HEAD") {
            r = r.with_header(h);
        }
        r
    } else {
        match std::panic::catch_unwind(AssertUnwindSafe(|| scrape(state, dir, filter))) {
            Ok(body) => {
                let mut r = Response::from_string(body);
                if let Ok(h) = Header::from_bytes("Content-Type", CONTENT_TYPE) {
                    r = r.with_header(h);
                }
                r
            }
            Err(_) => {
                // Not expected; the next scrape starts from nothing.
                state.prev.clear();
                Response::from_string("internal error while gathering; see stderr\n")
                    .with_status_code(500)
            }
        }
    };
    // A client that went away meanwhile is no concern of ours.
    let _ = request.respond(response);
}

/// Saturating: a u64 seq or counter as a gauge value.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One scrape: a snapshot of every key, rendered.
fn scrape(state: &mut State, dir: &Path, filter: Option<&[Key]>) -> String {
    let infos = match inspect::list(dir, filter) {
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
    let m = Metrics::default();
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
        m.add(info, prev, errors.is_empty());
    }
    state.prev = infos.into_iter().map(|i| (i.key.clone(), i)).collect();
    state
        .said
        .retain(|k, _| k.is_empty() || state.prev.contains_key(k));
    m.render(&state.read_errors)
}

#[derive(Default)]
struct Metrics {
    up: Family<KeyLabels, Gauge>,
    alive: Family<KeyLabels, Gauge>,
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
    fn add(&self, info: &PublisherInfo, prev: Option<&PublisherInfo>, readable: bool) {
        let k = KeyLabels {
            key: info.key.clone(),
        };
        self.up.get_or_create(&k).set(i64::from(readable));
        self.alive
            .get_or_create(&k)
            .set(i64::from(info.liveness.is_alive()));
        if let Some(n) = info.subscriber_count() {
            self.subscribers.get_or_create(&k).set(int(n as u64));
        }
        let rates = prev.map_or_else(Rates::default, |p| Rates::between(p, info));
        if let Some(f) = info.frame_snapshot() {
            self.frame_seq.get_or_create(&k).set(int(f.global_seq));
            if let Some(r) = rates.frames_per_sec {
                self.fps.get_or_create(&k).set(r);
            }
            self.add_subscribers(&info.key, f, prev.and_then(|p| p.frame_snapshot()));
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

    fn add_subscribers(&self, key: &str, f: &FrameSnapshot, prev: Option<&FrameSnapshot>) {
        let dt = prev.map_or(Duration::ZERO, |p| {
            f.taken.saturating_duration_since(p.taken)
        });
        for s in &f.subscribers {
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

    fn render(self, read_errors: &Counter) -> String {
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
            read_errors.clone(),
        );
        let mut body = String::new();
        if prometheus_client::encoding::text::encode(&mut body, &r).is_err() {
            // Writing to a String does not fail; say so rather than serve half a page.
            body = "# EOF\n".into();
        }
        body
    }
}
