//! The path a deployment takes, proven against real components nobody here wrote: an RTSP
//! camera (GStreamer's RTSP server, tests/rtsp/camera.py) relayed into the rings by the
//! cuframes FFmpeg build, recorded, restarted under supervision, and restreamed to the
//! network over RTSP and MPEG-TS/UDP. Everything runs on the loopback address, bounded in
//! time; the commands are those of contrib/systemd/ and docs/operations.md.
//!
//! Needs `build/ffmpeg/bin/ffmpeg` (or `$CUFRAMES_FFMPEG`) and GStreamer's RTSP server for
//! Debian's python3 (scripts/install-deps.sh installs it); without either it prints SKIPPED
//! with the reason and passes.
//!
//! Files: camera.rs (the camera, clips, a shell supervision loop), annexb.rs (access units
//! compared NAL unit by NAL unit), pipeline.rs (the units' command lines, ring waits,
//! recording checks), publish.rs, both_rings.rs, outage.rs, restream.rs, units.rs.

mod annexb;
mod both_rings;
mod camera;
mod outage;
mod pipeline;
mod publish;
mod restream;
mod units;
