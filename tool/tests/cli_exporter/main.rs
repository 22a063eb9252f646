//! `cuframes exporter` as Prometheus sees it: a real publisher (host rings, frames and
//! packets, two subscribers) in this process, the exporter as a child process, scraped over
//! HTTP, the exposition parsed and compared with `cuframes stat --json` taken at about the
//! same time; 404s; an exporter that keeps serving while rings vanish, come and go, or
//! are garbage; and one that hostile clients (huge Content-Length, slowloris, pipelining
//! non-readers, idle connections past the fd limit, huge headers) and 2000 planted rings
//! cannot stop, slow down or make grow.
//!
//! `CUFRAMES_EXPORTER_BIN` runs the tests against another build of the tool (an older one,
//! to see them fail there).
//!
//! Files: harness.rs (the exporter process, HTTP, `stat --json`), exposition.rs (the text
//! format parsed), scrape.rs, hostile_clients.rs, planted_rings.rs.

mod exposition;
mod harness;
mod hostile_clients;
mod planted_rings;
mod scrape;
