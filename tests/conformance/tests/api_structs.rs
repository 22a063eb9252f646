//! The C API structs of `cuframes.h` (as bindgen reads them) and the `repr(C)` structs the
//! library fills: same size, alignment, and offset and size of every field.

use std::mem::{align_of, offset_of, size_of, size_of_val};

use cuframes::abi;
use cuframes_conformance::c;

macro_rules! same_layout {
    ($c:ty, $r:ty { $($f:ident),+ $(,)? }) => {{
        assert_eq!(size_of::<$c>(), size_of::<$r>(), "sizeof {}", stringify!($c));
        assert_eq!(align_of::<$c>(), align_of::<$r>(), "alignof {}", stringify!($c));
        let (c0, r0): ($c, $r) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        $(
            assert_eq!(offset_of!($c, $f), offset_of!($r, $f), "offset of {}.{}", stringify!($c), stringify!($f));
            assert_eq!(size_of_val(&c0.$f), size_of_val(&r0.$f), "size of {}.{}", stringify!($c), stringify!($f));
        )+
    }};
}

#[test]
fn frame_layout() {
    same_layout!(
        c::cuframes_frame_layout,
        abi::CFrameLayout {
            format,
            width,
            height,
            plane_count,
            offset,
            pitch,
            row_bytes,
            rows,
            frame_size
        }
    );
}

#[test]
fn publisher_structs() {
    same_layout!(
        c::cuframes_publisher_options,
        abi::CPublisherOptions {
            runtime_dir,
            file_mode,
            allowed_uid,
            allowed_gid,
            handshake_timeout_ms,
            allow_legacy_subscribers,
            max_subscribers_per_uid,
            max_subscribers_per_pid
        }
    );
    same_layout!(
        c::cuframes_frame_ring_config,
        abi::CFrameRingConfig {
            format,
            width,
            height,
            ring_size,
            policy,
            ack_timeout_ms,
            memory_kind,
            cuda_device,
            colour
        }
    );
    same_layout!(
        c::cuframes_colour,
        abi::CColour {
            present,
            sar_num,
            sar_den,
            range,
            primaries,
            transfer,
            matrix,
            chroma_location,
            reserved
        }
    );
    same_layout!(
        c::cuframes_slot,
        abi::CSlot {
            seq,
            index,
            memory_kind,
            address
        }
    );
    same_layout!(
        c::cuframes_subscriber_info,
        abi::CSubscriberInfo {
            bit,
            pid,
            name,
            wants_frames,
            wants_packets,
            lag,
            last_seen_seq,
            last_ack_ns,
            delivered,
            dropped_overrun,
            dropped_torn
        }
    );
}

#[test]
fn subscriber_structs() {
    same_layout!(
        c::cuframes_subscriber_options,
        abi::CSubscriberOptions {
            runtime_dir,
            name,
            cuda_device,
            mode,
            flags,
            connect_timeout_ms,
            accept_zero_copy_overwrite,
            spin_us,
            reconnect_ms,
            max_packet_ring_size,
            max_packet_size,
            publisher_uid
        }
    );
    same_layout!(
        c::cuframes_frame_info,
        abi::CFrameInfo {
            seq,
            pts_ns,
            memory_kind,
            zero_copy,
            plane_count,
            pitch,
            data
        }
    );
    same_layout!(
        c::cuframes_frame_stats,
        abi::CFrameStats {
            delivered,
            dropped_overrun,
            dropped_torn
        }
    );
}

#[test]
fn packet_structs() {
    same_layout!(
        c::cuframes_packet_ring_config,
        abi::CPacketRingConfig {
            codec_id,
            ring_slots,
            data_size,
            extradata_size,
            extradata
        }
    );
    same_layout!(
        c::cuframes_packet_info,
        abi::CPacketInfo {
            seq,
            pts_ns,
            dts_ns,
            flags,
            size
        }
    );
    same_layout!(
        c::cuframes_packet_stats,
        abi::CPacketStats {
            packets,
            bytes,
            overruns,
            last_seq,
            oversized
        }
    );
}
