//! The buffer the demuxer-pattern readers read into: a fresh packet each time, allocated as
//! FFmpeg allocates an AVPacket's payload.

use cuframes_core::packet_ring::PacketSink;

/// A fresh buffer per packet, made the way the demuxer's AVPacket is: `av_new_packet` mallocs
/// the payload without clearing it (only the padding after it is zeroed), and whoever took the
/// previous packet frees that one. A `vec![0; len]` would clear every byte first: a second
/// pass over each packet that the demuxer does not make, which would make this reader slower
/// than it is in FFmpeg.
pub struct FreshPacket {
    ptr: *mut u8,
    len: usize,
}

/// `AV_INPUT_BUFFER_PADDING_SIZE`: zeroed bytes after every AVPacket's payload.
const AV_PADDING: usize = 64;

impl FreshPacket {
    /// No packet yet.
    pub fn new() -> FreshPacket {
        FreshPacket {
            ptr: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// The previous packet is handed on (freed), a new one of `len` bytes is allocated.
    pub fn renew(&mut self, len: usize) -> &mut [u8] {
        self.release();
        // SAFETY: malloc of a non-zero size; the result is checked for NULL below.
        let ptr = unsafe { libc::malloc(len + AV_PADDING) }.cast::<u8>();
        assert!(!ptr.is_null(), "malloc of {len} bytes failed");
        // SAFETY: the padding lies inside the allocation just made (len + AV_PADDING bytes).
        unsafe { std::ptr::write_bytes(ptr.add(len), 0, AV_PADDING) };
        self.ptr = ptr;
        self.len = len;
        // SAFETY: `len` bytes at `ptr` belong to this allocation, which lives until the next
        // `renew` or the drop, both of which need `&mut self` and so end this borrow first.
        // The bytes are not initialised, like av_new_packet's: the callers only write them
        // (the reader's copy writes every byte) before `payload` reads them, the same contract
        // as the C demuxer's buffer callback (src/api/packet.rs).
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    /// The packet's bytes (after a successful read has written them all).
    pub fn payload(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: `len` bytes of our live allocation, written by the read that filled them.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn release(&mut self) {
        // SAFETY: `ptr` is NULL or our own malloc'd block, freed once (it is reset here).
        unsafe { libc::free(self.ptr.cast()) };
        self.ptr = std::ptr::null_mut();
        self.len = 0;
    }
}

impl Drop for FreshPacket {
    fn drop(&mut self) {
        self.release();
    }
}

impl PacketSink for FreshPacket {
    fn buffer(&mut self, len: usize) -> cuframes_core::Result<&mut [u8]> {
        Ok(self.renew(len))
    }
}
