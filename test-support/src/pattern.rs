//! The frame pattern every publisher writes and every subscriber checks: a byte per
//! (seq, offset), laid out over dense planes.

/// The byte every subscriber expects at `offset` of frame `seq`.
pub fn pattern_byte(seq: u64, offset: usize) -> u8 {
    (seq.wrapping_mul(0x9E37_79B9)
        .wrapping_add(offset as u64 * 31)
        >> 3) as u8
}

/// Fill a host buffer with the pattern of `seq`.
pub fn fill_pattern(seq: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(seq, i);
    }
}

/// Check that every byte of every plane's rows matches the pattern of `seq` (the pattern
/// is laid out over the dense planes the publisher was given). Host frames, COPY or
/// zero-copy: each plane is copied out (a zero-copy slot may be rewritten under DROP_OLDEST,
/// so no slice of it is formed).
pub fn verify_frame(frame: &cuframes_core::subscriber::Frame, dense: &[Vec<u8>]) -> bool {
    let mut rows = Vec::new();
    for (i, plane) in dense.iter().enumerate() {
        rows.resize(plane.len(), 0);
        frame.download_plane(i, &mut rows).unwrap();
        if rows != *plane {
            return false;
        }
    }
    true
}

/// Dense planes of frame `seq`: what a publisher writes and every subscriber expects.
pub fn planes_for(layout: &cuframes_core::format::FrameGeometry, seq: u64) -> Vec<Vec<u8>> {
    layout
        .planes()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut v = vec![0u8; p.row_bytes * p.rows];
            fill_pattern(seq * 4 + i as u64, &mut v);
            v
        })
        .collect()
}

/// Publish the pattern planes of `seq` through the host-copy convenience.
pub fn publish_pattern(
    p: &cuframes_core::publisher::Publisher,
    seq: u64,
    pts_ns: Option<i64>,
) -> cuframes_core::Result<(u64, Vec<Vec<u8>>)> {
    let layout = p.frame_layout().unwrap().clone();
    let planes = planes_for(&layout, seq);
    let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
    let published = p.publish_host_planes(&refs, &strides, pts_ns)?;
    Ok((published, planes))
}
