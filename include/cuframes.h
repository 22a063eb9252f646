/*
 * cuframes.h — C interface of libcuframes, wire protocol version 4.
 *
 * cuframes shares decoded video frames (CUDA VMM or host memory) and encoded packets
 * between processes on one machine. This header declares:
 *
 *   1. the constants and enums of protocol v4 (protocol-v4.md) with the project's
 *      resolutions (decisions R1–R30), including the enum values the protocol text names
 *      but never defines (R7);
 *   2. the byte layouts of the shared-memory objects (§2 frame SHM, §10 packet SHM), for
 *      third-party peers and diagnostic tools that map them directly;
 *   3. the library functions implemented so far.
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
 * Reserved fields must be written as zero and ignored on read (§7.3), except where a
 * resolution gives them a meaning (R13/R28 waiter count, R3 subscribe flags, R14 memory kind).
 *
 * License: LGPL-2.1-or-later.
 */
#ifndef CUFRAMES_H
#define CUFRAMES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Versions and magics (§2.0, §7, §10.2)                                                      */
/* ------------------------------------------------------------------------------------------ */

/** Magic of the v4 frame SHM header (§2.0). */
#define CUFRAMES_PROTOCOL_MAGIC_V4 0xCC7C1DCEu
/** Magic of the legacy v1–v3 frame SHM header; a v4 reader refuses it. */
#define CUFRAMES_PROTOCOL_MAGIC_LEGACY 0xCC7C1DCCu
/** Magic of the packet SHM header (§10.2). */
#define CUFRAMES_PACKET_MAGIC 0xCC7C1DCDu
/** The wire protocol version this header describes (§7.1); peers with another version are
 *  refused with CUFRAMES_ERR_PROTOCOL. */
#define CUFRAMES_PROTOCOL_VERSION 4u

/** Library version, written into the frame SHM header for diagnostics only (§7.2). */
#define CUFRAMES_LIB_VERSION_MAJOR 0u
#define CUFRAMES_LIB_VERSION_MINOR 4u
#define CUFRAMES_LIB_VERSION_PATCH 0u

/* ------------------------------------------------------------------------------------------ */
/* Limits (§1, §2, §10.2, §10.3)                                                              */
/* ------------------------------------------------------------------------------------------ */

/** Frame ring: at most 16 slots; the SHM always holds 16 slot descriptors (R1). */
#define CUFRAMES_MAX_RING_SIZE 16u
/** Subscriber slots in the frame SHM (§2.0: `subscribers[32]`). */
#define CUFRAMES_MAX_SUBSCRIBER_SLOTS 32u
/** Active subscribers: bit 0 is a sentinel, bits 1..31 are usable (§2.3, R2). */
#define CUFRAMES_MAX_SUBSCRIBERS 31u

/** Packet ring slots: 1..1024, default 64 (§10.2). */
#define CUFRAMES_MAX_PACKET_RING_SLOTS 1024u
#define CUFRAMES_DEFAULT_PACKET_RING_SLOTS 64u
/** Default size of the packet data ring: 8 MiB (§10.2). */
#define CUFRAMES_DEFAULT_PACKET_DATA_SIZE 8388608u
/** Largest codec extradata (§10.2/§10.3). */
#define CUFRAMES_MAX_EXTRADATA_SIZE 4096u

/** Keys match ^[a-zA-Z0-9_-]{1,63}$ (§1). */
#define CUFRAMES_MAX_KEY_LEN 63u
/** Consumer names: at most 31 characters plus a terminator (§2.3). */
#define CUFRAMES_MAX_CONSUMER_NAME_LEN 31u

/** `seq` of a slot that holds nothing valid, or is being rewritten (§2.2, §10.4, R10, R29). */
#define CUFRAMES_INVALID_SEQ 0xFFFFFFFFFFFFFFFFull
/** A missing packet pts/dts (R25): INT64_MIN. */
#define CUFRAMES_NO_PTS (-0x7FFFFFFFFFFFFFFFll - 1)

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
/* Enumerated values carried in integer fields                                                */
/* ------------------------------------------------------------------------------------------ */

/** cuframes_shared_header_t.ownership_mode: LIBRARY is the only mode in v4 (§2.0). */
#define CUFRAMES_OWNERSHIP_LIBRARY 0u

/** cuframes_shared_header_t.policy (§2.0, §6, R11). */
#define CUFRAMES_POLICY_DROP_OLDEST 0u /**< never wait for ACKs; overwrite the oldest slot */
#define CUFRAMES_POLICY_STRICT_WAIT 1u /**< wait for every active subscriber's ACK (R11) */

/** cuframes_subscriber_slot_t.state (§2.3). */
#define CUFRAMES_SUBSCRIBER_FREE 0u
#define CUFRAMES_SUBSCRIBER_CONNECTING 1u
#define CUFRAMES_SUBSCRIBER_ACTIVE 2u
#define CUFRAMES_SUBSCRIBER_DRAINING 3u

/** Memory backing the frame slots: first 4 bytes of VMM_FDS's reserved field (R14). */
#define CUFRAMES_MEMORY_CUDA_VMM 0u   /**< cuMemCreate(POSIX_FILE_DESCRIPTOR) device memory */
#define CUFRAMES_MEMORY_HOST_MEMFD 1u /**< memfd host memory (CPU-only hosts, CI) */

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
#define CUFRAMES_MSG_UNSUBSCRIBE 0x10u
#define CUFRAMES_MSG_EVENT_FD_LEGACY 0x20u /**< v1–v3 only; refused in v4 */
#define CUFRAMES_MSG_SHUTDOWN 0x30u
#define CUFRAMES_MSG_PING 0xF0u
#define CUFRAMES_MSG_PONG 0xF1u
#define CUFRAMES_MSG_ERROR 0xFEu

/** HELLO_REQ subscribe flags (§10.9, R3); 0 means frames only. */
#define CUFRAMES_SUBSCRIBE_WANTS_FRAMES 0x1u
#define CUFRAMES_SUBSCRIBE_WANTS_PACKETS 0x2u
/** Extension: the subscriber ACKs through an ACK page and maps the frame SHM read-only. */
#define CUFRAMES_SUBSCRIBE_ACK_PAGE 0x4u
/** HELLO_RESP publisher_flags (extension: the first 4 of the 12 reserved bytes after
 *  shm_path): the publisher hands an ACK page to each frame subscriber that asks. */
#define CUFRAMES_PUBLISHER_ACK_PAGES 0x1u

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

/** cuframes_packet_slot_entry_t.flags (§10.5); bits 4..31 are reserved (0). */
#define CUFRAMES_PACKET_FLAG_KEY 0x1u           /**< keyframe (IDR / CRA) */
#define CUFRAMES_PACKET_FLAG_CORRUPT 0x2u       /**< damaged packet (e.g. RTP loss) */
#define CUFRAMES_PACKET_FLAG_DISCONTINUITY 0x4u /**< gap before this packet (R9, R15) */
#define CUFRAMES_PACKET_FLAG_LAST_IN_AU 0x8u    /**< last NAL of an access unit */
#define CUFRAMES_PACKET_FLAGS_KNOWN 0xFu

/** cuframes_packet_ring_header_t.codec_id: fixed wire values (§10.3). They are the
 *  AV_CODEC_ID_* numbers of the FFmpeg versions the protocol was written against (4.x-7.x);
 *  FFmpeg 8 and 9 renumbered the enum (HEVC is 172, AV1 222 in 9.0), so C code must map
 *  AVCodecID <-> CUFRAMES_CODEC_ID_* explicitly and never store codecpar->codec_id as is. */
#define CUFRAMES_CODEC_ID_H264 27u
#define CUFRAMES_CODEC_ID_HEVC 173u
#define CUFRAMES_CODEC_ID_AV1 226u

/* ------------------------------------------------------------------------------------------ */
/* Enums (R7): values are fixed; new values are only ever appended.                           */
/* On the wire they travel as 32-bit integers, never as the enum type itself.                 */
/* ------------------------------------------------------------------------------------------ */

/** Pixel format of the frames of a ring: cuframes_frame_meta_t.format (§2.1, R7). */
typedef enum cuframes_format {
    CUFRAMES_FORMAT_NONE = 0, /**< no frame ring (packets-only publisher, R5) */
    CUFRAMES_FORMAT_NV12 = 1,
    CUFRAMES_FORMAT_P010 = 2,
    CUFRAMES_FORMAT_P016 = 3,
    CUFRAMES_FORMAT_YUV420P = 4,
    CUFRAMES_FORMAT_YUV444P = 5,
    CUFRAMES_FORMAT_RGBA = 6,
    CUFRAMES_FORMAT_BGRA = 7
} cuframes_format_t;

/** How a subscriber receives frames: HELLO_REQ `mode` (§3.3, R7). */
typedef enum cuframes_subscriber_mode {
    /** The subscriber copies each frame into memory it owns. */
    CUFRAMES_MODE_COPY = 0,
    /** Frames reference ring memory until released (R12). */
    CUFRAMES_MODE_ZERO_COPY = 1
} cuframes_subscriber_mode_t;

/** Result codes: 0 is success, negative values are errors (R7). They travel on the wire
 *  (HELLO_RESP, SUBSCRIBE_RESP, ERROR) and are returned by the library functions. */
typedef enum cuframes_error {
    CUFRAMES_OK = 0,
    CUFRAMES_ERR_INVALID_ARG = -1,
    CUFRAMES_ERR_PROTOCOL = -2,
    CUFRAMES_ERR_FORMAT = -3,
    CUFRAMES_ERR_TOO_MANY = -4,
    CUFRAMES_ERR_NOT_FOUND = -5,
    CUFRAMES_ERR_ALREADY_EXISTS = -6,
    CUFRAMES_ERR_TIMEOUT = -7,
    CUFRAMES_ERR_DISCONNECTED = -8,
    CUFRAMES_ERR_PACKET_OVERRUN = -9,
    CUFRAMES_ERR_PERMISSION = -10,
    CUFRAMES_ERR_CUDA = -11,
    CUFRAMES_ERR_IO = -12,
    CUFRAMES_ERR_NO_MEMORY = -13
} cuframes_error_t;

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
               "frame SHM is 7424 bytes (R1)");
_Static_assert(offsetof(cuframes_shared_header_t, meta) == 0x0040, "meta at 0x0040 (sec. 2.0)");
_Static_assert(offsetof(cuframes_shared_header_t, global_seq) == 0x00C0,
               "global_seq at 0x00C0 (sec. 2.0)");
_Static_assert(offsetof(cuframes_shared_header_t, reserved_b) == CUFRAMES_FRAME_WAITERS_OFFSET,
               "R28 waiter count at 0x00D8");
_Static_assert(offsetof(cuframes_shared_header_t, slots) == CUFRAMES_FRAME_SLOTS_OFFSET,
               "slots at 0x0100 (sec. 2.0)");
_Static_assert(offsetof(cuframes_shared_header_t, subscribers) ==
                   CUFRAMES_FRAME_SUBSCRIBERS_OFFSET,
               "subscribers at 0x0D00 (R1)");
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

/* ------------------------------------------------------------------------------------------ */
/* Functions                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** The wire protocol version the library speaks: CUFRAMES_PROTOCOL_VERSION (4).
 *  Thread-safe; never fails. */
uint32_t cuframes_protocol_version(void);

/** A static, human-readable description of a cuframes_error_t code. Unknown codes give
 *  "unknown error". Never returns NULL; the string must not be freed. Thread-safe. */
const char *cuframes_strerror(int code);

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** The detailed message of the last failed call on the calling thread (what failed, which
 *  object, what to do), or "" if none. Valid until the next failing call on this thread. */
const char *cuframes_last_error(void);

/* ------------------------------------------------------------------------------------------ */
/* Thread safety                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Functions that take no handle are thread-safe (cuframes_last_error is per thread). A handle
 * is destroyed or released once, on any thread, with no other call on it in flight; until
 * then, per kind of handle:
 *
 * - cuframes_publisher_t: every publisher function may be called from any thread, also
 *   concurrently, with one slot acquired at a time (cuframes_publisher_acquire until that
 *   slot's publish or abandon). A slot acquired before a ring replacement
 *   (cuframes_publisher_replace_frames) stays mapped until it is published or abandoned, and
 *   publishing it then fails.
 * - cuframes_subscriber_t: the queries, the functions that take a
 *   `const cuframes_subscriber_t *` (frame_layout, stats, is_zero_copy, memory_kind, colour,
 *   cuda_device, packet_codec, packet_stats), may be called from any thread at any time, also
 *   while a reading call runs on another thread: they never wait for it, and answer with the
 *   state in which the last reading call (or the connect) returned. The reading calls
 *   (next_frame, next_packet, next_packet_into, packet_extradata) may be called from any
 *   thread, one at a time per handle: a reading call made while another runs waits until that
 *   one returns (a next_frame waiting forever holds up a next_packet on another thread: read
 *   frames and packets on one thread, or with timeouts). The bytes next_packet hands out stay
 *   valid until the next reading call on the handle.
 * - cuframes_frame_t: independent of its subscriber (it may outlive it). Its queries
 *   (cuframes_frame_info, _layout, _colour, _cuda_device) may run on several threads at once;
 *   cuframes_frame_release, on any thread, once none of them is in flight.
 * - cuframes_cuda_context_t: only released. */

/* ------------------------------------------------------------------------------------------ */
/* fork() and signals                                                                         */
/* ------------------------------------------------------------------------------------------ */

/*
 * fork(): a child inherits the parent's handles (publishers, subscribers, frames), but what
 * they stand for stays the parent's, which goes on publishing and reading. In the child,
 * cuframes_publisher_destroy, cuframes_subscriber_destroy and cuframes_frame_release only let
 * go of the child's copy: no shutdown flag, no SHUTDOWN or UNSUBSCRIBE message, no ACK,
 * nothing removed, no thread joined (the parent's threads do not exist in the child), no CUDA
 * call (CUDA cannot be used after fork: the child's copies of CUDA objects are leaked, and
 * any other CUDA use fails with CUFRAMES_ERR_CUDA). Host mappings and descriptors stay in the
 * child until it exits or execs (they are close-on-exec). Do not use an inherited handle in
 * the child otherwise: create or connect new ones there. The library recognises a child of
 * fork() through pthread_atfork; one made by a raw clone() system call is not recognised.
 *
 * Signals: the library raises no SIGPIPE on its sockets and pipes (sockets are written with
 * MSG_NOSIGNAL; its wake-up pipe has a reader for as long as it can be written), so a host may
 * keep SIGPIPE's default. Creating a publisher works whatever the host does with SIGCHLD
 * (ignored, or a handler that reaps every child): it briefly forks a child that binds the
 * socket and reports the result through a pipe, not through its exit status.
 */

/* ------------------------------------------------------------------------------------------ */
/* Frame layout (R17)                                                                         */
/* ------------------------------------------------------------------------------------------ */

/** Plane geometry of the frames of a ring: plane i starts at `offset[i]` bytes into a slot,
 *  has `rows[i]` rows of `row_bytes[i]` image bytes, `pitch[i]` bytes apart. Pitches are
 *  multiples of 256. */
typedef struct cuframes_frame_layout {
    uint32_t format; /**< cuframes_format_t */
    uint32_t width;
    uint32_t height;
    uint32_t plane_count; /**< 1..3 */
    uint64_t offset[3];
    uint32_t pitch[3];
    uint32_t row_bytes[3];
    uint32_t rows[3];
    uint64_t frame_size; /**< meta.frame_size_bytes: the sum of the planes */
} cuframes_frame_layout_t;

/* ------------------------------------------------------------------------------------------ */
/* Publisher                                                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct cuframes_publisher cuframes_publisher_t;

typedef struct cuframes_publisher_options {
    const char *runtime_dir;       /**< NULL: $CUFRAMES_RUNTIME_DIR, else /run/cuframes (R16) */
    uint32_t file_mode;            /**< socket and SHM mode; 0 = 0660 */
    int64_t allowed_uid;           /**< only this uid (or root) may subscribe; -1 = any */
    int64_t allowed_gid;           /**< only this gid (or root) may subscribe; -1 = any */
    uint32_t handshake_timeout_ms; /**< a peer silent this long mid-handshake is dropped; 0 = 5000 */
    /** Admit frame subscribers without ACK pages (plain protocol v4 peers). They ACK in the
     *  shared header, which then must be writable by the group: any subscriber can then forge
     *  ACKs or truncate the frame SHM and hurt the others (docs/protocol.md, trust model).
     *  0 (default): refused with CUFRAMES_ERR_PERMISSION, frame SHM not group-writable. */
    uint32_t allow_legacy_subscribers;
    /** Subscriber slots (of the 31) the processes of one uid may hold at once; more get
     *  CUFRAMES_ERR_TOO_MANY. The publisher's own uid and root are not counted, so that one
     *  other service cannot take every slot. 0 = 8 (the default); 31 or more: no cap. */
    uint32_t max_subscribers_per_uid;
    /** The same per process (a peer in another PID namespace is counted by its uid only).
     *  0 = 4 (the default); 31 or more: no cap. */
    uint32_t max_subscribers_per_pid;
} cuframes_publisher_options_t;

/** A stream's colour description and sample aspect ratio (frame meta extension, compatible:
 *  docs/protocol.md). The publisher announces it for its ring; subscribers read it with
 *  cuframes_subscriber_colour. Code points: primaries, transfer and matrix are ITU-T H.273
 *  (= FFmpeg's AVColorPrimaries / AVColorTransferCharacteristic / AVColorSpace); range and
 *  chroma_location use FFmpeg's AVColorRange (0 unspecified, 1 limited, 2 full) and
 *  AVChromaLocation (0 unspecified, 1 left, 2 center, 3 top-left, 4 top, 5 bottom-left,
 *  6 bottom) numbering. Fixed wire values. */
typedef struct cuframes_colour {
    uint32_t present;          /**< 1: recorded; 0: nothing known (the rest is 0) */
    uint32_t sar_num, sar_den; /**< sample aspect ratio; 0 = unknown */
    uint8_t range;
    uint8_t primaries;
    uint8_t transfer;
    uint8_t matrix;
    uint8_t chroma_location;
    uint8_t reserved[3];       /**< 0 */
} cuframes_colour_t;

typedef struct cuframes_frame_ring_config {
    uint32_t format;         /**< cuframes_format_t */
    uint32_t width, height;  /**< 1..16384 */
    uint32_t ring_size;      /**< 1..16 */
    uint32_t policy;         /**< CUFRAMES_POLICY_* */
    uint32_t ack_timeout_ms; /**< STRICT_WAIT: a subscriber this late is declared dead (R11) */
    uint32_t memory_kind;    /**< CUFRAMES_MEMORY_CUDA_VMM or CUFRAMES_MEMORY_HOST_MEMFD */
    int32_t cuda_device;     /**< device ordinal for CUDA VMM */
    cuframes_colour_t colour; /**< announced to subscribers; present = 0 (default): none */
} cuframes_frame_ring_config_t;

/** A slot being written: `address` is a host pointer (host memory) or a CUdeviceptr. */
typedef struct cuframes_slot {
    uint64_t seq;
    uint32_t index;
    uint32_t memory_kind;
    uint64_t address;
} cuframes_slot_t;

/** One subscriber as its publisher sees it. */
typedef struct cuframes_subscriber_info {
    uint32_t bit;  /**< 1..31 */
    uint32_t pid;
    char name[32];
    uint32_t wants_frames, wants_packets;
    uint64_t lag;           /**< publisher seq minus the subscriber's last ACK */
    uint64_t last_seen_seq;
    int64_t last_ack_ns;    /**< CLOCK_REALTIME of the last ACK; 0 = none */
    uint64_t delivered, dropped_overrun, dropped_torn;
} cuframes_subscriber_info_t;

void cuframes_publisher_options_default(cuframes_publisher_options_t *opts);
void cuframes_frame_ring_config_default(cuframes_frame_ring_config_t *cfg);

/** Create the publisher of `key` (`^[a-zA-Z0-9_-]{1,63}$`); `opts` may be NULL. Recovers a
 *  dead predecessor's socket and SHM (§1); CUFRAMES_ERR_ALREADY_EXISTS if a live one owns
 *  the key, in this process or another. */
int cuframes_publisher_create(const char *key, const cuframes_publisher_options_t *opts,
                              cuframes_publisher_t **out);
/** The publisher of `key` in this process, created if needed (R6). Every handle is
 *  destroyed separately; the last one shuts the publisher down. */
int cuframes_publisher_open_shared(const char *key, const cuframes_publisher_options_t *opts,
                                   cuframes_publisher_t **out);
/** Drop a handle. The last handle sends SHUTDOWN to every subscriber and removes the socket
 *  and SHM objects. NULL is ignored. In a child forked from the creating process it only
 *  frees the child's copy (see "fork() and signals"). */
void cuframes_publisher_destroy(cuframes_publisher_t *pub);

/** Add the frame ring (once). */
int cuframes_publisher_enable_frames(cuframes_publisher_t *pub, const cuframes_frame_ring_config_t *cfg);
int cuframes_publisher_frame_layout(const cuframes_publisher_t *pub, cuframes_frame_layout_t *layout);
/** Replace the frame ring by a new generation (another size, format or colour description,
 *  e.g. a camera switching 1080p to 720p). The old ring's subscribers drain it, receive
 *  SHUTDOWN with reason CUFRAMES_SHUTDOWN_NEW_RING and subscribe again (this library's
 *  subscriber by itself; its frames then have the new layout: cuframes_frame_layout). Under
 *  STRICT_WAIT this first waits for the ACKs of the old ring's frames, then, up to the ack
 *  timeout, for the old ring's subscribers to come back. Packets are not affected. */
int cuframes_publisher_replace_frames(cuframes_publisher_t *pub, const cuframes_frame_ring_config_t *cfg);

/** Take the next slot (under STRICT_WAIT, waits for ACKs up to the ack timeout). Write the
 *  frame at `slot->address` with the layout's offsets and pitches, then publish or abandon.
 *  The slot stays mapped until then, even if another thread replaces the ring meanwhile
 *  (cuframes_publisher_replace_frames): writing it is safe, and publishing it then fails with
 *  CUFRAMES_ERR_DISCONNECTED (the frame is lost; acquire a slot of the new ring). */
int cuframes_publisher_acquire(cuframes_publisher_t *pub, cuframes_slot_t *slot);
/** Make the slot visible. The data must be complete (CUDA: the writing stream synchronised,
 *  see cuframes_publisher_publish_after_stream). `pts_ns` INT64_MIN = CLOCK_MONOTONIC now. */
int cuframes_publisher_publish(cuframes_publisher_t *pub, const cuframes_slot_t *slot, int64_t pts_ns);
void cuframes_publisher_abandon(cuframes_publisher_t *pub, const cuframes_slot_t *slot);
/** Copy a frame from host memory and publish it. `plane_count` must be the layout's plane
 *  count; plane i (`planes[i]`: `layout.rows[i]` rows of `layout.row_bytes[i]` bytes,
 *  `strides[i] >= row_bytes[i]` bytes apart) must be readable for
 *  `strides[i] * (rows[i] - 1) + row_bytes[i]` bytes (a stride whose rows overflow is
 *  CUFRAMES_ERR_INVALID_ARG). A ring replaced by another thread during the call refuses the
 *  frame with CUFRAMES_ERR_FORMAT instead of copying it into the new geometry. */
int cuframes_publisher_publish_host(cuframes_publisher_t *pub, const uint8_t *const *planes,
                                    const size_t *strides, int plane_count, int64_t pts_ns);
/** CUDA rings: publish a slot written by GPU work queued on `cuda_stream` (a CUstream;
 *  NULL = the legacy default stream). The stream is synchronised first, so no subscriber
 *  sees the frame before its data is complete (§5). A non-NULL stream belongs to the caller's
 *  context, which must be current on the calling thread (FFmpeg: cuCtxPushCurrent of the
 *  hwcontext's cuda_ctx); slot addresses are valid in every context of the ring's device. */
int cuframes_publisher_publish_after_stream(cuframes_publisher_t *pub, const cuframes_slot_t *slot,
                                            void *cuda_stream, int64_t pts_ns);
/** CUDA rings: publish a slot written by GPU work on `cuda_stream` WITHOUT waiting for that
 *  work: a host function queued on the stream makes the frame visible once the work queued so
 *  far has completed (still never before, §5), and this returns at once, so the caller's thread
 *  goes on to the next frame. The next acquire of the same slot, a synchronous publish and the
 *  publisher's destruction wait for it (at most 10 s; then CUFRAMES_ERR_CUDA: the stream
 *  failed). Publications on one stream run in order; one on another stream first waits for the
 *  pending ones. NULL or CU_STREAM_LEGACY (0x1) = the legacy default stream of the current
 *  context, which must then be a context of the ring's device. On error the slot is
 *  abandoned. */
int cuframes_publisher_publish_on_stream(cuframes_publisher_t *pub, const cuframes_slot_t *slot,
                                         void *cuda_stream, int64_t pts_ns);
/** CUDA rings: cuframes_publisher_publish_device WITHOUT waiting: the copy into the next slot
 *  and then its publication are queued on `cuda_stream` (NULL: the library's own stream), and
 *  this returns at once. The source planes must stay unchanged until the stream has run the
 *  copy; work queued later on the same stream may reuse them (as FFmpeg's frame pools do). */
int cuframes_publisher_publish_device_async(cuframes_publisher_t *pub, const uint64_t *planes,
                                            const size_t *pitches, int plane_count,
                                            void *cuda_stream, int64_t pts_ns);
/** CUDA rings: copy a frame from device memory (one CUdeviceptr and pitch per plane) into the
 *  next slot, ordered after earlier work on `cuda_stream` (NULL: the library's own stream),
 *  and publish it. Host memory is never involved. Plane i must be device memory of
 *  `pitches[i] * (rows[i] - 1) + row_bytes[i]` bytes (see cuframes_publisher_publish_host). As above, a non-NULL stream's context must
 *  be current on the calling thread. */
int cuframes_publisher_publish_device(cuframes_publisher_t *pub, const uint64_t *planes,
                                      const size_t *pitches, int plane_count, void *cuda_stream,
                                      int64_t pts_ns);
/** Seq of the last published frame (0 = none). */
uint64_t cuframes_publisher_frame_seq(const cuframes_publisher_t *pub);
/** Number of admitted subscribers, or a negative error. */
int cuframes_publisher_subscriber_count(const cuframes_publisher_t *pub);
/** Admitted subscribers that can read: a frame subscriber counts once it has mapped the ring's
 *  slots (importing CUDA slots takes a new process ~0.1 s), others once admitted. What a
 *  publisher waiting for its readers should wait for. Negative: an error. */
int cuframes_publisher_ready_subscriber_count(const cuframes_publisher_t *pub);

/** Where the current frame ring's frames waited (counts, and times in nanoseconds): a
 *  pipeline slower with subscribers than without shows which wait it was. */
typedef struct cuframes_publisher_wait_stats {
    uint64_t ack_waits;             /**< acquires that waited for subscribers' ACKs (STRICT_WAIT) */
    uint64_t ack_wait_ns;
    uint64_t publication_waits;     /**< waits for a publication still queued on a CUDA stream */
    uint64_t publication_wait_ns;
    uint64_t stream_publications;   /**< publications made by a host function on a stream */
    uint64_t stream_publication_ns; /**< their time in all (each holds up its stream) */
    uint64_t stream_publication_max_ns;
} cuframes_publisher_wait_stats_t;
/** Where the frames waited so far; NOT_FOUND without a frame ring. */
int cuframes_publisher_wait_stats(const cuframes_publisher_t *pub,
                                  cuframes_publisher_wait_stats_t *stats);
/** Statistics of up to `max` subscribers; returns how many were written. */
int cuframes_publisher_subscribers(const cuframes_publisher_t *pub, cuframes_subscriber_info_t *infos, int max);

/* ------------------------------------------------------------------------------------------ */
/* Subscriber                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct cuframes_subscriber cuframes_subscriber_t;
typedef struct cuframes_frame cuframes_frame_t;

typedef struct cuframes_subscriber_options {
    const char *runtime_dir;             /**< NULL: $CUFRAMES_RUNTIME_DIR, else /run/cuframes */
    const char *name;                    /**< shown to operators; printable ASCII, <= 31 bytes */
    int32_t cuda_device;                 /**< GPU to import CUDA rings on: -1 (default) = the
                                              *  publisher's GPU, found by its UUID whatever
                                              *  its ordinal here; N = this process's device N,
                                              *  which must be the publisher's GPU (else the
                                              *  connect fails with CUFRAMES_ERR_NOT_FOUND,
                                              *  naming both UUIDs) */
    uint32_t mode;                       /**< cuframes_subscriber_mode_t */
    uint32_t flags;                      /**< CUFRAMES_SUBSCRIBE_WANTS_*; 0 = frames */
    uint32_t connect_timeout_ms;         /**< 0 = 5000; bounds the connect too (a socket
                                              *  that never accepts: CUFRAMES_ERR_TIMEOUT) */
    int accept_zero_copy_overwrite;      /**< R12: allow ZERO_COPY under DROP_OLDEST */
    uint32_t spin_us;                    /**< before each sleep of next_frame and
                                              next_packet(_into), poll this many µs for a frame
                                              or packet (lower latency, a busy CPU meanwhile;
                                              0 = sleep at once, the default) */
    /** Keep going across a publisher restart under the same key: when the publisher goes,
     *  deliver what its rings hold, then wait up to this many ms for a new one and subscribe
     *  to it (packets resume on its newest keyframe, flagged DISCONTINUITY; timestamps are
     *  shifted where needed to keep increasing). 0 (default): the stream ends with
     *  CUFRAMES_ERR_DISCONNECTED. While it waits, reads return CUFRAMES_ERR_TIMEOUT. */
    uint32_t reconnect_ms;
    /** The largest packet data ring (the publisher's `data_size`, bytes) this subscriber
     *  maps: every reader maps and populates the whole ring, so a larger one is refused at
     *  connect with CUFRAMES_ERR_NO_MEMORY. 0 = 256 MiB (the default). */
    uint32_t max_packet_ring_size;
    /** The largest packet (bytes) this subscriber reads: a larger one is skipped before any
     *  buffer is allocated for it (the packet callback of next_packet_into is not called),
     *  and the stream resumes at the next keyframe, flagged
     *  CUFRAMES_PACKET_FLAG_DISCONTINUITY. 0 = 64 MiB (the default: an 8K 4:2:0 10-bit
     *  picture, uncompressed, fits). */
    uint32_t max_packet_size;
    /** Accept only a publisher running as this uid (checked with SO_PEERCRED on every
     *  connection, the first included): another is refused with CUFRAMES_ERR_PERMISSION
     *  naming both uids. -1 = any (the default; a zeroed struct asks for uid 0): the first
     *  connection accepts any uid, and every later one (reconnect_ms, a new frame ring) must
     *  be to a publisher of the uid the first saw. While waiting to reconnect, a publisher of
     *  another uid is refused and the wait goes on (reads return CUFRAMES_ERR_TIMEOUT saying
     *  so); if only it answers until the wait runs out, the stream ends with
     *  CUFRAMES_ERR_PERMISSION. */
    int64_t publisher_uid;
} cuframes_subscriber_options_t;

typedef struct cuframes_frame_info {
    uint64_t seq;
    int64_t pts_ns;
    uint32_t memory_kind; /**< where `data` points: host memory or CUdeviceptr */
    uint32_t zero_copy;   /**< 1: the ring's own memory, valid until released */
    uint32_t plane_count;
    uint32_t pitch[3];
    uint64_t data[3];
} cuframes_frame_info_t;

typedef struct cuframes_frame_stats {
    uint64_t delivered;
    uint64_t dropped_overrun; /**< overwritten before they were read (DROP_OLDEST) */
    uint64_t dropped_torn;    /**< rewritten while being copied (R10) */
} cuframes_frame_stats_t;

void cuframes_subscriber_options_default(cuframes_subscriber_options_t *opts);
/** Connect and complete the handshake; the slots are imported here, once. */
int cuframes_subscriber_connect(const char *key, const cuframes_subscriber_options_t *opts,
                                cuframes_subscriber_t **out);
/** UNSUBSCRIBE and free. Frames not yet released stay valid. NULL is ignored. In a child
 *  forked from the connecting process it only frees the child's copy (no UNSUBSCRIBE, see
 *  "fork() and signals"). */
void cuframes_subscriber_destroy(cuframes_subscriber_t *sub);
int cuframes_subscriber_frame_layout(const cuframes_subscriber_t *sub, cuframes_frame_layout_t *layout);
/** The next frame; `timeout_ms` < 0 waits forever. CUFRAMES_ERR_TIMEOUT, or
 *  CUFRAMES_ERR_DISCONNECTED once the connection ended (SHUTDOWN, the publisher's death, or
 *  dropped by it) and what was published before the end was read: from then on every call
 *  returns CUFRAMES_ERR_DISCONNECTED, and nothing published later is handed out (with
 *  reconnect_ms, the subscriber connects again instead). The frames a replaced ring or a gone
 *  publisher still held come before the next ring's, whichever read saw the end. */
int cuframes_subscriber_next_frame(cuframes_subscriber_t *sub, int64_t timeout_ms, cuframes_frame_t **frame);
int cuframes_frame_info(const cuframes_frame_t *frame, cuframes_frame_info_t *info);
/** The layout of this frame's ring (after a ring replacement it differs from the earlier
 *  frames'), and its colour description (`present` = 0: none announced). */
int cuframes_frame_layout(const cuframes_frame_t *frame, cuframes_frame_layout_t *layout);
int cuframes_frame_colour(const cuframes_frame_t *frame, cuframes_colour_t *colour);
/** This process's CUDA ordinal of the GPU the frame's bytes are on, or a negative error
 *  (CUFRAMES_ERR_NOT_FOUND: host memory). After a ring replacement or a publisher restart a
 *  frame's ring may differ in memory kind and GPU from the first one. */
int cuframes_frame_cuda_device(const cuframes_frame_t *frame);
/** Release a frame. For CUDA frames pass the CUstream of the last work reading it: the ACK
 *  follows that work (R12). NULL: the reads are finished. NULL frame is ignored. */
void cuframes_frame_release(cuframes_frame_t *frame, void *cuda_stream);
int cuframes_subscriber_stats(const cuframes_subscriber_t *sub, cuframes_frame_stats_t *stats);
int cuframes_subscriber_is_zero_copy(const cuframes_subscriber_t *sub);
/** CUFRAMES_MEMORY_* of the ring, or a negative error. */
int cuframes_subscriber_memory_kind(const cuframes_subscriber_t *sub);
/** The colour description the publisher announced (`present` = 0: none); NOT_FOUND without
 *  a frame ring. */
int cuframes_subscriber_colour(const cuframes_subscriber_t *sub, cuframes_colour_t *colour);
/** This process's CUDA ordinal of the ring's GPU, or a negative error (NOT_FOUND: host ring). */
int cuframes_subscriber_cuda_device(const cuframes_subscriber_t *sub);

/* ------------------------------------------------------------------------------------------ */
/* Packets (§10)                                                                              */
/* ------------------------------------------------------------------------------------------ */

typedef struct cuframes_packet_ring_config {
    uint32_t codec_id;       /**< CUFRAMES_CODEC_ID_*: H.264 27, HEVC 173, AV1 226 (wire values) */
    uint32_t ring_slots;     /**< 1..1024 (default 64) */
    uint32_t data_size;      /**< bytes of the data ring: the largest packet that fits (default 8 MiB) */
    uint32_t extradata_size; /**< <= 4096; 0 = set later with cuframes_publisher_set_packet_extradata */
    const uint8_t *extradata; /**< Annex B SPS/PPS(/VPS), or the AV1 sequence header OBU (R30) */
} cuframes_packet_ring_config_t;

typedef struct cuframes_packet_info {
    uint64_t seq;
    int64_t pts_ns; /**< INT64_MIN = none (R25) */
    int64_t dts_ns; /**< INT64_MIN = none */
    uint32_t flags; /**< CUFRAMES_PACKET_FLAG_* */
    uint32_t size;  /**< bytes at the returned data pointer */
} cuframes_packet_info_t;

typedef struct cuframes_packet_stats {
    uint64_t packets, bytes;
    uint64_t overruns; /**< times the reader was lapped and re-anchored on a keyframe (R9) */
    uint64_t last_seq;
    uint64_t oversized; /**< packets skipped for exceeding the subscriber's max_packet_size (each
                             a loss: the reader resumes at the next keyframe, DISCONTINUITY) */
} cuframes_packet_stats_t;

void cuframes_packet_ring_config_default(cuframes_packet_ring_config_t *cfg);
/** Add the packet ring (once). Works on a publisher without a frame ring (R5). */
int cuframes_publisher_enable_packets(cuframes_publisher_t *pub, const cuframes_packet_ring_config_t *cfg);
/** Set the extradata once, before the first packet (§10.3). */
int cuframes_publisher_set_packet_extradata(cuframes_publisher_t *pub, const uint8_t *data, size_t size);
/** Publish one packet; `seq_out` may be NULL. A packet larger than the data ring, empty, or
 *  with reserved flag bits is refused (CUFRAMES_ERR_INVALID_ARG) and the ring is untouched. */
int cuframes_publisher_publish_packet(cuframes_publisher_t *pub, const uint8_t *data, size_t size,
                                      int64_t pts_ns, int64_t dts_ns, uint32_t flags, uint64_t *seq_out);

/** Subscribers pass CUFRAMES_SUBSCRIBE_WANTS_PACKETS in their options' flags. */
int cuframes_subscriber_packet_codec(const cuframes_subscriber_t *sub, uint32_t *codec_id);
/** Copy the extradata into `buf`; `*size` receives its size. With buf NULL and cap 0, only
 *  the size is returned; a too-small buffer is CUFRAMES_ERR_NO_MEMORY. */
int cuframes_subscriber_packet_extradata(cuframes_subscriber_t *sub, uint8_t *buf, size_t cap, size_t *size);
/** The next packet: `*data` points at `info->size` bytes owned by the subscriber, valid until
 *  its next call. The first packet is a keyframe; the first one after an overrun carries
 *  CUFRAMES_PACKET_FLAG_DISCONTINUITY (R9). `timeout_ms` < 0 waits forever.
 *  CUFRAMES_ERR_DISCONNECTED once the publisher is gone and every packet published before
 *  was read; every later call returns it again. */
int cuframes_subscriber_next_packet(cuframes_subscriber_t *sub, int64_t timeout_ms, const uint8_t **data,
                                    cuframes_packet_info_t *info);
/** Where cuframes_subscriber_next_packet_into copies a payload: return a buffer writable for
 *  `size` bytes until the next call of the callback or the return of next_packet_into (NULL:
 *  no memory; the packet is then not consumed and CUFRAMES_ERR_NO_MEMORY is returned). It may
 *  be called more than once in one read: a copy that raced the publisher is thrown away and
 *  the packet the reader re-anchors on is asked for again (each call supersedes the previous
 *  buffer). */
typedef uint8_t *(*cuframes_packet_buffer_fn)(void *opaque, size_t size);
/** cuframes_subscriber_next_packet copying the payload once, straight from the ring into the
 *  buffer `buffer` returns (an AVPacket's, say); the ring's seqlock is checked again after
 *  that copy, so the bytes there are the packet's when CUFRAMES_OK is returned (`info->size`
 *  of them). */
int cuframes_subscriber_next_packet_into(cuframes_subscriber_t *sub, int64_t timeout_ms,
                                         cuframes_packet_buffer_fn buffer, void *opaque,
                                         cuframes_packet_info_t *info);
int cuframes_subscriber_packet_stats(const cuframes_subscriber_t *sub, cuframes_packet_stats_t *stats);

/* ------------------------------------------------------------------------------------------ */
/* Frame helpers for FFmpeg                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Used by the hwupload_cuframes filter and the cuframes input device (docs/ffmpeg.md).
 *
 * Releasing a CUDA frame from a COPY subscriber (cuframes_frame_release with a stream): the
 * frame's device buffer returns to the subscriber's pool, so the call first waits for the work
 * queued on that stream (the caller's context must be current, as for every call taking a
 * caller's stream). Zero-copy frames are ACKed behind the stream without a host wait (R12). */

/** Host<->device copies cuframes made in this process so far (uploads of host frames into a
 *  CUDA ring, downloads). A path that stays on the GPU leaves it unchanged. Thread-safe. */
uint64_t cuframes_host_copy_count(void);

/** Number of CUDA devices a CUDA ring could use; 0 without a driver or device. Never fails. */
int cuframes_cuda_device_count(void);

typedef struct cuframes_cuda_context cuframes_cuda_context_t;
/** Retain the primary context of CUDA device `device` (the context cuframes imports rings
 *  into) and return it as a CUcontext in `*cu_ctx`, for an FFmpeg AVCUDADeviceContext built
 *  on it. The context stays alive until cuframes_cuda_context_release(*out). */
int cuframes_cuda_primary_context(int device, void **cu_ctx, cuframes_cuda_context_t **out);
/** Drop the reference of cuframes_cuda_primary_context. NULL is ignored. */
void cuframes_cuda_context_release(cuframes_cuda_context_t *ctx);

/* ------------------------------------------------------------------------------------------ */
/* Codec helpers (§10.3, R30)                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* The packet ring carries H.264/HEVC as Annex B and AV1 as low-overhead OBUs; its extradata
 * is the Annex B parameter sets (SPS/PPS, VPS/SPS/PPS) or the AV1 sequence header OBU.
 * These functions convert what producers hold (MP4/Matroska avcC, hvcC, av1C) into that form
 * and read the picture size back. Every input is parsed bounds-checked; malformed input is
 * CUFRAMES_ERR_INVALID_ARG with a message, a codec id other than H.264/HEVC/AV1 is
 * CUFRAMES_ERR_FORMAT.
 *
 * Output buffers follow cuframes_subscriber_packet_extradata: `*out_size` receives the size
 * of the result; with buf NULL and cap 0 only the size is returned; a too-small buffer is
 * CUFRAMES_ERR_NO_MEMORY. Results never exceed CUFRAMES_MAX_EXTRADATA_SIZE (larger ones are
 * CUFRAMES_ERR_INVALID_ARG), so a buffer of that size always suffices. */

/** What a sequence-level header (SPS, AV1 sequence header) says about the pictures. */
typedef struct cuframes_codec_video_info {
    uint32_t width, height;  /**< displayed size (cropping applied; AV1: max frame size) */
    int32_t profile;         /**< H.264 profile_idc, HEVC general_profile_idc, AV1 seq_profile */
    int32_t level;           /**< H.264 level_idc, HEVC general_level_idc, AV1 seq_level_idx[0] */
    uint32_t chroma_format;  /**< 0 = monochrome, 1 = 4:2:0, 2 = 4:2:2, 3 = 4:4:4 */
    uint32_t bit_depth;      /**< luma bit depth */
} cuframes_codec_video_info_t;

/** Convert codec extradata (`codec_id` 27/173/226) into the ring's form: avcC or Annex B →
 *  Annex B SPS/PPS (other NAL units dropped); hvcC or Annex B → VPS/SPS/PPS; av1C or OBUs →
 *  the sequence header OBU (with an obu_size field). Empty input gives an empty result;
 *  input without any parameter set is an error. Thread-safe. */
int cuframes_codec_ring_extradata(uint32_t codec_id, const uint8_t *data, size_t size, uint8_t *buf,
                                  size_t cap, size_t *out_size);
/** The in-band parameter sets of one packet (Annex B H.264/HEVC, AV1 OBUs) in the ring's
 *  extradata form; size 0 when the packet carries none. Thread-safe. */
int cuframes_codec_keyframe_extradata(uint32_t codec_id, const uint8_t *data, size_t size, uint8_t *buf,
                                      size_t cap, size_t *out_size);
/** Parse ring-form extradata (the first SPS, or the sequence header OBU) into `info`.
 *  CUFRAMES_ERR_NOT_FOUND if it holds no SPS / sequence header. Thread-safe. */
int cuframes_codec_video_info(uint32_t codec_id, const uint8_t *data, size_t size,
                              cuframes_codec_video_info_t *info);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUFRAMES_H */
