//! `cuframes_frame_layout_t`: plane geometry for C callers.

use cuframes_core::format::FrameLayout;

/// Mirrors `cuframes_frame_layout_t` in cuframes.h.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CFrameLayout {
    pub format: u32,
    pub width: u32,
    pub height: u32,
    pub plane_count: u32,
    pub offset: [u64; 3],
    pub pitch: [u32; 3],
    pub row_bytes: [u32; 3],
    pub rows: [u32; 3],
    pub frame_size: u64,
}

impl From<&FrameLayout> for CFrameLayout {
    fn from(l: &FrameLayout) -> Self {
        let mut c = CFrameLayout {
            format: l.format as u32,
            width: l.width,
            height: l.height,
            plane_count: l.planes().len() as u32,
            frame_size: l.frame_size as u64,
            ..Default::default()
        };
        for (i, p) in l.planes().iter().enumerate() {
            c.offset[i] = p.offset as u64;
            c.pitch[i] = p.pitch as u32;
            c.row_bytes[i] = p.row_bytes as u32;
            c.rows[i] = p.rows as u32;
        }
        c
    }
}
