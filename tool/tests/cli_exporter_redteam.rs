//! `cuframes exporter` against a local client that holds connections (the rest of its
//! hostile clients are in cli_exporter/).

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Children, TestEnv};

const BIN: &str = env!("CARGO_BIN_EXE_cuframes");

/// `cuframes exporter --listen 127.0.0.1:0 ARGS` of `env.dir` (killed when the guard drops),
/// and where it listens.
fn start(env: &TestEnv, args: &[&str]) -> (Children, SocketAddr) {
    let mut kids = Children(Vec::new());
    let child = Command::new(BIN)
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    kids.0.push(child);
    let mut line = String::new();
    BufReader::new(kids.0[0].stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .unwrap();
    (kids, addr)
}

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// One keep-alive GET on `s`: the status line, with the body read (Content-Length).
fn get_keep_alive(s: &mut TcpStream) -> String {
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    status.trim_end().to_owned()
}

/// One GET on a new connection that the server closes: what it answered (status line),
/// or the error that ended it (a reset).
fn get_once(addr: SocketAddr) -> String {
    let mut s = raw(addr);
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut all = Vec::new();
    match s.read_to_end(&mut all) {
        Ok(_) => String::from_utf8_lossy(&all)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned(),
        Err(e) => format!("error: {e}"),
    }
}

/// One local client that keeps `--max-connections` keep-alive connections (a GET on each
/// every few seconds, under `--timeout`, within `--max-connection-age`) must not get every
/// other scrape refused with 503 (or reset). A newcomer takes the place of the connection
/// idle the longest: every scrape is served,
/// and the held connections that were idle longest are the ones closed.
#[test]
fn held_keep_alive_connections_do_not_lock_scrapers_out() {
    let env = TestEnv::new("rt-exp-hold");
    let (_kids, addr) = start(&env, &["--max-connections", "4", "--reuse", "0"]);
    let mut held: Vec<TcpStream> = (0..4).map(|_| raw(addr)).collect();
    for s in &mut held {
        assert_eq!(get_keep_alive(s), "HTTP/1.1 200 OK");
    }
    // Refreshed: every held connection has served a request and is waiting for the next.
    for s in &mut held {
        assert_eq!(get_keep_alive(s), "HTTP/1.1 200 OK");
    }
    for i in 0..6 {
        assert_eq!(get_once(addr), "HTTP/1.1 200 OK", "scrape {i}");
    }
    // The oldest held connection was closed for the first newcomer.
    let mut buf = [0u8; 1];
    held[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(
        matches!(held[0].read(&mut buf), Ok(0) | Err(_)),
        "the connection idle the longest is still open"
    );
}
