//! The systemd units of contrib/systemd/: valid for systemd, restarting for ever, stopping
//! within their timeouts, and running the command lines the other tests run (they read
//! them from the units) and docs/operations.md shows.

use std::process::Command;

use cuframes_test_support::ffmpeg::{find, repo};

use super::camera::run_bounded;
use super::pipeline::*;

fn exec_start_line(unit: &std::path::Path) -> String {
    std::fs::read_to_string(unit)
        .unwrap()
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap()
        .to_owned()
}

#[test]
fn units_restart_for_ever_and_stop_within_their_timeouts() {
    for unit in [camera_unit(), recorder_unit()] {
        let text = std::fs::read_to_string(&unit).unwrap();
        for line in [
            "Restart=always",
            "RestartSec=1",
            "StartLimitIntervalSec=0",
            "EnvironmentFile=/etc/cuframes/%i.env",
            "KillSignal=SIGTERM",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{}: no {line}",
                unit.display()
            );
        }
    }
    // The camera: the unit runs ffmpeg relaying the camera into the key's packet ring.
    let argv = unit_exec(
        &camera_unit(),
        "cam1",
        &[
            ("CAMERA_URL", "rtsp://192.0.2.10/s"),
            ("CUFRAMES_KEY", "cam1"),
        ],
    );
    let want = "/usr/local/bin/ffmpeg -nostdin -hide_banner -loglevel warning -rtsp_transport tcp \
                -timeout 5000000 -i rtsp://192.0.2.10/s -copyts -map 0:v:0 -c copy -f cuframes_pkt cam1";
    assert_eq!(argv.join(" "), want);
    // Its RTSP reads give up after twice -timeout (5 s; outage.rs measures it), before the
    // stop timeout.
    assert!(unit_setting_secs(&camera_unit(), "TimeoutStopSec") > 10);
    // The recorder: one shell command, ffmpeg exec'ed (systemd signals ffmpeg itself), a
    // new file per start; its wait for the publisher ends before the stop timeout.
    let argv = unit_exec(&recorder_unit(), "cam1", &[]);
    assert_eq!(argv.len(), 3, "{argv:?}");
    assert_eq!(argv[..2], ["/bin/sh", "-c"]);
    assert!(
        argv[2].starts_with("exec /usr/local/bin/ffmpeg "),
        "{}",
        argv[2]
    );
    assert!(
        argv[2].ends_with(r#"-c copy -n "$RECORD_DIR/cam1-$(date +%Y%m%d-%H%M%S).mkv""#),
        "{}",
        argv[2]
    );
    let wait: u64 = argv[2]
        .split_whitespace()
        .skip_while(|w| *w != "-wait_publisher")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("-wait_publisher N");
    assert!(argv[2].contains("-reconnect 1"));
    assert!(
        unit_setting_secs(&recorder_unit(), "TimeoutStopSec") > wait,
        "the recorder's stop timeout must outlast its -wait_publisher {wait}"
    );
}

#[test]
fn docs_show_the_units_command_lines() {
    let ops = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let readme = std::fs::read_to_string(repo().join("contrib/systemd/README.md")).unwrap();
    for unit in [camera_unit(), recorder_unit()] {
        let line = exec_start_line(&unit);
        assert!(
            ops.contains(&line),
            "docs/operations.md does not show {}'s {line}",
            unit.display()
        );
        let name = unit.file_name().unwrap().to_str().unwrap();
        assert!(
            readme.contains(name),
            "contrib/systemd/README.md does not name {name}"
        );
    }
}

#[test]
fn systemd_analyze_verify_accepts_the_units() {
    let Some(ff) = find() else { return };
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED (no systemd-analyze: the units are checked without systemd)");
        return;
    }
    // systemd checks that the executable exists: point the units at the build's ffmpeg.
    let dir = std::env::temp_dir().join(format!("cuframes-units-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    let mut files = Vec::new();
    for unit in [camera_unit(), recorder_unit()] {
        let text = std::fs::read_to_string(&unit)
            .unwrap()
            .replace(UNIT_FFMPEG, ff.ffmpeg.to_str().unwrap());
        let path = dir.join(unit.file_name().unwrap());
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    let mut c = Command::new("systemd-analyze");
    c.arg("verify").args(&files);
    let (st, err) = run_bounded(c, SECS(60));
    // verify exits 0 on settings it ignores, but names them on stderr.
    assert!(
        st.success() && err.trim().is_empty(),
        "systemd-analyze verify ({st}):\n{err}"
    );
    // It does catch a broken unit (the check can fail).
    let bad = dir.join("cuframes-broken@.service");
    std::fs::write(&bad, "[Service]\nExecStart=/bin/true\nRestart=sometimes\n").unwrap();
    let mut c = Command::new("systemd-analyze");
    c.arg("verify").arg(&bad);
    let (_, err) = run_bounded(c, SECS(60));
    assert!(err.contains("restart specifier"), "{err}");
}
