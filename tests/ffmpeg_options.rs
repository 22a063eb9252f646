//! One option vocabulary across the four FFmpeg components (docs/ffmpeg.md, "Options common
//! to the components"): the same name is the same type and help text wherever it appears,
//! every time is a duration, both inputs treat a missing publisher alike, and the cuframes
//! 0.4 names still work as deprecated aliases where a name keeps one meaning. Skipped without
//! a cuframes FFmpeg build.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cuframes_test_support::ffmpeg::{find, Scratch};

/// `-h WHAT` as option name -> (type, help text), flags column dropped.
fn options(s: &Scratch, what: &str) -> BTreeMap<String, (String, String)> {
    let (ok, err) = s.ffmpeg("help", &["-h", what], Duration::from_secs(30));
    assert!(ok, "ffmpeg -h {what}: {err}");
    let mut out = BTreeMap::new();
    for line in s.stdout("help").lines() {
        // "  -name   <type>   FLAGS  help" (filters print no dash).
        let mut f = line.split_whitespace();
        let (Some(name), Some(ty), Some(_flags)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !ty.starts_with('<') {
            continue; // constants of an enum option, headers
        }
        let help: Vec<&str> = f.collect();
        let name = name.trim_start_matches('-').to_owned();
        out.insert(name, (ty.to_owned(), help.join(" ")));
    }
    assert!(!out.is_empty(), "no options in -h {what}");
    out
}

#[test]
fn shared_names_have_one_type_and_one_help_text() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "vocab");
    let filter = options(&s, "filter=hwupload_cuframes");
    let indev = options(&s, "demuxer=cuframes");
    let demuxer = options(&s, "demuxer=cuframes_pkt");
    let muxer = options(&s, "muxer=cuframes_pkt");
    let get = |m: &BTreeMap<String, (String, String)>, what: &str, o: &str| {
        m.get(o)
            .unwrap_or_else(|| panic!("{what} lacks {o}: {m:?}"))
            .clone()
    };
    // The inputs: the same three waits, word for word.
    for o in ["wait_publisher", "handshake_timeout", "read_timeout"] {
        let a = get(&indev, "cuframes indev", o);
        let b = get(&demuxer, "cuframes_pkt demuxer", o);
        assert_eq!(a, b, "{o} differs between the two inputs");
        assert_eq!(a.0, "<duration>", "{o} is not a duration");
    }
    // The publishers: the same subscriber wait.
    for (what, m) in [("filter", &filter), ("muxer", &muxer)] {
        let (ty, help) = get(m, what, "wait_subscribers");
        assert_eq!(ty, "<int>");
        assert!(
            help.starts_with("before writing the first frame or packet, wait until this many"),
            "{what}: {help}"
        );
        assert_eq!(get(m, what, "wait_timeout").0, "<duration>", "{what}");
    }
    assert_eq!(get(&filter, "filter", "ack_timeout").0, "<duration>");
    let rd = get(&filter, "filter", "runtime_dir");
    for (what, m) in [("indev", &indev), ("demuxer", &demuxer), ("muxer", &muxer)] {
        assert_eq!(get(m, what, "runtime_dir"), rd, "{what}: runtime_dir");
    }
    // No time is an integer of milliseconds any more, except the deprecated aliases.
    for (what, m) in [
        ("filter", &filter),
        ("indev", &indev),
        ("demuxer", &demuxer),
        ("muxer", &muxer),
    ] {
        for (name, (ty, help)) in m.iter() {
            if help.starts_with("deprecated") {
                continue;
            }
            assert!(
                !(name.contains("timeout") || name.contains("wait_publisher"))
                    || ty == "<duration>",
                "{what}: {name} is {ty}"
            );
            assert!(!help.contains("millisecond"), "{what}: {name}: {help}");
        }
    }
}

/// Run an input on a key nobody publishes; (failed, stderr, elapsed).
fn missing(s: &Scratch, log: &str, format: &str, opts: &[&str]) -> (bool, String, Duration) {
    let key = s.key(log);
    let mut args = vec!["-f", format];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["-i", &key, "-f", "null", "-"]);
    let t = Instant::now();
    let (ok, err) = s.ffmpeg(log, &args, Duration::from_secs(30));
    (!ok, err, t.elapsed())
}

#[test]
fn both_inputs_treat_a_missing_publisher_alike() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "nopub");
    for format in ["cuframes", "cuframes_pkt"] {
        // Default: an error at once.
        let (failed, err, took) = missing(&s, &format!("{format}-now"), format, &[]);
        assert!(failed, "{format}: no publisher, yet it succeeded");
        assert!(
            took < Duration::from_secs(3),
            "{format}: took {took:?}: {err}"
        );
        assert!(err.contains("no publisher for key"), "{format}: {err}");
        // -wait_publisher: waits that long, then the same error.
        let (failed, err, took) = missing(
            &s,
            &format!("{format}-wait"),
            format,
            &["-wait_publisher", "0.6"],
        );
        assert!(
            failed && err.contains("no publisher for key"),
            "{format}: {err}"
        );
        assert!(
            took >= Duration::from_millis(600),
            "{format}: took {took:?}"
        );
    }
}

#[test]
fn old_names_are_deprecated_aliases() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "alias");
    // Input device: -timeout (ms) sets read_timeout. -connect_timeout is not one of its
    // options: in the demuxer, Python and C it names the handshake timeout, so one name keeps
    // one meaning.
    let (failed, err, _) = missing(&s, "indev-alias", "cuframes", &["-timeout", "1000"]);
    assert!(
        failed && err.contains("-timeout (ms) is deprecated: use -read_timeout"),
        "{err}"
    );
    let indev = options(&s, "demuxer=cuframes");
    assert!(
        !indev.contains_key("connect_timeout"),
        "the input device has -connect_timeout: {:?}",
        indev.get("connect_timeout")
    );
    // Demuxer: -connect_timeout is the old name of the handshake timeout (a duration already).
    let (failed, err, _) = missing(&s, "pkt-alias", "cuframes_pkt", &["-connect_timeout", "2"]);
    assert!(failed && err.contains("deprecated"), "{err}");
    // Muxer: -min_subscribers/-subscriber_wait are wait_subscribers/wait_timeout.
    let key = s.key("mux-alias");
    let t = Instant::now();
    let (ok, err) = s.ffmpeg(
        "mux-alias",
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc=s=64x48:r=25:d=0.2",
            "-c:v",
            "libx264",
            "-f",
            "cuframes_pkt",
            "-min_subscribers",
            "1",
            "-subscriber_wait",
            "0.5",
            &key,
        ],
        Duration::from_secs(30),
    );
    assert!(!ok, "nobody subscribed, yet the muxer succeeded: {err}");
    assert!(
        err.contains("deprecated") && err.contains("only 0 of 1 subscribers"),
        "{err}"
    );
    assert!(t.elapsed() >= Duration::from_millis(500));
}

/// A socket at the key's name that never accepts (listening with a backlog
/// of 0 that is full, as a group member can plant it). Both inputs fail within their
/// `-handshake_timeout` (plus start-up slack) with an error that says so, instead of hanging
/// in `connect()` until killed.
#[test]
fn both_inputs_give_up_on_a_socket_that_never_accepts() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "noaccept");
    for format in ["cuframes", "cuframes_pkt"] {
        let key = s.key(&format!("{format}-na"));
        let squat = cuframes_test_support::squat_never_accepting(
            &s.path(&format!(".squat-{format}")),
            &s.path(&format!("{key}.sock")),
        );
        let log = format!("{format}-noaccept");
        let t = Instant::now();
        let (ok, err) = s.ffmpeg(
            &log,
            &[
                "-f",
                format,
                "-handshake_timeout",
                "2",
                "-read_timeout",
                "2",
                "-i",
                &key,
                "-f",
                "null",
                "-",
            ],
            Duration::from_secs(30),
        );
        let took = t.elapsed();
        assert!(
            !ok,
            "{format}: succeeded against a socket that never accepts"
        );
        assert!(
            took < Duration::from_secs(10),
            "{format}: took {took:?} (handshake_timeout 2 s): {err}"
        );
        assert!(err.contains("did not accept"), "{format}: {err}");
        drop(squat);
    }
}
