//! The public headers (`include/cuframes.h` and `include/cuframes_protocol.h`, as bindgen reads
//! them) and the Rust side agree on values: the same enum values, the same constants, and the
//! same signatures of the functions checked here. The struct layouts are compared in
//! `struct_layouts.rs`.

use std::collections::BTreeSet;

use cuframes_conformance::c;
use cuframes_core::tlv::msg_type;
use cuframes_core::wire::frame;
use cuframes_core::wire::packet;
use cuframes_core::wire::{
    self, Format, MemoryKind, Policy, ShutdownReason, SubscriberMode, SubscriberState,
};
use cuframes_core::ErrorCode;

/// One row per C name: `(name, value in the header, value in Rust)`.
macro_rules! rows {
    ($($cname:ident => $r:expr),+ $(,)?) => {
        [$((stringify!($cname), c::$cname as i128, ($r) as i128)),+]
    };
}

/// Every row agrees, and the rows cover exactly the values the Rust side knows.
fn check_values(
    what: &str,
    rows: &[(&str, i128, i128)],
    rust_values: impl IntoIterator<Item = i128>,
) {
    let mut errors = Vec::new();
    for &(name, c_value, r_value) in rows {
        if c_value != r_value {
            errors.push(format!(
                "{what}: {name} = {c_value} in the header, {r_value} in Rust"
            ));
        }
    }
    let listed: BTreeSet<i128> = rows.iter().map(|r| r.2).collect();
    if listed.len() != rows.len() {
        errors.push(format!("{what}: two names share a value: {rows:?}"));
    }
    let rust: BTreeSet<i128> = rust_values.into_iter().collect();
    if listed != rust {
        errors.push(format!(
            "{what}: the header declares {listed:?}, Rust knows {rust:?}"
        ));
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The values a Rust `from_*` decoder accepts in a generous range.
fn accepted<T>(decode: impl Fn(i128) -> Option<T>) -> Vec<i128> {
    (-1024..1024).filter(|&v| decode(v).is_some()).collect()
}

#[test]
fn error_codes_match() {
    let rows = rows! {
        CUFRAMES_OK => ErrorCode::Ok,
        CUFRAMES_ERR_INVALID_ARG => ErrorCode::InvalidArg,
        CUFRAMES_ERR_PROTOCOL => ErrorCode::Protocol,
        CUFRAMES_ERR_FORMAT => ErrorCode::Format,
        CUFRAMES_ERR_TOO_MANY => ErrorCode::TooMany,
        CUFRAMES_ERR_NOT_FOUND => ErrorCode::NotFound,
        CUFRAMES_ERR_ALREADY_EXISTS => ErrorCode::AlreadyExists,
        CUFRAMES_ERR_TIMEOUT => ErrorCode::Timeout,
        CUFRAMES_ERR_DISCONNECTED => ErrorCode::Disconnected,
        CUFRAMES_ERR_PACKET_OVERRUN => ErrorCode::PacketOverrun,
        CUFRAMES_ERR_PERMISSION => ErrorCode::Permission,
        CUFRAMES_ERR_CUDA => ErrorCode::Cuda,
        CUFRAMES_ERR_IO => ErrorCode::Io,
        CUFRAMES_ERR_NO_MEMORY => ErrorCode::NoMemory,
    };
    check_values("cuframes_error_t", &rows, ErrorCode::ALL.map(|e| e as i128));
    // The names the Rust side prints are the header's names.
    for (name, value, _) in rows {
        let code = ErrorCode::from_i32(value as i32).unwrap();
        assert_eq!(code.name(), name, "ErrorCode::name() of {value}");
    }
    assert_eq!(
        accepted(|v| i32::try_from(v).ok().and_then(ErrorCode::from_i32)),
        ErrorCode::ALL
            .map(|e| e as i128)
            .iter()
            .rev()
            .copied()
            .collect::<Vec<_>>(),
    );
}

#[test]
fn formats_and_modes_match() {
    let formats = rows! {
        CUFRAMES_FORMAT_NONE => Format::None,
        CUFRAMES_FORMAT_NV12 => Format::Nv12,
        CUFRAMES_FORMAT_P010 => Format::P010,
        CUFRAMES_FORMAT_P016 => Format::P016,
        CUFRAMES_FORMAT_YUV420P => Format::Yuv420p,
        CUFRAMES_FORMAT_YUV444P => Format::Yuv444p,
        CUFRAMES_FORMAT_RGBA => Format::Rgba,
        CUFRAMES_FORMAT_BGRA => Format::Bgra,
    };
    check_values(
        "cuframes_format_t",
        &formats,
        Format::ALL.map(|f| f as i128),
    );
    check_values(
        "cuframes_format_t (decoder)",
        &formats,
        accepted(|v| u32::try_from(v).ok().and_then(Format::from_u32)),
    );
    // The C name ends in the Rust name (CUFRAMES_FORMAT_YUV420P ~ "yuv420p").
    for (name, value, _) in formats {
        let f = Format::from_u32(value as u32).unwrap();
        assert_eq!(
            name.strip_prefix("CUFRAMES_FORMAT_")
                .unwrap()
                .to_lowercase(),
            f.name()
        );
    }

    let modes = rows! {
        CUFRAMES_MODE_COPY => SubscriberMode::Copy,
        CUFRAMES_MODE_ZERO_COPY => SubscriberMode::ZeroCopy,
    };
    check_values(
        "cuframes_subscriber_mode_t",
        &modes,
        accepted(|v| u32::try_from(v).ok().and_then(SubscriberMode::from_u32)),
    );
}

#[test]
fn value_sets_of_integer_fields_match() {
    check_values(
        "policy",
        &rows! {
            CUFRAMES_POLICY_DROP_OLDEST => Policy::DropOldest,
            CUFRAMES_POLICY_STRICT_WAIT => Policy::StrictWait,
        },
        accepted(|v| u64::try_from(v).ok().and_then(Policy::from_u64)),
    );
    check_values(
        "subscriber state",
        &rows! {
            CUFRAMES_SUBSCRIBER_FREE => SubscriberState::Free,
            CUFRAMES_SUBSCRIBER_CONNECTING => SubscriberState::Connecting,
            CUFRAMES_SUBSCRIBER_ACTIVE => SubscriberState::Active,
            CUFRAMES_SUBSCRIBER_DRAINING => SubscriberState::Draining,
        },
        accepted(|v| u64::try_from(v).ok().and_then(SubscriberState::from_u64)),
    );
    check_values(
        "memory kind (R14)",
        &rows! {
            CUFRAMES_MEMORY_CUDA_VMM => MemoryKind::CudaVmm,
            CUFRAMES_MEMORY_HOST_MEMFD => MemoryKind::HostMemfd,
        },
        accepted(|v| u32::try_from(v).ok().and_then(MemoryKind::from_u32)),
    );
    check_values(
        "shutdown reason",
        &rows! {
            CUFRAMES_SHUTDOWN_NORMAL => ShutdownReason::Normal,
            CUFRAMES_SHUTDOWN_ERROR => ShutdownReason::Error,
            CUFRAMES_SHUTDOWN_UPGRADE => ShutdownReason::Upgrade,
            CUFRAMES_SHUTDOWN_NEW_RING => ShutdownReason::NewRing,
        },
        accepted(|v| u32::try_from(v).ok().and_then(ShutdownReason::from_u32)),
    );
}

#[test]
fn message_types_match() {
    let rows = rows! {
        CUFRAMES_MSG_HELLO_REQ => msg_type::HELLO_REQ,
        CUFRAMES_MSG_HELLO_RESP => msg_type::HELLO_RESP,
        CUFRAMES_MSG_SUBSCRIBE_REQ => msg_type::SUBSCRIBE_REQ,
        CUFRAMES_MSG_SUBSCRIBE_RESP => msg_type::SUBSCRIBE_RESP,
        CUFRAMES_MSG_VMM_FDS => msg_type::VMM_FDS,
        CUFRAMES_MSG_UNSUBSCRIBE => msg_type::UNSUBSCRIBE,
        CUFRAMES_MSG_EVENT_FD_LEGACY => msg_type::EVENT_FD_LEGACY,
        CUFRAMES_MSG_SHUTDOWN => msg_type::SHUTDOWN,
        CUFRAMES_MSG_PING => msg_type::PING,
        CUFRAMES_MSG_PONG => msg_type::PONG,
        CUFRAMES_MSG_ERROR => msg_type::ERROR,
    };
    check_values("message type", &rows, rows.map(|r| r.2));
}

#[test]
fn constants_match() {
    // The 64-bit sentinels have the types of the fields they are stored in.
    const _: u64 = c::CUFRAMES_INVALID_SEQ;
    const _: i64 = c::CUFRAMES_NO_PTS;

    let rows = rows! {
        CUFRAMES_PROTOCOL_MAGIC_V4 => wire::FRAME_MAGIC,
        CUFRAMES_PROTOCOL_MAGIC_LEGACY => wire::LEGACY_FRAME_MAGIC,
        CUFRAMES_PACKET_MAGIC => wire::PACKET_MAGIC,
        CUFRAMES_PROTOCOL_VERSION => wire::PROTOCOL_VERSION,
        CUFRAMES_LIB_VERSION_MAJOR => wire::LIB_VERSION.0,
        CUFRAMES_LIB_VERSION_MINOR => wire::LIB_VERSION.1,
        CUFRAMES_LIB_VERSION_PATCH => wire::LIB_VERSION.2,
        CUFRAMES_MAX_RING_SIZE => wire::MAX_RING_SIZE,
        CUFRAMES_MAX_SUBSCRIBER_SLOTS => wire::MAX_SUBSCRIBER_SLOTS,
        CUFRAMES_MAX_SUBSCRIBERS => wire::MAX_SUBSCRIBERS,
        CUFRAMES_MAX_PACKET_RING_SLOTS => wire::MAX_PACKET_RING_SLOTS,
        CUFRAMES_DEFAULT_PACKET_RING_SLOTS => wire::DEFAULT_PACKET_RING_SLOTS,
        CUFRAMES_DEFAULT_PACKET_DATA_SIZE => wire::DEFAULT_PACKET_DATA_SIZE,
        CUFRAMES_MAX_EXTRADATA_SIZE => wire::MAX_EXTRADATA_SIZE,
        CUFRAMES_MAX_KEY_LEN => wire::MAX_KEY_LEN,
        CUFRAMES_MAX_CONSUMER_NAME_LEN => wire::MAX_CONSUMER_NAME_LEN,
        CUFRAMES_INVALID_SEQ => wire::INVALID_SEQ,
        CUFRAMES_NO_PTS => wire::NO_PTS,
        CUFRAMES_FRAME_SHM_SIZE => frame::FRAME_SHM_SIZE,
        CUFRAMES_FRAME_SLOTS_OFFSET => frame::FRAME_SLOTS_OFFSET,
        CUFRAMES_FRAME_SUBSCRIBERS_OFFSET => frame::FRAME_SUBSCRIBERS_OFFSET,
        CUFRAMES_FRAME_WAITERS_OFFSET => frame::FRAME_WAITERS_OFFSET,
        CUFRAMES_FRAME_MEMORY_KIND_OFFSET => frame::FRAME_MEMORY_KIND_OFFSET,
        CUFRAMES_SUB_DELIVERED_OFFSET => frame::SUB_DELIVERED_OFFSET,
        CUFRAMES_SUB_DROPPED_OVERRUN_OFFSET => frame::SUB_DROPPED_OVERRUN_OFFSET,
        CUFRAMES_SUB_DROPPED_TORN_OFFSET => frame::SUB_DROPPED_TORN_OFFSET,
        CUFRAMES_PACKET_HEADER_SIZE => packet::PACKET_HEADER_SIZE,
        CUFRAMES_PACKET_SLOT_SIZE => packet::PACKET_SLOT_SIZE,
        CUFRAMES_OWNERSHIP_LIBRARY => wire::OWNERSHIP_LIBRARY,
        CUFRAMES_SUBSCRIBE_WANTS_FRAMES => wire::SUBSCRIBE_WANTS_FRAMES,
        CUFRAMES_SUBSCRIBE_WANTS_PACKETS => wire::SUBSCRIBE_WANTS_PACKETS,
        CUFRAMES_SUBSCRIBE_ACK_PAGE => wire::SUBSCRIBE_ACK_PAGE,
        CUFRAMES_PUBLISHER_ACK_PAGES => wire::PUBLISHER_ACK_PAGES,
        CUFRAMES_ACK_PAGE_MAGIC => wire::ack_page::ACK_PAGE_MAGIC,
        CUFRAMES_ACK_PAGE_VERSION => wire::ack_page::ACK_PAGE_VERSION,
        CUFRAMES_ACK_PAGE_SIZE => wire::ack_page::ACK_PAGE_SIZE,
        CUFRAMES_MSG_ACK_PAGE => cuframes_core::tlv::msg_type::ACK_PAGE,
        CUFRAMES_MSG_GOP_STORE => cuframes_core::tlv::msg_type::GOP_STORE,
        CUFRAMES_SUBSCRIBE_GOP_STORE => wire::SUBSCRIBE_GOP_STORE,
        CUFRAMES_PUBLISHER_GOP_STORE => wire::PUBLISHER_GOP_STORE,
        CUFRAMES_GOP_STORE_MAGIC => wire::gop_store::GOP_STORE_MAGIC,
        CUFRAMES_GOP_STORE_VERSION => wire::gop_store::GOP_STORE_VERSION,
        CUFRAMES_GOP_STORE_MAX_ENTRIES => wire::gop_store::MAX_GOP_STORE_ENTRIES,
        CUFRAMES_PACKET_FLAG_KEY => wire::PACKET_FLAG_KEY,
        CUFRAMES_PACKET_FLAG_CORRUPT => wire::PACKET_FLAG_CORRUPT,
        CUFRAMES_PACKET_FLAG_DISCONTINUITY => wire::PACKET_FLAG_DISCONTINUITY,
        CUFRAMES_PACKET_FLAG_LAST_IN_AU => wire::PACKET_FLAG_LAST_IN_AU,
        CUFRAMES_PACKET_FLAGS_KNOWN => wire::PACKET_FLAGS_KNOWN,
        CUFRAMES_CODEC_ID_H264 => wire::CODEC_ID_H264,
        CUFRAMES_CODEC_ID_HEVC => wire::CODEC_ID_HEVC,
        CUFRAMES_CODEC_ID_AV1 => wire::CODEC_ID_AV1,
    };
    let errors: Vec<String> = rows
        .iter()
        .filter(|r| r.1 != r.2)
        .map(|(name, c_value, r_value)| {
            format!("{name} = {c_value:#x} in the header, {r_value:#x} in Rust")
        })
        .collect();
    assert!(
        errors.is_empty(),
        "constants differ:\n{}",
        errors.join("\n")
    );
    // The library version in the header is the crate's version.
    assert_eq!(
        format!(
            "{}.{}.{}",
            c::CUFRAMES_LIB_VERSION_MAJOR,
            c::CUFRAMES_LIB_VERSION_MINOR,
            c::CUFRAMES_LIB_VERSION_PATCH
        ),
        env!("CARGO_PKG_VERSION"),
    );
}

#[test]
fn functions_have_the_declared_signatures() {
    // Both coerce to the same function-pointer type: the header's declaration (as bindgen
    // reads it) and the Rust definition agree on parameters and return types.
    let declared: unsafe extern "C" fn() -> u32 = c::cuframes_protocol_version;
    let defined: unsafe extern "C" fn() -> u32 = cuframes::cuframes_protocol_version;
    // SAFETY: no preconditions.
    assert_eq!(unsafe { declared() }, unsafe { defined() });

    let declared: unsafe extern "C" fn(std::ffi::c_int) -> *const std::ffi::c_char =
        c::cuframes_strerror;
    let defined: unsafe extern "C" fn(std::ffi::c_int) -> *const std::ffi::c_char =
        cuframes::cuframes_strerror;
    assert_eq!(unsafe { declared(-4) }, unsafe { defined(-4) });
}
