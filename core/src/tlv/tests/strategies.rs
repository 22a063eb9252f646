//! Strategies: arbitrary *valid* messages, arbitrary unconstrained ones, and message types.

use proptest::prelude::*;

use super::support::*;
use crate::tlv::*;

pub(super) fn consumer_name() -> impl Strategy<Value = String> {
    "[ -~]{0,31}"
}

pub(super) fn shm_path() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9_-]{0,255}", "/[A-Za-z0-9_-]{0,254}"]
}

/// UTF-8 text of at most 1024 bytes: arbitrary chars (≤ 4 bytes each) or long ASCII.
pub(super) fn error_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..=256).prop_map(|c| c.into_iter().collect()),
        "[ -~]{0,1024}",
    ]
}

pub(super) fn frame_meta() -> impl Strategy<Value = FrameMeta> {
    prop::collection::vec(any::<u8>(), 64).prop_map(|b| meta_from(&b))
}

pub(super) fn packets_tail() -> impl Strategy<Value = HelloRespPackets> {
    (shm_path(), any::<u32>(), any::<u64>()).prop_map(|(packet_shm_path, codec_id, seq)| {
        HelloRespPackets {
            packet_shm_path,
            codec_id,
            initial_packet_seq: seq,
        }
    })
}

pub(super) fn hello_resp_ok() -> impl Strategy<Value = HelloResp> {
    (
        0..=i32::MAX,
        any::<u32>(),
        0..=MAX_RING_SIZE as u32,
        any::<u32>(),
        frame_meta(),
        shm_path(),
        any::<u32>(),
        prop::option::of(packets_tail()),
    )
        .prop_map(
            |(
                result,
                proto_version,
                ring_size,
                ownership_mode,
                meta,
                shm_path,
                publisher_flags,
                packets,
            )| {
                HelloResp {
                    result,
                    proto_version,
                    ring_size,
                    ownership_mode,
                    meta,
                    shm_path,
                    publisher_flags,
                    packets,
                }
            },
        )
}

pub(super) fn subscribe_resp() -> impl Strategy<Value = SubscribeResp> {
    prop_oneof![
        (1..=31u32, any::<u64>()).prop_map(|(assigned_bit, initial_seq)| SubscribeResp {
            result: 0,
            assigned_bit,
            initial_seq,
        }),
        (
            any::<i32>().prop_filter("nonzero", |r| *r != 0),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(|(result, assigned_bit, initial_seq)| SubscribeResp {
                result,
                assigned_bit,
                initial_seq,
            }),
    ]
}

pub(super) fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            any::<u32>(),
            consumer_name(),
            any::<i32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(proto_version, consumer_name, cuda_device, mode, flags)| {
                Message::HelloReq(HelloReq {
                    proto_version,
                    consumer_name,
                    cuda_device,
                    mode,
                    subscribe_flags: flags,
                })
            }),
        hello_resp_ok().prop_map(Message::HelloResp),
        (i32::MIN..0).prop_map(|r| Message::HelloResp(HelloResp::failure(r))),
        any::<u32>().prop_map(|proto_version| Message::SubscribeReq { proto_version }),
        subscribe_resp().prop_map(Message::SubscribeResp),
        Just(Message::AckPage(AckPageMsg {
            fd_count: 1,
            page_size: crate::wire::ack_page::ACK_PAGE_SIZE as u32,
        })),
        (1..=u64::MAX).prop_map(|store_size| Message::GopStore(GopStoreMsg {
            fd_count: 1,
            store_size,
        })),
        Just(Message::GopStore(GopStoreMsg {
            fd_count: 0,
            store_size: 0,
        })),
        (1..=MAX_FDS as u32, 1..=u64::MAX, any::<u64>(), any::<u32>()).prop_map(
            |(fd_count, frame_size_bytes, vmm_granularity, memory_kind)| {
                Message::VmmFds(VmmFds {
                    fd_count,
                    frame_size_bytes,
                    vmm_granularity,
                    memory_kind,
                })
            }
        ),
        Just(Message::Unsubscribe),
        any::<u32>().prop_map(|reason| Message::Shutdown { reason }),
        any::<u64>().prop_map(|token| Message::Ping { token }),
        any::<u64>().prop_map(|token| Message::Pong { token }),
        (any::<i32>(), error_text()).prop_map(|(code, message)| Message::Error { code, message }),
    ]
}

/// Arbitrary messages with *unconstrained* fields (any string, any count): some of them
/// break the limits, and `encode` must then refuse them rather than send them.
pub(super) fn any_message() -> impl Strategy<Value = Message> {
    let text = || {
        prop_oneof![
            ".{0,40}",
            "[A-Za-z0-9_/-]{0,260}",
            prop::collection::vec(any::<char>(), 250..300).prop_map(|c| c.into_iter().collect()),
            "[ -~]{1020,1030}",
        ]
    };
    prop_oneof![
        (
            any::<u32>(),
            text(),
            any::<i32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(
                |(proto_version, consumer_name, cuda_device, mode, subscribe_flags)| {
                    Message::HelloReq(HelloReq {
                        proto_version,
                        consumer_name,
                        cuda_device,
                        mode,
                        subscribe_flags,
                    })
                }
            ),
        (
            any::<i32>(),
            any::<u32>(),
            prop_oneof![0..=20u32, any::<u32>()],
            frame_meta(),
            text(),
            prop::option::of((text(), any::<u32>(), any::<u64>())),
        )
            .prop_map(|(result, proto_version, ring_size, meta, shm_path, p)| {
                Message::HelloResp(HelloResp {
                    result,
                    proto_version,
                    ring_size,
                    ownership_mode: 0,
                    meta,
                    shm_path,
                    publisher_flags: 0,
                    packets: p.map(|(path, codec_id, seq)| HelloRespPackets {
                        packet_shm_path: path,
                        codec_id,
                        initial_packet_seq: seq,
                    }),
                })
            }),
        (
            prop_oneof![Just(0i32), any::<i32>()],
            prop_oneof![0..=33u32, any::<u32>()],
            any::<u64>()
        )
            .prop_map(|(result, assigned_bit, initial_seq)| {
                Message::SubscribeResp(SubscribeResp {
                    result,
                    assigned_bit,
                    initial_seq,
                })
            }),
        (
            prop_oneof![0..=18u32, any::<u32>()],
            prop_oneof![Just(0u64), any::<u64>()],
            any::<u64>(),
            any::<u32>()
        )
            .prop_map(
                |(fd_count, frame_size_bytes, vmm_granularity, memory_kind)| {
                    Message::VmmFds(VmmFds {
                        fd_count,
                        frame_size_bytes,
                        vmm_granularity,
                        memory_kind,
                    })
                }
            ),
        (any::<i32>(), text()).prop_map(|(code, message)| Message::Error { code, message }),
        message(),
    ]
}

/// The type ids a decoder knows, plus the legacy and a few unknown ones.
pub(super) fn some_type() -> impl Strategy<Value = u32> {
    prop_oneof![
        prop::sample::select(vec![
            msg_type::HELLO_REQ,
            msg_type::HELLO_RESP,
            msg_type::SUBSCRIBE_REQ,
            msg_type::SUBSCRIBE_RESP,
            msg_type::VMM_FDS,
            msg_type::UNSUBSCRIBE,
            msg_type::EVENT_FD_LEGACY,
            msg_type::SHUTDOWN,
            msg_type::PING,
            msg_type::PONG,
            msg_type::ERROR,
        ]),
        any::<u32>(),
    ]
}
