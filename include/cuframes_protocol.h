/*
 * cuframes_protocol.h — the wire protocol of cuframes, version 4 (docs/protocol.md).
 *
 * For third-party peers and diagnostic tools that speak the protocol or map the shared
 * memory themselves; a program that uses the library's C API needs only cuframes.h, which
 * this header includes (the enums and values the protocol carries are declared there).
 * It declares:
 *
 *   1. the magics, the library version written into the frame SHM, and the protocol limits
 *      that only a peer sees;
 *   2. the geometry of the shared-memory objects and the values of their integer fields;
 *   3. the socket message type ids and the handshake flags of the extensions;
 *   4. the byte layouts of the shared-memory objects (§2 frame SHM, §10 packet SHM, and the
 *      ACK page extension).
 *
 * Byte order: the protocol is little-endian only; these structs describe the wire format on
 * little-endian hosts (all CUDA platforms).
 *
 * Atomics: fields documented as "atomic" are shared between processes and must only be
 * accessed with the GCC/Clang __atomic builtins (or C11 atomics on a compatible type), e.g.
 *
 *     uint64_t seq = __atomic_load_n(&hdr->global_seq, __ATOMIC_ACQUIRE);
 *     __atomic_store_n(&slot->seq, next_seq, __ATOMIC_RELEASE);
 *     __atomic_fetch_or(&slot->ack_bitmap, 1ULL << my_bit, __ATOMIC_RELEASE);
 *
 * They are declared as plain integers so that the layout is identical in C, C++ and the
 * Rust implementation; plain (non-atomic) reads or writes of them are data races.
 *
 * Reserved fields must be written as zero and ignored on read (§7.3), except where the
 * protocol gives them a meaning (the R13/R28 futex waiter count, the R3 subscribe flags,
 * the R14 memory kind).
 *
 * License: LGPL-2.1-or-later.
 */
#ifndef CUFRAMES_PROTOCOL_H
#define CUFRAMES_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "cuframes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Magics, library version and limits (§2.0, §7, §10.2)                                       */
/* ------------------------------------------------------------------------------------------ */

/** Magic of the v4 frame SHM header (§2.0). */
#define CUFRAMES_PROTOCOL_MAGIC_V4 0xCC7C1DCEu
/** Magic of the legacy v1–v3 frame SHM header; a v4 reader refuses it. */
#define CUFRAMES_PROTOCOL_MAGIC_LEGACY 0xCC7C1DCCu
/** Magic of the packet SHM header (§10.2). */
#define CUFRAMES_PACKET_MAGIC 0xCC7C1DCDu

/** Library version, written into the frame SHM header for diagnostics only (§7.2). */
#define CUFRAMES_LIB_VERSION_MAJOR 0u
#define CUFRAMES_LIB_VERSION_MINOR 4u
#define CUFRAMES_LIB_VERSION_PATCH 0u

/** Subscriber slots in the frame SHM (§2.0: `subscribers[32]`). */
#define CUFRAMES_MAX_SUBSCRIBER_SLOTS 32u

/** `seq` of a slot that holds nothing valid, or is being rewritten (§2.2, §10.4, R10, R29). */
#define CUFRAMES_INVALID_SEQ 0xFFFFFFFFFFFFFFFFull

/* ------------------------------------------------------------------------------------------ */
/* Shared-memory geometry (§2.0, §10.2, R1, R13, R28)                                        */
/* ------------------------------------------------------------------------------------------ */

/** Size of the frame SHM object: sizeof(cuframes_shared_header_t), whatever ring_size is (R1). */
#define CUFRAMES_FRAME_SHM_SIZE 7424u
/** Offset of slots[0] and of subscribers[0] in the frame SHM (R1). */
#define CUFRAMES_FRAME_SLOTS_OFFSET 0x0100u
#define CUFRAMES_FRAME_SUBSCRIBERS_OFFSET 0x0D00u
/** R28: a uint32_t count of futex waiters in the first 4 bytes of the frame header's
 *  `reserved_b` (atomic). The futex word itself (R13) is the low 32 bits of `global_seq`
 *  (offset 0x00C0 in the frame header, 0x0020 in the packet header). The packet header has
 *  no waiter count: a packet publisher always wakes. */
#define CUFRAMES_FRAME_WAITERS_OFFSET 0x00D8u
/** Extension (compatible, docs/protocol.md): a uint32_t right after the waiter count holding
 *  the ring's memory kind plus one (CUFRAMES_MEMORY_* + 1; 0 = not recorded), for operators. */
#define CUFRAMES_FRAME_MEMORY_KIND_OFFSET 0x00DCu
/** Extension (compatible, §7.3 reserved bytes): uint64_t counters a subscriber keeps in its
 *  subscriber slot for operators; offsets inside cuframes_subscriber_slot_t. */
#define CUFRAMES_SUB_DELIVERED_OFFSET 0x40u
#define CUFRAMES_SUB_DROPPED_OVERRUN_OFFSET 0x48u
#define CUFRAMES_SUB_DROPPED_TORN_OFFSET 0x50u

/** Size of the packet ring header; slots start here, the data ring after
 *  ring_slots × CUFRAMES_PACKET_SLOT_SIZE more bytes (§10.2). */
#define CUFRAMES_PACKET_HEADER_SIZE 0x1040u
/** sizeof(cuframes_packet_slot_entry_t) (§10.4). */
#define CUFRAMES_PACKET_SLOT_SIZE 64u

/* ------------------------------------------------------------------------------------------ */
/* Values of integer fields and message ids                                                   */
/* ------------------------------------------------------------------------------------------ */

/** cuframes_shared_header_t.ownership_mode: LIBRARY is the only mode in v4 (§2.0). */
#define CUFRAMES_OWNERSHIP_LIBRARY 0u

/** cuframes_subscriber_slot_t.state (§2.3). */
#define CUFRAMES_SUBSCRIBER_FREE 0u
#define CUFRAMES_SUBSCRIBER_CONNECTING 1u
#define CUFRAMES_SUBSCRIBER_ACTIVE 2u
#define CUFRAMES_SUBSCRIBER_DRAINING 3u

/** SHUTDOWN message reason (§3.8). */
#define CUFRAMES_SHUTDOWN_NORMAL 0u
#define CUFRAMES_SHUTDOWN_ERROR 1u
#define CUFRAMES_SHUTDOWN_UPGRADE 2u
/** Extension (compatible): the frame ring was replaced by a new generation (another size or
 *  format); the publisher lives on and frame subscribers subscribe again. */
#define CUFRAMES_SHUTDOWN_NEW_RING 3u

/** Socket message type ids (§3.2): the `message_type` of the TLV header (§3.1). */
#define CUFRAMES_MSG_HELLO_REQ 0x01u
#define CUFRAMES_MSG_HELLO_RESP 0x02u
#define CUFRAMES_MSG_SUBSCRIBE_REQ 0x03u
#define CUFRAMES_MSG_SUBSCRIBE_RESP 0x04u
#define CUFRAMES_MSG_VMM_FDS 0x05u
/** Extension (negotiated, docs/protocol.md "ACK pages"): the subscriber's ACK page, one
 *  sealed memfd as SCM_RIGHTS; payload u32 fd_count (1), u32 page_size, 8 reserved bytes. */
#define CUFRAMES_MSG_ACK_PAGE 0x06u
/** Extension (negotiated, docs/protocol.md "GOP store"): the publisher's GOP store, last in
 *  the handshake; payload u32 fd_count (1, or 0 without a store), 4 reserved bytes, u64
 *  store_size (0 without a store); one sealed memfd as SCM_RIGHTS when fd_count is 1. */
#define CUFRAMES_MSG_GOP_STORE 0x07u
#define CUFRAMES_MSG_UNSUBSCRIBE 0x10u
#define CUFRAMES_MSG_EVENT_FD_LEGACY 0x20u /**< v1–v3 only; refused in v4 */
#define CUFRAMES_MSG_SHUTDOWN 0x30u
#define CUFRAMES_MSG_PING 0xF0u
#define CUFRAMES_MSG_PONG 0xF1u
#define CUFRAMES_MSG_ERROR 0xFEu

/** Extension: the subscriber ACKs through an ACK page and maps the frame SHM read-only. */
#define CUFRAMES_SUBSCRIBE_ACK_PAGE 0x4u
/** HELLO_RESP publisher_flags (extension: the first 4 of the 12 reserved bytes after
 *  shm_path): the publisher hands an ACK page to each frame subscriber that asks. */
#define CUFRAMES_PUBLISHER_ACK_PAGES 0x1u
/** Extension: the packet subscriber wants the publisher's GOP store (GOP_STORE). */
#define CUFRAMES_SUBSCRIBE_GOP_STORE 0x8u
/** HELLO_RESP publisher_flags: the publisher answers CUFRAMES_SUBSCRIBE_GOP_STORE with
 *  GOP_STORE (with its store, or without a descriptor when it keeps none). */
#define CUFRAMES_PUBLISHER_GOP_STORE 0x2u

/**
 * The GOP store (extension): a memfd sealed against resizing and writing (F_SEAL_SHRINK,
 * F_SEAL_GROW, F_SEAL_FUTURE_WRITE) holding the packets of the newest two GOPs, so that a late
 * subscriber starts on a keyframe the packet ring already overwrote. Layout: this header,
 * then 2 x bank_entries cuframes_gop_store_entry_t (bank 0's, then bank 1's), then
 * 2 x bank_data_size payload bytes (bank 0's, then bank 1's). Entry i of a bank is packet
 * key_seq + i; entries below count never change while key_seq stays (read key_seq and count
 * with acquire, copy, acquire fence, key_seq again: a change means the bank was reused).
 */
#define CUFRAMES_GOP_STORE_MAGIC 0xCC7C1DC6u
#define CUFRAMES_GOP_STORE_VERSION 1u
#define CUFRAMES_GOP_STORE_MAX_ENTRIES 65536u
typedef struct cuframes_gop_store_bank {
    uint64_t key_seq;          /**< 0x00 atomic: the GOP's keyframe; 0 empty, UINT64_MAX none */
    uint64_t count;            /**< 0x08 atomic: entries written */
    uint8_t reserved[48];      /**< 0x10 */
} cuframes_gop_store_bank_t;
typedef struct cuframes_gop_store_header {
    uint32_t magic;            /**< 0x00: CUFRAMES_GOP_STORE_MAGIC */
    uint32_t version;          /**< 0x04: CUFRAMES_GOP_STORE_VERSION */
    uint32_t bank_entries;     /**< 0x08: packets per bank, 1..CUFRAMES_GOP_STORE_MAX_ENTRIES */
    uint32_t reserved_a;       /**< 0x0C */
    uint64_t bank_data_size;   /**< 0x10: payload bytes per bank, 1..UINT32_MAX */
    uint8_t reserved_b[40];    /**< 0x18 */
    cuframes_gop_store_bank_t banks[2]; /**< 0x40 */
} cuframes_gop_store_header_t;
typedef struct cuframes_gop_store_entry {
    int64_t pts_ns;            /**< 0x00 */
    int64_t dts_ns;            /**< 0x08 */
    uint64_t data_offset;      /**< 0x10: from byte 0 of the bank's payload bytes */
    uint32_t data_size;        /**< 0x18: > 0 */
    uint32_t flags;            /**< 0x1C: CUFRAMES_PACKET_FLAG_* */
} cuframes_gop_store_entry_t;

/**
 * The ACK page (extension), 4096 bytes: created and sealed (shrink, grow) by the publisher,
 * written only by its one subscriber with __atomic builtins, read by the publisher. Frame s
 * in slot k counts as ACKed by that subscriber exactly when acked_seq[k] == s.
 */
#define CUFRAMES_ACK_PAGE_MAGIC 0xCC7C1DACu
#define CUFRAMES_ACK_PAGE_VERSION 1u
#define CUFRAMES_ACK_PAGE_SIZE 4096u
typedef struct cuframes_ack_page {
    uint32_t magic;            /**< 0x00: CUFRAMES_ACK_PAGE_MAGIC (publisher) */
    uint32_t version;          /**< 0x04: CUFRAMES_ACK_PAGE_VERSION (publisher) */
    uint32_t ack_count;        /**< 0x08 atomic: +1 after every ACK; futex word (STRICT_WAIT wake) */
    uint32_t ready;            /**< 0x0C: 1 once the slots are mapped */
    uint64_t acked_seq[16];    /**< 0x10 atomic: last ACKed seq per slot */
    uint64_t last_seen_seq;    /**< 0x90 atomic: highest ACKed seq (R23) */
    int64_t last_ack_ns;       /**< 0x98 atomic: CLOCK_REALTIME ns of the last ACK (R23) */
    uint64_t delivered;        /**< 0xA0 atomic counters, as CUFRAMES_SUB_*_OFFSET */
    uint64_t dropped_overrun;  /**< 0xA8 */
    uint64_t dropped_torn;     /**< 0xB0 */
    uint8_t reserved_b[3912];  /**< 0xB8 */
} cuframes_ack_page_t;

/* ------------------------------------------------------------------------------------------ */
/* Shared-memory layouts                                                                      */
/* ------------------------------------------------------------------------------------------ */

/**
 * Frame meta, 64 bytes (§2.1). Embedded in the frame SHM header and carried verbatim in
 * HELLO_RESP (§3.4). No atomic fields: written once by the publisher before the SHM is
 * published.
 *
 * Plane layout inside a slot's allocation (R17): plane 0 at offset 0 with pitch_y; the next
 * plane at pitch_y × height; a third plane follows the second at pitch_uv × chroma height.
 */
typedef struct cuframes_frame_meta {
    uint32_t format;           /**< 0x00: cuframes_format_t */
    uint32_t width;            /**< 0x04 */
    uint32_t height;           /**< 0x08 */
    uint32_t pitch_y;          /**< 0x0C: bytes per row of plane 0 */
    uint32_t pitch_uv;         /**< 0x10: bytes per chroma row; 0 if no chroma plane */
    uint32_t bits_per_pixel;   /**< 0x14: informational */
    uint64_t frame_size_bytes; /**< 0x18: sum of the planes, unrounded (R20) */
    uint8_t reserved[32];      /**< 0x20: 0 */
} cuframes_frame_meta_t;

/**
 * Frame slot descriptor, 192 bytes (§2.2), one per ring slot: slots[16] of the header (R1).
 *
 * Atomic fields (access with __atomic builtins only): seq, pts_ns, ack_bitmap.
 * Publish order (R10, R24): seq = CUFRAMES_INVALID_SEQ and ack_bitmap = 0 before the slot is
 * written; then the data, a stream sync, pts_ns, seq (release), global_seq (release).
 * Readers compare seq before and after reading the slot (seqlock, R10).
 */
typedef struct cuframes_slot_descriptor {
    uint64_t seq;                    /**< 0x00 atomic: published seq; CUFRAMES_INVALID_SEQ = invalid */
    int64_t pts_ns;                  /**< 0x08 atomic: presentation time, ns (R25) */
    uint64_t ack_bitmap;             /**< 0x10 atomic: bit i = subscriber i ACKed this seq */
    uint64_t written_bytes;          /**< 0x18: diagnostics, may be 0 */
    uint8_t reserved_mem_handle[64]; /**< 0x20: 0 in v4 (cudaIpcMemHandle_t in v1–v3) */
    uint8_t reserved_external[32];   /**< 0x60: 0 in v4 */
    uint8_t reserved_a[16];          /**< 0x80: 0 */
    uint8_t reserved_b[48];          /**< 0x90: 0 */
} cuframes_slot_descriptor_t;

/**
 * Subscriber slot, 128 bytes (§2.3): subscribers[32] of the header. Index = the subscriber's
 * assigned bit (1..31); subscribers[0] is never used (R2).
 *
 * Atomic fields (access with __atomic builtins only): state. The publisher fills state,
 * consumer_pid and consumer_name at SUBSCRIBE; the subscriber updates last_seen_seq and
 * last_ack_ns with each ACK (R23).
 */
typedef struct cuframes_subscriber_slot {
    uint64_t state;         /**< 0x00 atomic: CUFRAMES_SUBSCRIBER_* */
    uint64_t consumer_pid;  /**< 0x08: for liveness checks */
    uint64_t last_seen_seq; /**< 0x10: last ACKed seq, monotonic */
    int64_t last_ack_ns;    /**< 0x18: CLOCK_REALTIME ns of the last ACK */
    char consumer_name[32]; /**< 0x20: ASCII, zero-terminated, at most 31 characters */
    uint8_t reserved[64];   /**< 0x40: 0 */
} cuframes_subscriber_slot_t;

/**
 * The frame SHM object /dev/shm/cuframes-<key> (§2.0), always CUFRAMES_FRAME_SHM_SIZE = 7424
 * bytes: it holds 16 slot descriptors whatever ring_size is (R1); slots at index >= ring_size
 * stay zeroed with seq = CUFRAMES_INVALID_SEQ.
 *
 * Atomic fields (access with __atomic builtins only): global_seq, subscriber_bitmap,
 * shutdown_flag, the R28 waiter count (uint32_t at CUFRAMES_FRAME_WAITERS_OFFSET, the first
 * 4 bytes of reserved_b), and the atomic fields of slots[] and subscribers[].
 * The low 32 bits of global_seq are the futex word of R13.
 */
typedef struct cuframes_shared_header {
    uint32_t magic;             /**< 0x0000: CUFRAMES_PROTOCOL_MAGIC_V4 */
    uint32_t proto_version;     /**< 0x0004: CUFRAMES_PROTOCOL_VERSION */
    uint32_t lib_version_major; /**< 0x0008: informational (§7.2) */
    uint32_t lib_version_minor; /**< 0x000C */
    uint32_t lib_version_patch; /**< 0x0010 */
    uint32_t reserved_a;        /**< 0x0014: 0 */
    uint64_t producer_pid;      /**< 0x0018: for liveness checks */
    uint64_t ring_size;         /**< 0x0020: 1..16 */
    uint64_t ownership_mode;    /**< 0x0028: CUFRAMES_OWNERSHIP_LIBRARY */
    uint64_t policy;            /**< 0x0030: CUFRAMES_POLICY_* */
    uint64_t max_subscribers;   /**< 0x0038: 32 */
    cuframes_frame_meta_t meta; /**< 0x0040 */
    uint8_t reserved_events[64]; /**< 0x0080: 0 (cudaIpcEventHandle_t in v1–v3) */
    uint64_t global_seq;        /**< 0x00C0 atomic: monotonic; 0 = nothing published (R18) */
    uint64_t subscriber_bitmap; /**< 0x00C8 atomic: bit i set while subscriber i is active */
    uint64_t shutdown_flag;     /**< 0x00D0 atomic: 0 = normal, 1 = shutting down */
    uint8_t reserved_b[40];     /**< 0x00D8: first 4 bytes = R28 waiter count (atomic), rest 0 */
    cuframes_slot_descriptor_t slots[16];       /**< 0x0100 (R1) */
    cuframes_subscriber_slot_t subscribers[32]; /**< 0x0D00 (R1) */
} cuframes_shared_header_t;

/**
 * Header of the packet SHM object /dev/shm/cuframes-<key>-packets (§10.2),
 * CUFRAMES_PACKET_HEADER_SIZE = 0x1040 bytes. It is followed by ring_slots
 * cuframes_packet_slot_entry_t and then by the data ring of data_size bytes.
 *
 * Atomic fields (access with __atomic builtins only): global_seq, last_keyframe_seq,
 * write_offset, shutdown_flag. The low 32 bits of global_seq are the futex word of R13.
 * write_offset is advanced before the payload is copied (R8).
 */
typedef struct cuframes_packet_ring_header {
    uint32_t magic;                /**< 0x0000: CUFRAMES_PACKET_MAGIC */
    uint32_t proto_version;        /**< 0x0004: CUFRAMES_PROTOCOL_VERSION */
    uint32_t ring_slots;           /**< 0x0008: N, 1..1024 */
    uint32_t data_size;            /**< 0x000C: bytes of the data ring */
    uint32_t codec_id;             /**< 0x0010: CUFRAMES_CODEC_ID_* (wire values, see above) */
    uint32_t codec_extradata_size; /**< 0x0014: <= 4096 */
    uint64_t producer_pid;         /**< 0x0018 */
    uint64_t global_seq;           /**< 0x0020 atomic: monotonic over packets */
    uint64_t last_keyframe_seq;    /**< 0x0028 atomic: for late subscribers (§10.8) */
    uint64_t write_offset;         /**< 0x0030 atomic: absolute cursor into the data ring */
    uint64_t shutdown_flag;        /**< 0x0038 atomic */
    uint8_t codec_extradata[4096]; /**< 0x0040: Annex B SPS/PPS(/VPS), AV1 sequence header */
} cuframes_packet_ring_header_t;

/**
 * Packet slot entry, 64 bytes (§10.4); packet seq s lives in slot s % ring_slots (R18).
 *
 * Atomic fields (access with __atomic builtins only): seq. The slot is seqlocked (R29):
 * the writer stores seq = CUFRAMES_INVALID_SEQ before rewriting the other fields; a reader
 * compares seq before and after reading the fields and the payload.
 */
typedef struct cuframes_packet_slot_entry {
    uint64_t seq;         /**< 0x00 atomic: published seq; CUFRAMES_INVALID_SEQ = invalid */
    int64_t pts_ns;       /**< 0x08: CUFRAMES_NO_PTS if none (R25) */
    int64_t dts_ns;       /**< 0x10: CUFRAMES_NO_PTS if none */
    uint64_t data_offset; /**< 0x18: absolute cursor; index = data_offset % header data_size */
    uint32_t data_size;   /**< 0x20: payload size */
    uint32_t flags;       /**< 0x24: CUFRAMES_PACKET_FLAG_* */
    uint8_t reserved[24]; /**< 0x28: 0 */
} cuframes_packet_slot_entry_t;

#ifndef __cplusplus
/* Layout checks of §2 and §10 (the full per-field check is tests/conformance/c/layout.c). */
_Static_assert(sizeof(cuframes_frame_meta_t) == 64, "frame meta is 64 bytes (sec. 2.1)");
_Static_assert(sizeof(cuframes_slot_descriptor_t) == 192, "slot descriptor is 192 bytes (sec. 2.2)");
_Static_assert(sizeof(cuframes_subscriber_slot_t) == 128, "subscriber slot is 128 bytes (sec. 2.3)");
_Static_assert(sizeof(cuframes_shared_header_t) == CUFRAMES_FRAME_SHM_SIZE,
               "frame SHM is 7424 bytes, 16 slots whatever the ring size (R1)");
_Static_assert(offsetof(cuframes_shared_header_t, meta) == 0x0040, "meta at 0x0040 (sec. 2.0)");
_Static_assert(offsetof(cuframes_shared_header_t, global_seq) == 0x00C0,
               "global_seq at 0x00C0 (sec. 2.0)");
_Static_assert(offsetof(cuframes_shared_header_t, reserved_b) == CUFRAMES_FRAME_WAITERS_OFFSET,
               "futex waiter count at 0x00D8 (R28)");
_Static_assert(offsetof(cuframes_shared_header_t, slots) == CUFRAMES_FRAME_SLOTS_OFFSET,
               "slots at 0x0100 (sec. 2.0)");
_Static_assert(offsetof(cuframes_shared_header_t, subscribers) ==
                   CUFRAMES_FRAME_SUBSCRIBERS_OFFSET,
               "subscribers at 0x0D00 (sec. 2.0, R1)");
_Static_assert(sizeof(cuframes_packet_ring_header_t) == CUFRAMES_PACKET_HEADER_SIZE,
               "packet header is 0x1040 bytes (sec. 10.2)");
_Static_assert(offsetof(cuframes_packet_ring_header_t, global_seq) == 0x0020,
               "packet global_seq at 0x0020 (sec. 10.2)");
_Static_assert(offsetof(cuframes_packet_ring_header_t, codec_extradata) == 0x0040,
               "codec_extradata at 0x0040 (sec. 10.2)");
_Static_assert(sizeof(cuframes_packet_slot_entry_t) == CUFRAMES_PACKET_SLOT_SIZE,
               "packet slot entry is 64 bytes (sec. 10.4)");
_Static_assert(offsetof(cuframes_packet_slot_entry_t, data_size) == 0x20,
               "packet data_size at 0x20 (sec. 10.4)");
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUFRAMES_PROTOCOL_H */
