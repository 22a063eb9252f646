//! Every `typedef struct` of the public headers (`include/*.h`) against its Rust twin: size,
//! alignment, and the offset and size of every field. The checks are generated from one list
//! ([`layout_checks!`]); [`every_typedef_struct_of_the_headers_is_checked`] parses the headers
//! and fails for a struct the list lacks, so a new struct cannot go unchecked.
//!
//! - API structs (`cuframes.h`) against the `repr(C)` structs of `cuframes::abi`;
//! - wire structs (`cuframes_protocol.h`) against `cuframes_core::wire`, more strictly: the
//!   same kind of every field (integer width and signedness, arrays, nested structs), and the
//!   fields listed tile the struct (the wire structs have no padding), so a field left out of
//!   the list is caught too.

use std::collections::BTreeSet;
use std::mem::{align_of, offset_of, size_of, size_of_val};
use std::path::Path;

use cuframes::abi;
use cuframes_conformance::c;
use cuframes_core::wire::ack_page::AckPage;
use cuframes_core::wire::frame::{FrameMeta, SharedHeader, SlotDescriptor, SubscriberSlot};
use cuframes_core::wire::gop_store::{GopStoreBank, GopStoreEntry, GopStoreHeader};
use cuframes_core::wire::packet::{PacketRingHeader, PacketSlotEntry};

/// Compares an API struct of the headers with the `repr(C)` struct the library fills: the same
/// size and alignment, and every field at the same offset with the same size (API structs may
/// have padding, so the fields need not tile the struct).
macro_rules! same_layout {
    ($c:ty, $r:ty { $($f:ident),+ $(,)? }) => {{
        assert_eq!(size_of::<$c>(), size_of::<$r>(), "sizeof {}", stringify!($c));
        assert_eq!(align_of::<$c>(), align_of::<$r>(), "alignof {}", stringify!($c));
        // SAFETY: both are plain C structs of integers, arrays and raw pointers, for which
        // all-zero bytes are a valid value.
        let (c0, r0): ($c, $r) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        $(
            assert_eq!(offset_of!($c, $f), offset_of!($r, $f), "offset of {}.{}", stringify!($c), stringify!($f));
            assert_eq!(size_of_val(&c0.$f), size_of_val(&r0.$f), "size of {}.{}", stringify!($c), stringify!($f));
        )+
    }};
}

/// What a field holds, independent of the language: integer width and signedness, byte
/// arrays (`char` and `uint8_t` alike), arrays and the nested wire structs.
trait Kind {
    fn kind() -> String;
}

macro_rules! kind {
    ($($t:ty => $k:expr),+ $(,)?) => {
        $(impl Kind for $t {
            fn kind() -> String {
                $k.to_string()
            }
        })+
    };
}

kind! {
    u8 => "byte",
    i8 => "byte",
    u32 => "u32",
    i32 => "i32",
    u64 => "u64",
    i64 => "i64",
    c::cuframes_frame_meta => "frame meta",
    FrameMeta => "frame meta",
    c::cuframes_slot_descriptor => "slot descriptor",
    SlotDescriptor => "slot descriptor",
    c::cuframes_subscriber_slot => "subscriber slot",
    SubscriberSlot => "subscriber slot",
    c::cuframes_gop_store_bank => "GOP store bank",
    GopStoreBank => "GOP store bank",
}

impl<T: Kind, const N: usize> Kind for [T; N] {
    fn kind() -> String {
        format!("[{}; {N}]", T::kind())
    }
}

/// Size and kind of the field a projection closure returns.
fn field<S, F: Kind>(_: fn(&S) -> &F) -> (usize, String) {
    (size_of::<F>(), F::kind())
}

/// Compares a header struct with its Rust twin. Each field is listed once; the listed fields
/// must tile the struct (the wire structs have no padding), so a field left out of the list is
/// caught too. Returns the mismatches.
macro_rules! compare_struct {
    ($c:ty, $r:ty { $($f:ident),+ $(,)? }) => {{
        let mut errors: Vec<String> = Vec::new();
        let (mut next, mut c_next) = (0usize, 0usize);
        $(
            let name = concat!(stringify!($c), ".", stringify!($f));
            let (c_off, r_off) = (offset_of!($c, $f), offset_of!($r, $f));
            let (c_size, c_kind) = field(|s: &$c| &s.$f);
            let (r_size, r_kind) = field(|s: &$r| &s.$f);
            if c_off != r_off {
                errors.push(format!("{name}: offset {c_off:#x} in the header, {r_off:#x} in Rust"));
            }
            if c_size != r_size {
                errors.push(format!("{name}: size {c_size} in the header, {r_size} in Rust"));
            }
            if c_kind != r_kind {
                errors.push(format!("{name}: {c_kind} in the header, {r_kind} in Rust"));
            }
            if r_off != next {
                errors.push(format!(
                    "{name}: starts at {r_off:#x}, the previous field listed ended at {next:#x}"
                ));
            }
            if c_off != c_next {
                errors.push(format!(
                    "{name}: starts at {c_off:#x} in the header, the previous field listed ended at {c_next:#x}"
                ));
            }
            next = r_off + r_size;
            c_next = c_off + c_size;
        )+
        let (c_size, r_size) = (size_of::<$c>(), size_of::<$r>());
        if c_size != r_size {
            errors.push(format!("sizeof {}: {c_size} in the header, {r_size} in Rust", stringify!($c)));
        }
        if c_next != c_size {
            errors.push(format!(
                "{}: the fields listed end at {c_next:#x}, the struct at {c_size:#x}",
                stringify!($c)
            ));
        }
        if next != r_size {
            errors.push(format!(
                "{}: the fields listed end at {next:#x}, the struct at {r_size:#x}",
                stringify!($r)
            ));
        }
        let (c_align, r_align) = (align_of::<$c>(), align_of::<$r>());
        if c_align != r_align {
            errors.push(format!("alignment of {}: {c_align} in the header, {r_align} in Rust", stringify!($c)));
        }
        errors
    }};
}

/// Generates, from one list of `header typedef => Rust struct { fields }`:
/// - `CHECKED`: the typedef names that have a check;
/// - `check_api_structs()`: `same_layout!` of every API struct (panics on the first mismatch);
/// - `wire_struct_errors()`: `compare_struct!` of every wire struct (all mismatches).
macro_rules! layout_checks {
    (
        api { $($ca:ident => $ra:ty { $($fa:ident),+ $(,)? }),+ $(,)? }
        wire { $($cw:ident => $rw:ty { $($fw:ident),+ $(,)? }),+ $(,)? }
    ) => {
        const CHECKED: &[&str] = &[$(stringify!($ca)),+, $(stringify!($cw)),+];

        fn check_api_structs() {
            $(same_layout!(c::$ca, $ra { $($fa),+ });)+
        }

        fn wire_struct_errors() -> Vec<String> {
            let mut errors = Vec::new();
            $(errors.extend(compare_struct!(c::$cw, $rw { $($fw),+ }));)+
            errors
        }
    };
}

layout_checks! {
    api {
        cuframes_frame_layout_t => abi::CFrameLayout {
            format, width, height, plane_count, offset, pitch, row_bytes, rows, frame_size,
        },
        cuframes_publisher_options_t => abi::CPublisherOptions {
            runtime_dir, file_mode, allowed_uid, allowed_gid, handshake_timeout_ms,
            allow_legacy_subscribers, max_subscribers_per_uid, max_subscribers_per_pid,
        },
        cuframes_frame_ring_config_t => abi::CFrameRingConfig {
            format, width, height, ring_size, policy, ack_timeout_ms, memory_kind, cuda_device,
            colour,
        },
        cuframes_colour_t => abi::CColour {
            present, sar_num, sar_den, range, primaries, transfer, matrix, chroma_location,
            reserved,
        },
        cuframes_slot_t => abi::CSlot {
            seq, index, memory_kind, address,
        },
        cuframes_subscriber_info_t => abi::CSubscriberInfo {
            bit, pid, name, wants_frames, wants_packets, lag, last_seen_seq, last_ack_ns,
            delivered, dropped_overrun, dropped_torn,
        },
        cuframes_subscriber_options_t => abi::CSubscriberOptions {
            runtime_dir, name, cuda_device, mode, flags, connect_timeout_ms,
            accept_zero_copy_overwrite, spin_us, reconnect_ms, max_packet_ring_size,
            max_packet_size, publisher_uid,
        },
        cuframes_frame_info_t => abi::CFrameInfo {
            seq, pts_ns, memory_kind, zero_copy, plane_count, pitch, data,
        },
        cuframes_frame_stats_t => abi::CFrameStats {
            delivered, dropped_overrun, dropped_torn,
        },
        cuframes_packet_ring_config_t => abi::CPacketRingConfig {
            codec_id, ring_slots, data_size, extradata_size, extradata,
        },
        cuframes_packet_info_t => abi::CPacketInfo {
            seq, pts_ns, dts_ns, flags, size,
        },
        cuframes_packet_stats_t => abi::CPacketStats {
            packets, bytes, overruns, last_seq, oversized,
        },
        cuframes_publisher_wait_stats_t => abi::CPublisherWaitStats {
            ack_waits, ack_wait_ns, publication_waits, publication_wait_ns, stream_publications,
            stream_publication_ns, stream_publication_max_ns,
        },
        cuframes_codec_video_info_t => abi::CCodecVideoInfo {
            width, height, profile, level, chroma_format, bit_depth,
        },
    }
    wire {
        cuframes_frame_meta_t => FrameMeta {
            format, width, height, pitch_y, pitch_uv, bits_per_pixel, frame_size_bytes, reserved,
        },
        cuframes_slot_descriptor_t => SlotDescriptor {
            seq, pts_ns, ack_bitmap, written_bytes, reserved_mem_handle, reserved_external,
            reserved_a, reserved_b,
        },
        cuframes_subscriber_slot_t => SubscriberSlot {
            state, consumer_pid, last_seen_seq, last_ack_ns, consumer_name, reserved,
        },
        cuframes_ack_page_t => AckPage {
            magic, version, ack_count, ready, acked_seq, last_seen_seq, last_ack_ns, delivered,
            dropped_overrun, dropped_torn, reserved_b,
        },
        cuframes_gop_store_header_t => GopStoreHeader {
            magic, version, bank_entries, reserved_a, bank_data_size, reserved_b, banks,
        },
        cuframes_gop_store_bank_t => GopStoreBank { key_seq, count, reserved },
        cuframes_gop_store_entry_t => GopStoreEntry {
            pts_ns, dts_ns, data_offset, data_size, flags,
        },
        cuframes_shared_header_t => SharedHeader {
            magic, proto_version, lib_version_major, lib_version_minor, lib_version_patch,
            reserved_a, producer_pid, ring_size, ownership_mode, policy, max_subscribers, meta,
            reserved_events, global_seq, subscriber_bitmap, shutdown_flag, reserved_b, slots,
            subscribers,
        },
        cuframes_packet_ring_header_t => PacketRingHeader {
            magic, proto_version, ring_slots, data_size, codec_id, codec_extradata_size,
            producer_pid, global_seq, last_keyframe_seq, write_offset, shutdown_flag,
            codec_extradata,
        },
        cuframes_packet_slot_entry_t => PacketSlotEntry {
            seq, pts_ns, dts_ns, data_offset, data_size, flags, reserved,
        },
    }
}

#[test]
fn api_structs_match() {
    check_api_structs();
}

#[test]
fn wire_structs_match_field_by_field() {
    let errors = wire_struct_errors();
    assert!(
        errors.is_empty(),
        "header and Rust layouts differ:\n{}",
        errors.join("\n")
    );
}

/// The names of the `typedef struct NAME { ... } NAME_t;` definitions of a header (opaque
/// handle typedefs, which have no body, are not layouts).
fn typedef_structs(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_struct = false;
    for line in header.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("typedef struct") && trimmed.ends_with('{') {
            assert!(!in_struct, "nested typedef struct: {line}");
            in_struct = true;
        } else if in_struct && line.starts_with('}') {
            let name = trimmed[1..].trim().trim_end_matches(';').trim();
            names.push(name.to_owned());
            in_struct = false;
        }
    }
    assert!(!in_struct, "a typedef struct without its closing line");
    names
}

#[test]
fn every_typedef_struct_of_the_headers_is_checked() {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let mut declared = BTreeSet::new();
    let mut headers = 0;
    for entry in std::fs::read_dir(&include).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "h") {
            headers += 1;
            declared.extend(typedef_structs(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    assert!(
        headers >= 2,
        "read only {headers} headers in {}",
        include.display()
    );
    assert!(declared.len() >= 21, "found only {declared:?}");
    let checked: BTreeSet<String> = CHECKED.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        checked.len(),
        CHECKED.len(),
        "a struct is listed twice: {CHECKED:?}"
    );
    let unchecked: Vec<_> = declared.difference(&checked).collect();
    let stale: Vec<_> = checked.difference(&declared).collect();
    assert!(
        unchecked.is_empty() && stale.is_empty(),
        "structs of the headers without a layout check (add them to layout_checks!): \
         {unchecked:?}; checks of structs no header declares: {stale:?}"
    );
}
