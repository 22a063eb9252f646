//! Copies of a caller's host planes (each with its own stride) into an acquired slot: a
//! host slot row by row, a CUDA slot through the ring's own stream; and the publish of a
//! host frame whole (acquire, copy, publish).

use super::acks::AckAuthority;
use super::config::AcquiredSlot;
use super::frame_writer::FrameWriter;
use crate::error::{Error, ErrorCode, Result};
use crate::format::FrameGeometry;
use crate::wire::MemoryKind;

impl FrameWriter {
    /// Take the next slot (waiting for ACKs under STRICT_WAIT, asked of `acks`), copy a host
    /// frame into it and publish it; a failed copy gives the slot back.
    pub(crate) fn publish_host_planes(
        &self,
        acks: &dyn AckAuthority,
        planes: &[&[u8]],
        strides: &[usize],
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let slot = self.acquire(acks)?;
        if let Err(e) = self.write_host_planes(&slot, planes, strides) {
            self.abandon(slot);
            return Err(e);
        }
        self.publish(slot, pts_ns)
    }

    /// Copy a host frame (planes with their own strides) into a host slot.
    pub(crate) fn write_host_planes(
        &self,
        slot: &AcquiredSlot,
        planes: &[&[u8]],
        strides: &[usize],
    ) -> Result<()> {
        let layout = &self.layout;
        check_plane_count(layout, planes.len(), strides.len())?;
        if slot.memory_kind == MemoryKind::CudaVmm {
            // Our own stream, in the ring's context: pushed for the copies, popped after (the
            // caller's current context is current again when this returns).
            let (dev, stream) = self.cuda()?;
            let _current = dev.push_current()?;
            let base = self.slots.slot_address(self.slot_of(slot.seq));
            for (p, (src, stride)) in layout.planes().iter().zip(planes.iter().zip(strides)) {
                // SAFETY: the destination is plane `p` of the acquired slot, a VMM mapping of
                // ours of at least frame_size bytes (the layout keeps the plane inside it)
                // that lives as long as `self`; the copy completes before this returns (the
                // synchronize below); `stream` is our own.
                unsafe {
                    crate::cuda::copy_htod_2d_async(
                        base + p.offset as u64,
                        p.pitch,
                        src,
                        *stride,
                        p.row_bytes,
                        p.rows,
                        stream,
                    )
                }?;
            }
            return stream.synchronize();
        }
        let base = self.slots.slot_address(self.slot_of(slot.seq)) as *mut u8;
        for (i, (p, (src, stride))) in layout
            .planes()
            .iter()
            .zip(planes.iter().zip(strides))
            .enumerate()
        {
            let span = p
                .span_at(*stride)
                .map_err(|e| Error::invalid(format!("plane {i}: {}", e.message())))?;
            if src.len() < span {
                return Err(Error::invalid(format!(
                    "plane {i}: buffer of {} bytes too small for {} rows of {} bytes at \
                     stride {stride} ({span} bytes)",
                    src.len(),
                    p.rows,
                    p.row_bytes
                )));
            }
            for row in 0..p.rows {
                let s = &src[row * stride..row * stride + p.row_bytes];
                // SAFETY: the slot mapping is writable and at least frame_size bytes; the
                // layout keeps offset + row * pitch + row_bytes within it.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        s.as_ptr(),
                        base.add(p.offset + row * p.pitch),
                        p.row_bytes,
                    )
                }
            }
        }
        Ok(())
    }
}

/// The caller must give one pointer and one stride per plane of the ring's format.
pub(super) fn check_plane_count(
    layout: &FrameGeometry,
    planes: usize,
    strides: usize,
) -> Result<()> {
    if planes != layout.planes().len() || strides != planes {
        return Err(Error::new(
            ErrorCode::Format,
            format!(
                "{} has {} planes; {planes} given",
                layout.format.name(),
                layout.planes().len()
            ),
        ));
    }
    Ok(())
}
