//! End-to-end tests of the cuframes_pkt muxer and demuxer in the cuframes FFmpeg build
//! (FATE style): publish samples with `-c copy`, record them, and compare packet by packet
//! (framemd5) with the source and with the references committed in fate-samples/.
//!
//! They need `build/ffmpeg/bin/ffmpeg` (scripts/build-ffmpeg.sh with libcuframes installed)
//! or `$CUFRAMES_FFMPEG`; without either they print SKIPPED and pass.
//!
//! Files: harness.rs (sources, references, command lines, waits), round_trip.rs,
//! late_subscriber.rs, long_gop.rs (a late recorder of a GOP longer than the ring),
//! failures.rs (killed or missing publishers, reconnects), help.rs, muxer.rs (flags and
//! timestamps, a shared publisher, `-wait_subscribers`), slow_recorder.rs (a recorder that
//! falls behind: within the ring nothing is lost, past it the gap is marked).

mod failures;
mod harness;
mod help;
mod late_subscriber;
mod long_gop;
mod muxer;
mod round_trip;
mod slow_recorder;
