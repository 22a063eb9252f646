/*
 * cuframes.h — the C API of libcuframes.
 *
 * cuframes shares decoded video frames (CUDA VMM or host memory) and encoded packets
 * between processes on one machine. This header declares what a C program (an FFmpeg
 * component, say) needs to publish and subscribe: the handles and their functions, their
 * option and result structs, and the constants and enum values those carry.
 *
 * The wire protocol the library speaks (version 4: the shared-memory layouts, the socket
 * message ids, the magics), for third-party peers and diagnostic tools that map the shared
 * memory themselves, is declared in cuframes_protocol.h, installed beside this header; a
 * program of this API does not need it.
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
/* Versions and limits (§1, §2, §10.2, §10.3)                                                 */
/* ------------------------------------------------------------------------------------------ */

/** The wire protocol version the library speaks (§7.1); peers with another version are
 *  refused with CUFRAMES_ERR_PROTOCOL. */
#define CUFRAMES_PROTOCOL_VERSION 4u

/** Frame ring: at most 16 slots (cuframes_frame_ring_config_t.ring_size, R1). */
#define CUFRAMES_MAX_RING_SIZE 16u
/** Subscribers a publisher admits at once (§2.3, R2). */
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
/** Subscriber names (cuframes_subscriber_options_t.name): at most 31 characters (§2.3). */
#define CUFRAMES_MAX_CONSUMER_NAME_LEN 31u

/** A missing pts or dts of a packet: INT64_MIN (R25). */
#define CUFRAMES_NO_PTS (-0x7FFFFFFFFFFFFFFFll - 1)

/* ------------------------------------------------------------------------------------------ */
/* Values carried in integer fields                                                           */
/* ------------------------------------------------------------------------------------------ */

/** Frame ring policy: cuframes_frame_ring_config_t.policy (§6, R11). */
#define CUFRAMES_POLICY_DROP_OLDEST 0u /**< never wait for ACKs; overwrite the oldest slot */
#define CUFRAMES_POLICY_STRICT_WAIT 1u /**< wait for every active subscriber's ACK (R11) */

/** Memory backing the frame slots: cuframes_frame_ring_config_t.memory_kind,
 *  cuframes_frame_info_t.memory_kind (R14). */
#define CUFRAMES_MEMORY_CUDA_VMM 0u   /**< cuMemCreate(POSIX_FILE_DESCRIPTOR) device memory */
#define CUFRAMES_MEMORY_HOST_MEMFD 1u /**< memfd host memory (CPU-only hosts, CI) */

/** Subscriber options flags: what a subscriber asks for (§10.9, R3); 0 means frames only. */
#define CUFRAMES_SUBSCRIBE_WANTS_FRAMES 0x1u
#define CUFRAMES_SUBSCRIBE_WANTS_PACKETS 0x2u

/** Packet flags: cuframes_publisher_publish_packet's flags and cuframes_packet_info_t.flags
 *  (§10.5); bits 4..31 are reserved (0). */
#define CUFRAMES_PACKET_FLAG_KEY 0x1u           /**< keyframe (IDR / CRA) */
#define CUFRAMES_PACKET_FLAG_CORRUPT 0x2u       /**< damaged packet (e.g. RTP loss) */
#define CUFRAMES_PACKET_FLAG_DISCONTINUITY 0x4u /**< gap before this packet (R9, R15) */
#define CUFRAMES_PACKET_FLAG_LAST_IN_AU 0x8u    /**< last NAL of an access unit */
#define CUFRAMES_PACKET_FLAGS_KNOWN 0xFu

/** Codec ids: cuframes_packet_ring_config_t.codec_id, fixed wire values (§10.3). They are the
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

/** Pixel format of the frames of a ring: cuframes_frame_ring_config_t.format,
 *  cuframes_frame_layout_t.format (§2.1, R7). */
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

/** How a subscriber receives frames: cuframes_subscriber_options_t.mode (§3.3, R7). */
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
 *  SHUTDOWN with reason CUFRAMES_SHUTDOWN_NEW_RING (cuframes_protocol.h) and subscribe
 *  again (this library's subscriber by itself; its frames then have the new layout:
 *  cuframes_frame_layout). Under
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
/** The same for the frame subscribers only: a packet reader of the same key (a command that
 *  publishes both rings) is no frame reader. What a frame publisher waits for. */
int cuframes_publisher_ready_frame_subscriber_count(const cuframes_publisher_t *pub);
/** Admitted packet subscribers (frame readers of the same key not counted), or a negative
 *  error: what a packet publisher waits for. */
int cuframes_publisher_packet_subscriber_count(const cuframes_publisher_t *pub);

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
/** A reference on a CUDA device's primary context (cuframes_subscriber_warm_up,
 *  cuframes_cuda_primary_context), released with cuframes_cuda_context_release. */
typedef struct cuframes_cuda_context cuframes_cuda_context_t;

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
/** Make CUDA ready while waiting for a publisher (call it after a connect failed for want of
 *  one): *out is a reference on the device a subscriber with these options will most likely
 *  import a CUDA ring on, to release with cuframes_cuda_context_release once connected, or NULL
 *  when there is none (no GPU; several GPUs and an automatic device). The driver's set-up and
 *  the context's creation then happen while waiting, not after the publisher appeared (where a
 *  publisher with wait_subscribers waits for them). */
int cuframes_subscriber_warm_up(const cuframes_subscriber_options_t *opts,
                                cuframes_cuda_context_t **out);
/** After the publisher ended the stream (a read returned CUFRAMES_ERR_DISCONNECTED), wait up
 *  to timeout_ms for its process to exit: CUFRAMES_OK once it has (or when it is not visible
 *  from this PID namespace), CUFRAMES_ERR_TIMEOUT while it lives (at once while the stream has
 *  not ended). A reader that calls it before cuframes_subscriber_destroy releases its GPU state
 *  after the publisher's teardown, which the driver would otherwise serialise with it. */
int cuframes_subscriber_wait_publisher_exit(const cuframes_subscriber_t *sub, uint32_t timeout_ms);
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
/** Size the GOP store, the publisher's copy of the newest two GOPs from which a late subscriber
 *  starts at once on a keyframe the ring already overwrote (docs/protocol.md, "GOP store"): at
 *  most bytes_per_gop payload bytes and packets_per_gop packets (1..65536) per GOP, a larger
 *  GOP is not kept; bytes_per_gop 0 keeps no store. Every packet ring has one by default
 *  (32 MiB, 4096 packets). Only before the first packet (CUFRAMES_ERR_INVALID_ARG after). */
int cuframes_publisher_set_gop_store(cuframes_publisher_t *pub, uint32_t bytes_per_gop,
                                     uint32_t packets_per_gop);
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
