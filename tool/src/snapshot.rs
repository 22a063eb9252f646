//! `cuframes snapshot KEY FILE`: one frame of a publisher as a PNG image, without FFmpeg.
//!
//! It subscribes (COPY mode, so the publisher never waits for it), takes the next frame,
//! brings it to the host (a copy of a host slot; CUDA frames plane by plane with
//! `Frame::download_plane`), unsubscribes, converts it with core's host RGB conversion
//! (`to_rgb_host`, the one `Frame.to_rgb` of the Python package uses) reading the YUV samples
//! as the stream's colour description says (BT.709 limited where it says nothing, as
//! `to_rgb`), and writes an 8-bit RGB PNG atomically (`atomic_file`).

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cuframes_core::format::FrameGeometry;
use cuframes_core::paths::Key;
use cuframes_core::rgb::{
    rgb_size, to_rgb_host, ColourMatrix, ColourRange, RgbDtype, RgbLayout, RgbSpec,
};
use cuframes_core::subscriber::{Frame, Subscriber, SubscriberOptions};
use cuframes_core::wire::MemoryKind;
use cuframes_core::ErrorCode;

use crate::atomic_file::write_atomically;
use crate::console::Console;
use crate::core_err;

/// The pause between two connection attempts while waiting for a publisher.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The largest frame, in pixels, that `snapshot` converts: 8192x8192 (8K UHD and DCI 8K fit).
/// The host copy of the frame and its RGB image take up to 7 bytes a pixel (11 for a CUDA
/// frame, with its plane download), so the tool stays under about 750 MB whatever size a
/// publisher announces; a ring of 16384x16384 would take about 2 GB.
pub const MAX_SNAPSHOT_PIXELS: u64 = 8192 * 8192;

/// What `snapshot` was asked for besides the key and the file.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotOptions {
    /// How long to wait for a frame once subscribed (also the handshake's bound).
    pub timeout: Duration,
    /// How long to wait for a missing publisher (or one without a frame ring yet).
    pub wait_publisher: Duration,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            timeout: Duration::from_secs(5),
            wait_publisher: Duration::ZERO,
        }
    }
}

/// A frame in host memory, laid out as its geometry says, with what to convert it with.
struct HostFrame {
    seq: u64,
    geometry: FrameGeometry,
    bytes: Vec<u8>,
    spec: RgbSpec,
}

pub fn snapshot(
    c: &mut Console<'_>,
    dir: &Path,
    key: &Key,
    file: &Path,
    opts: &SnapshotOptions,
) -> Result<bool> {
    let frame = take_frame(c, dir, key, opts)?;
    let (w, h) = (frame.geometry.width, frame.geometry.height);
    let mut rgb = vec![0u8; rgb_size(w, h, RgbDtype::U8)];
    to_rgb_host(&frame.bytes, &frame.geometry, &frame.spec, &mut rgb).map_err(|e| {
        anyhow!(
            "cannot convert the {} frames of {key} to RGB: {}",
            frame.geometry.format.name(),
            e.message()
        )
    })?;
    write_atomically(file, |f| write_png(f, w, h, &rgb))?;
    let colour = match frame.geometry.format {
        cuframes_core::wire::Format::Rgba | cuframes_core::wire::Format::Bgra => String::new(),
        _ => format!(
            ", read as {} {}",
            matrix_name(frame.spec.matrix),
            range_name(frame.spec.range)
        ),
    };
    writeln!(
        c.out,
        "{key}: frame {} ({w}x{h} {}{colour}) written to {}",
        frame.seq,
        frame.geometry.format.name(),
        file.display()
    )?;
    Ok(true)
}

/// Subscribe (waiting up to `wait_publisher` for a publisher that is not there yet), read one
/// frame, bring it to the host and unsubscribe.
fn take_frame(
    c: &mut Console<'_>,
    dir: &Path,
    key: &Key,
    opts: &SnapshotOptions,
) -> Result<HostFrame> {
    let options = SubscriberOptions {
        runtime_dir: Some(dir.to_path_buf()),
        name: String::from("cuframes snapshot"),
        want_frames: true,
        want_packets: false,
        connect_timeout: opts.timeout.max(Duration::from_millis(100)),
        ..SubscriberOptions::default()
    };
    let deadline = Instant::now() + opts.wait_publisher;
    let mut sub = loop {
        match Subscriber::connect(key.as_str(), &options) {
            Ok(s) => break s,
            // As the FFmpeg inputs wait: for a publisher that is not there (yet), or whose
            // frame ring is not set up yet; any other error (a refusal) is final at once.
            Err(e)
                if matches!(
                    e.code(),
                    ErrorCode::NotFound
                        | ErrorCode::Disconnected
                        | ErrorCode::Io
                        | ErrorCode::Timeout
                ) && Instant::now() < deadline =>
            {
                c.pause(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())))?;
            }
            Err(e) if e.code() == ErrorCode::NotFound && opts.wait_publisher.is_zero() => {
                return Err(anyhow!(
                    "cannot subscribe to {key}: {} (--wait-publisher SECONDS waits for one)",
                    e.message()
                ));
            }
            Err(e) => return Err(anyhow!("cannot subscribe to {key}: {}", e.message())),
        }
    };
    // A ring too large is refused before the read, whose COPY takes a whole frame; a ring
    // replaced by a larger one meanwhile is caught after it, before any copy of our own.
    if let Some(layout) = sub.frame_layout() {
        check_size(key, layout)?;
    }
    let frame = match sub.next_frame(Some(opts.timeout)) {
        Ok(f) => f,
        Err(e) if e.code() == ErrorCode::Timeout => {
            return Err(anyhow!(
                "no frame from {key} within {:.3} s (--timeout SECONDS waits longer)",
                opts.timeout.as_secs_f64()
            ))
        }
        Err(e) => return Err(core_err(e)).context(format!("cannot read a frame of {key}")),
    };
    check_size(key, &frame.layout)?;
    let host =
        to_host(&frame).with_context(|| format!("cannot read frame {} of {key}", frame.seq))?;
    let described = frame.colour;
    let seq = frame.seq;
    let geometry = (*frame.layout).clone();
    frame.release();
    drop(sub);
    // The ring's colour description picks the matrix and range, else BT.709 limited range,
    // as `Frame.to_rgb` of the Python package reads them.
    let spec = RgbSpec {
        matrix: described
            .and_then(|d| d.rgb_matrix())
            .unwrap_or(ColourMatrix::Bt709),
        range: described
            .and_then(|d| d.rgb_range())
            .unwrap_or(ColourRange::Limited),
        dtype: RgbDtype::U8,
        layout: RgbLayout::Hwc,
    };
    Ok(HostFrame {
        seq,
        geometry,
        bytes: host,
        spec,
    })
}

/// An error when frames of `layout` are larger than `MAX_SNAPSHOT_PIXELS` (the size is the
/// publisher's to choose, so it is checked before any buffer of that size is made).
fn check_size(key: &Key, layout: &FrameGeometry) -> Result<()> {
    let pixels = u64::from(layout.width) * u64::from(layout.height);
    if pixels <= MAX_SNAPSHOT_PIXELS {
        return Ok(());
    }
    Err(anyhow!(
        "the frames of {key} are {}x{} ({pixels} pixels); snapshot converts frames of at most \
         {MAX_SNAPSHOT_PIXELS} pixels (8192x8192)",
        layout.width,
        layout.height
    ))
}

/// The frame's bytes on the host, planes at the offsets and pitches of its layout.
fn to_host(frame: &Frame) -> Result<Vec<u8>> {
    let layout = &frame.layout;
    let mut bytes = vec![0u8; layout.frame_size];
    if frame.memory_kind() != MemoryKind::CudaVmm {
        frame.copy_to(&mut bytes).map_err(core_err)?;
        return Ok(bytes);
    }
    for (i, p) in layout.planes().iter().enumerate() {
        let mut dense = vec![0u8; p.row_bytes * p.rows];
        frame.download_plane(i, &mut dense).map_err(core_err)?;
        for (r, row) in dense.chunks_exact(p.row_bytes.max(1)).enumerate() {
            let at = p.offset + r * p.pitch;
            bytes
                .get_mut(at..at + row.len())
                .ok_or_else(|| {
                    anyhow!(
                        "plane {i} lies outside the frame's {} bytes",
                        layout.frame_size
                    )
                })?
                .copy_from_slice(row);
        }
    }
    Ok(bytes)
}

/// `rgb` (rows of `width` R, G, B bytes) as an 8-bit RGB PNG.
fn write_png(out: &mut std::fs::File, width: u32, height: u32, rgb: &[u8]) -> std::io::Result<()> {
    let mut buffered = BufWriter::new(out);
    let mut encoder = png::Encoder::new(&mut buffered, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
    writer
        .write_image_data(rgb)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)?;
    buffered.flush()
}

fn matrix_name(m: ColourMatrix) -> &'static str {
    match m {
        ColourMatrix::Bt601 => "BT.601",
        ColourMatrix::Bt709 => "BT.709",
        ColourMatrix::Bt2020 => "BT.2020",
    }
}

fn range_name(r: ColourRange) -> &'static str {
    match r {
        ColourRange::Limited => "limited range",
        ColourRange::Full => "full range",
    }
}
