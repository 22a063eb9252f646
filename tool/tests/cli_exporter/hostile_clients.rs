//! Hostile HTTP clients (huge Content-Length, slowloris, pipelining non-readers, idle
//! connections past the descriptor limit, huge headers) cannot stop, slow down or grow the
//! exporter.

use cuframes_test_support as common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use common::TestEnv;

use super::harness::{Exporter, Planted};

/// A raw TCP connection to the exporter, with timeouts so that no test waits forever.
fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read what the server sends on `s` (discarding it) until it closes the connection (EOF or
/// a reset): how long that took and the first bytes it sent; `Err` when it is still open
/// after `limit`, or sent more than 256 MiB.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Result<(Duration, Vec<u8>), String> {
    let t = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut first = Vec::new();
    let mut total = 0usize;
    loop {
        let Some(left) = limit.checked_sub(t.elapsed()) else {
            return Err(format!("still open after {limit:?} ({total} bytes read)"));
        };
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Ok((t.elapsed(), first)),
            Ok(n) => {
                if first.len() < 4096 {
                    first.extend_from_slice(&buf[..n.min(4096 - first.len())]);
                }
                total += n;
                if total > 256 << 20 {
                    return Err(format!("still sending after {total} bytes"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok((t.elapsed(), first))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

const SCRAPE_REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n";

/// `cmd` runs with `RLIMIT_NOFILE` at `n` (soft and hard).
fn limit_nofile(cmd: &mut Command, n: u64) {
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit(2),
    // which is async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// This test process may hold `n` descriptors (the soft limit raised towards the hard one).
fn allow_own_fds(n: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < n as libc::rlim_t {
            r.rlim_cur = r.rlim_max.min(n as libc::rlim_t);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
    assert!(
        r.rlim_cur >= n as libc::rlim_t,
        "RLIMIT_NOFILE {} < {n}",
        r.rlim_cur
    );
}

/// A Content-Length no scrape has (99999999999, which a server that trusts it allocates
/// and dies of; u64::MAX, which overflows) is answered with an error, never read, and the
/// exporter serves the next scrape.
#[test]
fn huge_content_length_is_answered_and_the_next_scrape_served() {
    let env = TestEnv::new("exp-clen");
    let mut e = Exporter::start(&env, &[], |_| {});
    e.scrape_within(Duration::from_secs(10), "at the start");
    for (method, length) in [
        ("GET", "99999999999"),
        ("GET", "18446744073709551615"),
        ("POST", "99999999999"),
        ("POST", "18446744073709551615"),
    ] {
        let mut s = raw(e.addr);
        let req = format!(
            "{method} /metrics HTTP/1.1\r\nHost: exporter\r\nContent-Length: {length}\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        // Some bytes of the body it announced; the rest never comes.
        let _ = s.write_all(&[b'x'; 1000]);
        let (took, head) = closed_within(&mut s, Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("{method} Content-Length {length}: {e}"));
        let head = String::from_utf8_lossy(&head);
        let status = head.split(' ').nth(1).unwrap_or("");
        assert!(
            head.is_empty() || status.starts_with('4'),
            "{method} Content-Length {length}: answered {head:?}"
        );
        let when = format!("after {method} with Content-Length {length} (closed in {took:?})");
        std::thread::sleep(Duration::from_millis(200));
        e.assert_running(&when);
        e.scrape_within(Duration::from_secs(10), &when);
        let (rss, hwm) = e.memory_kib();
        assert!(hwm < 64 << 10, "{when}: VmRSS {rss} KiB, VmHWM {hwm} KiB");
    }
}

/// A slowloris (a request head that never ends), a client that pipelines
/// 20,000 GETs and reads nothing, and one that asks for a large response ten times and reads
/// nothing, all at once: an honest scrape meanwhile is served as fast as ever, and each of
/// them is closed by the exporter a few seconds after it stalls (default --timeout 5).
#[test]
fn slow_and_non_reading_clients_do_not_delay_an_honest_scrape() {
    let env = TestEnv::new("exp-slow");
    // Large responses (about 0.9 MB capped; 2.3 MB uncapped) that fill the socket buffers.
    let _planted = Planted::new(&env, 100);
    let mut e = Exporter::start(&env, &[], |_| {});
    let (body, _) = e.scrape_within(Duration::from_secs(10), "before the attack");
    assert!(body.len() > 300_000, "{} bytes", body.len());

    let mut slowloris = raw(e.addr);
    slowloris
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nX-Slow: ")
        .unwrap();
    let mut big = raw(e.addr);
    big.write_all(&SCRAPE_REQUEST.repeat(10)).unwrap();
    let mut pipelined = raw(e.addr);
    let mut writer = pipelined.try_clone().unwrap();
    let pipeliner = std::thread::spawn(move || {
        // Blocks once the exporter stops reading; ends when it closes (or after 10 s).
        let _ = writer.write_all(&SCRAPE_REQUEST.repeat(20_000));
    });
    std::thread::sleep(Duration::from_millis(500));
    // Honest scrapes for longer than the stall timeout, while all three hold on.
    let mut worst = Duration::ZERO;
    for i in 0..5 {
        let (_, took) = e.scrape_within(Duration::from_secs(8), &format!("honest {i}"));
        worst = worst.max(took);
        std::thread::sleep(Duration::from_millis(1500));
    }
    eprintln!("slowest honest scrape during the attack: {worst:?}");
    for (name, s) in [
        ("slowloris", &mut slowloris),
        ("non-reader of 10 large responses", &mut big),
        ("non-reader of 20,000 pipelined GETs", &mut pipelined),
    ] {
        let (took, _) =
            closed_within(s, Duration::from_secs(15)).unwrap_or_else(|err| panic!("{name}: {err}"));
        eprintln!("{name}: closed {took:?} after the honest scrapes");
    }
    pipeliner.join().unwrap();
    e.assert_running("after the attack");
    e.scrape_within(Duration::from_secs(8), "after the attack");
}

/// 600 idle connections under `RLIMIT_NOFILE` 1024 (a server with a thread and two
/// descriptors per connection runs out of descriptors and stops): connections past
/// --max-connections are closed at once, and the exporter keeps serving.
#[test]
fn idle_connections_past_the_fd_limit_do_not_stop_it() {
    let env = TestEnv::new("exp-fds");
    allow_own_fds(1200);
    let mut e = Exporter::start(&env, &[], |cmd| limit_nofile(cmd, 1024));
    e.scrape_within(Duration::from_secs(10), "at the start");
    let conns: Vec<TcpStream> = (0..600).map(|_| raw(e.addr)).collect();
    std::thread::sleep(Duration::from_secs(1));
    e.assert_running("while 600 idle connections were open");
    drop(conns);
    std::thread::sleep(Duration::from_millis(500));
    e.assert_running("after 600 idle connections closed");
    e.scrape_within(Duration::from_secs(10), "after 600 idle connections closed");
    std::thread::sleep(Duration::from_millis(500));
    e.assert_running("at the end");
}

/// The accept errors themselves: with more connections allowed than
/// descriptors (--max-connections 1000 under `RLIMIT_NOFILE` 64), accept fails with EMFILE;
/// the exporter says so, waits, accepts again once the idle ones time out, and serves.
#[test]
fn out_of_file_descriptors_is_waited_out() {
    let env = TestEnv::new("exp-emfile");
    let log_path = env.dir.join("exporter.stderr");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut e = Exporter::start(
        &env,
        &["--max-connections", "1000", "--timeout", "1"],
        |cmd| {
            limit_nofile(cmd, 64);
            cmd.stderr(log);
        },
    );
    e.scrape_within(Duration::from_secs(10), "at the start");
    // An exporter that exits on EMFILE refuses the later ones: the check below says so.
    let conns: Vec<TcpStream> = (0..150)
        .map_while(|_| TcpStream::connect_timeout(&e.addr, Duration::from_secs(10)).ok())
        .collect();
    // The exporter takes them 50-odd at a time, each closed after its 1 s header timeout.
    std::thread::sleep(Duration::from_secs(2));
    e.assert_running("while out of descriptors");
    drop(conns);
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = loop {
        let said = std::fs::read_to_string(&log_path).unwrap();
        if said.contains("accepting connections again") || Instant::now() > deadline {
            break said;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        said.contains("cannot accept a connection") && said.contains("os error 24"),
        "no EMFILE said: {said}"
    );
    assert!(said.contains("accepting connections again"), "{said}");
    e.assert_running("after running out of descriptors");
    e.scrape_within(Duration::from_secs(10), "after running out of descriptors");
}

/// Send `head` and then `fill` repeated up to `total` bytes, until the exporter closes the
/// connection (or stops reading for 10 s): the bytes sent and the first bytes answered.
fn send_until_closed(addr: SocketAddr, head: &[u8], fill: &[u8], total: usize) -> (usize, String) {
    let mut s = raw(addr);
    s.write_all(head).unwrap();
    let chunk = fill.repeat((64 << 10) / fill.len());
    let mut sent = head.len();
    while sent < total {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let answer = closed_within(&mut s, Duration::from_secs(15))
        .map(|(_, first)| String::from_utf8_lossy(&first).into_owned())
        .unwrap_or_else(|e| format!("({e})"));
    (sent, answer)
}

/// A 64 MiB header line and 2 million header lines (a server that keeps them all grows
/// without bound): the exporter stops reading at its header limit, stays small and keeps serving.
#[test]
fn huge_header_lines_and_counts_do_not_grow_memory() {
    let env = TestEnv::new("exp-hdr");
    let mut e = Exporter::start(&env, &[], |_| {});
    e.scrape_within(Duration::from_secs(10), "at the start");
    let (rss0, hwm0) = e.memory_kib();
    let (sent, answer) = send_until_closed(
        e.addr,
        b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nX-Big: ",
        b"a",
        64 << 20,
    );
    let line = answer.lines().next().unwrap_or("");
    eprintln!("64 MiB header line: {sent} bytes sent, answered {line:?}");
    e.assert_running("after a 64 MiB header line");
    e.scrape_within(Duration::from_secs(10), "after a 64 MiB header line");
    let (sent, answer) = send_until_closed(
        e.addr,
        b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n",
        b"X-a: b\r\n",
        2_000_000 * 8,
    );
    let line = answer.lines().next().unwrap_or("");
    eprintln!("2 million header lines: {sent} bytes sent, answered {line:?}");
    e.assert_running("after 2 million header lines");
    e.scrape_within(Duration::from_secs(10), "after 2 million header lines");
    let (rss, hwm) = e.memory_kib();
    eprintln!("VmRSS {rss0} -> {rss} KiB, VmHWM {hwm0} -> {hwm} KiB");
    assert!(
        hwm < 40 << 10,
        "VmHWM {hwm} KiB (VmRSS {rss} KiB; {hwm0} KiB before)"
    );
}
