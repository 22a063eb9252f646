//! The options of the muxer and the demuxer, each with its help text.

use cuframes_test_support::ffmpeg::*;

#[test]
fn options_are_documented() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "help");
    for (what, opts) in [
        (
            "muxer=cuframes_pkt",
            &[
                "runtime_dir",
                "file_mode",
                "ring_slots",
                "data_size",
                "wait_subscribers",
                "wait_timeout",
                "discont_gap",
            ][..],
        ),
        (
            "demuxer=cuframes_pkt",
            &[
                "runtime_dir",
                "name",
                "wait_publisher",
                "handshake_timeout",
                "read_timeout",
                "timebase",
                "reconnect",
                "spin",
            ][..],
        ),
    ] {
        s.ffmpeg_ok("help", &["-h", what]);
        let text = s.stdout("help");
        for o in opts {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("-{o} ")))
                .unwrap_or_else(|| panic!("-h {what} lacks -{o}:\n{text}"));
            assert!(line.len() > 50, "-{o} has no help text: {line}");
        }
    }
}
