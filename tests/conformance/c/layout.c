/*
 * Conformance fixture of protocol-v4.md §8, in C, against include/cuframes_protocol.h and the
 * include/cuframes.h it includes.
 *
 * Checks, with the values written out from the spec (§2, §3, §10) and the resolutions (R1,
 * R7, R13, R14, R28):
 *   - offsetof, sizeof and type of every field of every struct in the header, and that the
 *     fields listed tile each struct without gaps (so a field missing here is noticed);
 *   - the offset of every element of slots[] and subscribers[];
 *   - every enum value and every constant;
 *   - cuframes_protocol_version() and cuframes_strerror() of the linked library.
 *
 * Entry point: int cuframes_conformance_run(char *report, size_t len) returns the number of
 * failed checks and writes a report (one line per failure, then a summary) into `report`.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuframes_protocol.h"

int cuframes_conformance_run(char *report, size_t len);

struct ctx {
    char *report;
    size_t len;
    size_t used;
    int checks;
    int failures;
    /* Struct being walked by BEGIN/FIELD/END: its name and the next expected offset. */
    const char *type;
    size_t cursor;
};

static void say(struct ctx *c, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (!c->report || c->len == 0 || c->used + 1 >= c->len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(c->report + c->used, c->len - c->used, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    c->used += (size_t)n;
    if (c->used >= c->len)
        c->used = c->len - 1; /* truncated; vsnprintf terminated it */
}

static void check_u(struct ctx *c, int line, const char *what, unsigned long long got,
                    unsigned long long want)
{
    c->checks++;
    if (got != want) {
        c->failures++;
        say(c, "FAIL layout.c:%d: %s = %llu (0x%llx), expected %llu (0x%llx)\n", line, what, got,
            got, want, want);
    }
}

static void check_i(struct ctx *c, int line, const char *what, long long got, long long want)
{
    c->checks++;
    if (got != want) {
        c->failures++;
        say(c, "FAIL layout.c:%d: %s = %lld, expected %lld\n", line, what, got, want);
    }
}

static void check_s(struct ctx *c, int line, const char *what, const char *got, const char *want)
{
    c->checks++;
    if (!got || strcmp(got, want) != 0) {
        c->failures++;
        say(c, "FAIL layout.c:%d: %s = \"%s\", expected \"%s\"\n", line, what,
            got ? got : "(null)", want);
    }
}

static void check_true(struct ctx *c, int line, const char *what, int ok)
{
    c->checks++;
    if (!ok) {
        c->failures++;
        say(c, "FAIL layout.c:%d: %s\n", line, what);
    }
}

#define CHECK_U(expr, want) check_u(c, __LINE__, #expr, (unsigned long long)(expr), (want))
#define CHECK_I(expr, want) check_i(c, __LINE__, #expr, (long long)(expr), (want))
#define CHECK_S(expr, want) check_s(c, __LINE__, #expr, (expr), (want))
#define CHECK(cond) check_true(c, __LINE__, #cond, (cond) ? 1 : 0)

/* The exact C type of an expression, by name (arrays: pass an element). */
#define TYPE_NAME(x)                                                                             \
    _Generic((x), char: "char", uint8_t: "uint8_t", int32_t: "int32_t", uint32_t: "uint32_t",    \
             int64_t: "int64_t", uint64_t: "uint64_t", cuframes_frame_meta_t: "frame_meta",      \
             cuframes_slot_descriptor_t: "slot_descriptor",                                      \
             cuframes_subscriber_slot_t: "subscriber_slot", default: "other")

#define BEGIN(T)                                                                                 \
    do {                                                                                         \
        c->type = #T;                                                                            \
        c->cursor = 0;                                                                           \
    } while (0)

/* A field: its offset and size as the spec gives them, its C type, and that it starts where
 * the previous field ended. */
#define FIELD(T, f, off, size, tname)                                                            \
    do {                                                                                         \
        check_u(c, __LINE__, "offsetof(" #T ", " #f ")", offsetof(T, f), (off));                 \
        check_u(c, __LINE__, "sizeof(" #T "." #f ")", sizeof(((T *)0)->f), (size));             \
        check_s(c, __LINE__, "type of " #T "." #f, TYPE_NAME(((T *)0)->f), (tname));             \
        field_follows(c, __LINE__, #f, offsetof(T, f), sizeof(((T *)0)->f));                     \
    } while (0)

/* An array field of `count` elements of type `tname`. */
#define ARRAY(T, f, off, count, tname)                                                           \
    do {                                                                                         \
        check_u(c, __LINE__, "offsetof(" #T ", " #f ")", offsetof(T, f), (off));                 \
        check_u(c, __LINE__, "elements of " #T "." #f,                                           \
                sizeof(((T *)0)->f) / sizeof(((T *)0)->f[0]), (count));                          \
        check_s(c, __LINE__, "element type of " #T "." #f, TYPE_NAME(((T *)0)->f[0]), (tname)); \
        field_follows(c, __LINE__, #f, offsetof(T, f), sizeof(((T *)0)->f));                     \
    } while (0)

/* The struct's size, and that the fields listed cover it exactly. */
#define END(T, size)                                                                             \
    do {                                                                                         \
        check_u(c, __LINE__, "sizeof(" #T ")", sizeof(T), (size));                               \
        check_u(c, __LINE__, "end of the last field listed of " #T, c->cursor, sizeof(T));       \
        check_u(c, __LINE__, "_Alignof(" #T ")", _Alignof(T), _Alignof(uint64_t));               \
    } while (0)

static void field_follows(struct ctx *c, int line, const char *field, size_t off, size_t size)
{
    c->checks++;
    if (off != c->cursor) {
        c->failures++;
        say(c, "FAIL layout.c:%d: %s.%s starts at 0x%zx, the previous field ended at 0x%zx\n",
            line, c->type, field, off, c->cursor);
    }
    c->cursor = off + size;
}

/* §2.1 */
static void frame_meta(struct ctx *c)
{
    BEGIN(cuframes_frame_meta_t);
    FIELD(cuframes_frame_meta_t, format, 0x00, 4, "uint32_t");
    FIELD(cuframes_frame_meta_t, width, 0x04, 4, "uint32_t");
    FIELD(cuframes_frame_meta_t, height, 0x08, 4, "uint32_t");
    FIELD(cuframes_frame_meta_t, pitch_y, 0x0C, 4, "uint32_t");
    FIELD(cuframes_frame_meta_t, pitch_uv, 0x10, 4, "uint32_t");
    FIELD(cuframes_frame_meta_t, bits_per_pixel, 0x14, 4, "uint32_t");
    FIELD(cuframes_frame_meta_t, frame_size_bytes, 0x18, 8, "uint64_t");
    ARRAY(cuframes_frame_meta_t, reserved, 0x20, 32, "uint8_t");
    END(cuframes_frame_meta_t, 64);
}

/* §2.2 */
static void slot_descriptor(struct ctx *c)
{
    BEGIN(cuframes_slot_descriptor_t);
    FIELD(cuframes_slot_descriptor_t, seq, 0x00, 8, "uint64_t");
    FIELD(cuframes_slot_descriptor_t, pts_ns, 0x08, 8, "int64_t");
    FIELD(cuframes_slot_descriptor_t, ack_bitmap, 0x10, 8, "uint64_t");
    FIELD(cuframes_slot_descriptor_t, written_bytes, 0x18, 8, "uint64_t");
    ARRAY(cuframes_slot_descriptor_t, reserved_mem_handle, 0x20, 64, "uint8_t");
    ARRAY(cuframes_slot_descriptor_t, reserved_external, 0x60, 32, "uint8_t");
    ARRAY(cuframes_slot_descriptor_t, reserved_a, 0x80, 16, "uint8_t");
    ARRAY(cuframes_slot_descriptor_t, reserved_b, 0x90, 48, "uint8_t");
    END(cuframes_slot_descriptor_t, 192);
}

/* §2.3 */
static void subscriber_slot(struct ctx *c)
{
    BEGIN(cuframes_subscriber_slot_t);
    FIELD(cuframes_subscriber_slot_t, state, 0x00, 8, "uint64_t");
    FIELD(cuframes_subscriber_slot_t, consumer_pid, 0x08, 8, "uint64_t");
    FIELD(cuframes_subscriber_slot_t, last_seen_seq, 0x10, 8, "uint64_t");
    FIELD(cuframes_subscriber_slot_t, last_ack_ns, 0x18, 8, "int64_t");
    ARRAY(cuframes_subscriber_slot_t, consumer_name, 0x20, 32, "char");
    ARRAY(cuframes_subscriber_slot_t, reserved, 0x40, 64, "uint8_t");
    END(cuframes_subscriber_slot_t, 128);
}

/* §2.0 with R1 (fixed slots[16], subscribers[32]) and R28 */
static cuframes_shared_header_t header_instance;

static void shared_header(struct ctx *c)
{
    const char *base = (const char *)&header_instance;
    size_t i;

    BEGIN(cuframes_shared_header_t);
    FIELD(cuframes_shared_header_t, magic, 0x0000, 4, "uint32_t");
    FIELD(cuframes_shared_header_t, proto_version, 0x0004, 4, "uint32_t");
    FIELD(cuframes_shared_header_t, lib_version_major, 0x0008, 4, "uint32_t");
    FIELD(cuframes_shared_header_t, lib_version_minor, 0x000C, 4, "uint32_t");
    FIELD(cuframes_shared_header_t, lib_version_patch, 0x0010, 4, "uint32_t");
    FIELD(cuframes_shared_header_t, reserved_a, 0x0014, 4, "uint32_t");
    FIELD(cuframes_shared_header_t, producer_pid, 0x0018, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, ring_size, 0x0020, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, ownership_mode, 0x0028, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, policy, 0x0030, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, max_subscribers, 0x0038, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, meta, 0x0040, 64, "frame_meta");
    ARRAY(cuframes_shared_header_t, reserved_events, 0x0080, 64, "uint8_t");
    FIELD(cuframes_shared_header_t, global_seq, 0x00C0, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, subscriber_bitmap, 0x00C8, 8, "uint64_t");
    FIELD(cuframes_shared_header_t, shutdown_flag, 0x00D0, 8, "uint64_t");
    ARRAY(cuframes_shared_header_t, reserved_b, 0x00D8, 40, "uint8_t");
    ARRAY(cuframes_shared_header_t, slots, 0x0100, 16, "slot_descriptor");
    ARRAY(cuframes_shared_header_t, subscribers, 0x0D00, 32, "subscriber_slot");
    END(cuframes_shared_header_t, 7424);

    /* Every element of the fixed arrays (R1): slot i at 0x100 + 192 i, subscriber i at
     * 0xD00 + 128 i, and the last subscriber ends the object. */
    for (i = 0; i < 16; i++) {
        size_t off = (size_t)((const char *)&header_instance.slots[i] - base);
        if (off != 0x0100 + 192 * i) {
            check_u(c, __LINE__, "offset of slots[i]", off, 0x0100 + 192 * i);
            say(c, "  (i = %zu)\n", i);
        } else {
            c->checks++;
        }
    }
    for (i = 0; i < 32; i++) {
        size_t off = (size_t)((const char *)&header_instance.subscribers[i] - base);
        if (off != 0x0D00 + 128 * i) {
            check_u(c, __LINE__, "offset of subscribers[i]", off, 0x0D00 + 128 * i);
            say(c, "  (i = %zu)\n", i);
        } else {
            c->checks++;
        }
    }
    CHECK_U((const char *)(&header_instance.subscribers[31] + 1) - base, 7424);

    /* R13/R28: the futex word is the low half of global_seq (little-endian), the waiter
     * count a naturally aligned uint32_t at the start of reserved_b. */
    CHECK_U(offsetof(cuframes_shared_header_t, reserved_b), CUFRAMES_FRAME_WAITERS_OFFSET);
    CHECK_U(CUFRAMES_FRAME_WAITERS_OFFSET % sizeof(uint32_t), 0);
    CHECK_U(offsetof(cuframes_shared_header_t, global_seq) % 8, 0);
    CHECK_U(offsetof(cuframes_shared_header_t, subscriber_bitmap) % 8, 0);
    CHECK_U(offsetof(cuframes_shared_header_t, shutdown_flag) % 8, 0);
}

/* §10.2 */
static void packet_ring_header(struct ctx *c)
{
    BEGIN(cuframes_packet_ring_header_t);
    FIELD(cuframes_packet_ring_header_t, magic, 0x0000, 4, "uint32_t");
    FIELD(cuframes_packet_ring_header_t, proto_version, 0x0004, 4, "uint32_t");
    FIELD(cuframes_packet_ring_header_t, ring_slots, 0x0008, 4, "uint32_t");
    FIELD(cuframes_packet_ring_header_t, data_size, 0x000C, 4, "uint32_t");
    FIELD(cuframes_packet_ring_header_t, codec_id, 0x0010, 4, "uint32_t");
    FIELD(cuframes_packet_ring_header_t, codec_extradata_size, 0x0014, 4, "uint32_t");
    FIELD(cuframes_packet_ring_header_t, producer_pid, 0x0018, 8, "uint64_t");
    FIELD(cuframes_packet_ring_header_t, global_seq, 0x0020, 8, "uint64_t");
    FIELD(cuframes_packet_ring_header_t, last_keyframe_seq, 0x0028, 8, "uint64_t");
    FIELD(cuframes_packet_ring_header_t, write_offset, 0x0030, 8, "uint64_t");
    FIELD(cuframes_packet_ring_header_t, shutdown_flag, 0x0038, 8, "uint64_t");
    ARRAY(cuframes_packet_ring_header_t, codec_extradata, 0x0040, 4096, "uint8_t");
    END(cuframes_packet_ring_header_t, 0x1040);
}

/* §10.4 */
static void packet_slot_entry(struct ctx *c)
{
    BEGIN(cuframes_packet_slot_entry_t);
    FIELD(cuframes_packet_slot_entry_t, seq, 0x00, 8, "uint64_t");
    FIELD(cuframes_packet_slot_entry_t, pts_ns, 0x08, 8, "int64_t");
    FIELD(cuframes_packet_slot_entry_t, dts_ns, 0x10, 8, "int64_t");
    FIELD(cuframes_packet_slot_entry_t, data_offset, 0x18, 8, "uint64_t");
    FIELD(cuframes_packet_slot_entry_t, data_size, 0x20, 4, "uint32_t");
    FIELD(cuframes_packet_slot_entry_t, flags, 0x24, 4, "uint32_t");
    ARRAY(cuframes_packet_slot_entry_t, reserved, 0x28, 24, "uint8_t");
    END(cuframes_packet_slot_entry_t, 64);
}

/* R7 */
static void enums(struct ctx *c)
{
    CHECK_I(CUFRAMES_FORMAT_NONE, 0);
    CHECK_I(CUFRAMES_FORMAT_NV12, 1);
    CHECK_I(CUFRAMES_FORMAT_P010, 2);
    CHECK_I(CUFRAMES_FORMAT_P016, 3);
    CHECK_I(CUFRAMES_FORMAT_YUV420P, 4);
    CHECK_I(CUFRAMES_FORMAT_YUV444P, 5);
    CHECK_I(CUFRAMES_FORMAT_RGBA, 6);
    CHECK_I(CUFRAMES_FORMAT_BGRA, 7);

    CHECK_I(CUFRAMES_MODE_COPY, 0);
    CHECK_I(CUFRAMES_MODE_ZERO_COPY, 1);

    CHECK_I(CUFRAMES_OK, 0);
    CHECK_I(CUFRAMES_ERR_INVALID_ARG, -1);
    CHECK_I(CUFRAMES_ERR_PROTOCOL, -2);
    CHECK_I(CUFRAMES_ERR_FORMAT, -3);
    CHECK_I(CUFRAMES_ERR_TOO_MANY, -4);
    CHECK_I(CUFRAMES_ERR_NOT_FOUND, -5);
    CHECK_I(CUFRAMES_ERR_ALREADY_EXISTS, -6);
    CHECK_I(CUFRAMES_ERR_TIMEOUT, -7);
    CHECK_I(CUFRAMES_ERR_DISCONNECTED, -8);
    CHECK_I(CUFRAMES_ERR_PACKET_OVERRUN, -9);
    CHECK_I(CUFRAMES_ERR_PERMISSION, -10);
    CHECK_I(CUFRAMES_ERR_CUDA, -11);
    CHECK_I(CUFRAMES_ERR_IO, -12);
    CHECK_I(CUFRAMES_ERR_NO_MEMORY, -13);

    /* The enum types hold their values in an int-sized object, as the wire's 32 bits do. */
    CHECK_U(sizeof(cuframes_format_t), 4);
    CHECK_U(sizeof(cuframes_subscriber_mode_t), 4);
    CHECK_U(sizeof(cuframes_error_t), 4);
    {
        cuframes_error_t e = CUFRAMES_ERR_NO_MEMORY;
        CHECK(e < 0);
    }
}

static void constants(struct ctx *c)
{
    /* §2.0, §7, §10.2 */
    CHECK_U(CUFRAMES_PROTOCOL_MAGIC_V4, 0xCC7C1DCEull);
    CHECK_U(CUFRAMES_PROTOCOL_MAGIC_LEGACY, 0xCC7C1DCCull);
    CHECK_U(CUFRAMES_PACKET_MAGIC, 0xCC7C1DCDull);
    CHECK_U(CUFRAMES_PACKET_MAGIC, CUFRAMES_PROTOCOL_MAGIC_V4 - 1);
    CHECK_U(CUFRAMES_PROTOCOL_VERSION, 4);
    CHECK_U(CUFRAMES_LIB_VERSION_MAJOR, 0);
    CHECK_U(CUFRAMES_LIB_VERSION_MINOR, 4);
    CHECK_U(CUFRAMES_LIB_VERSION_PATCH, 0);
    CHECK_U(sizeof(CUFRAMES_PROTOCOL_MAGIC_V4), 4);
    CHECK_U(sizeof(CUFRAMES_PACKET_MAGIC), 4);

    /* Limits (§1, §2, §10.2, §10.3, R2) */
    CHECK_U(CUFRAMES_MAX_RING_SIZE, 16);
    CHECK_U(CUFRAMES_MAX_SUBSCRIBER_SLOTS, 32);
    CHECK_U(CUFRAMES_MAX_SUBSCRIBERS, 31);
    CHECK_U(CUFRAMES_MAX_PACKET_RING_SLOTS, 1024);
    CHECK_U(CUFRAMES_DEFAULT_PACKET_RING_SLOTS, 64);
    CHECK_U(CUFRAMES_DEFAULT_PACKET_DATA_SIZE, 8u * 1024 * 1024);
    CHECK_U(CUFRAMES_MAX_EXTRADATA_SIZE, 4096);
    CHECK_U(CUFRAMES_MAX_KEY_LEN, 63);
    CHECK_U(CUFRAMES_MAX_CONSUMER_NAME_LEN, 31);
    CHECK_U(CUFRAMES_MAX_CONSUMER_NAME_LEN + 1, sizeof(((cuframes_subscriber_slot_t *)0)->consumer_name));
    CHECK_U(CUFRAMES_MAX_RING_SIZE, sizeof(header_instance.slots) / sizeof(header_instance.slots[0]));
    CHECK_U(CUFRAMES_MAX_SUBSCRIBER_SLOTS,
            sizeof(header_instance.subscribers) / sizeof(header_instance.subscribers[0]));
    CHECK_U(CUFRAMES_MAX_EXTRADATA_SIZE,
            sizeof(((cuframes_packet_ring_header_t *)0)->codec_extradata));

    /* Sentinels (§2.2, §10.4, R25) */
    CHECK_U(CUFRAMES_INVALID_SEQ, UINT64_MAX);
    CHECK_U(sizeof(CUFRAMES_INVALID_SEQ), 8);
    CHECK(CUFRAMES_INVALID_SEQ > 0);
    CHECK_I(CUFRAMES_NO_PTS, INT64_MIN);
    CHECK_U(sizeof(CUFRAMES_NO_PTS), 8);
    CHECK(CUFRAMES_NO_PTS < 0);

    /* Geometry (R1, R28, §10.2) */
    CHECK_U(CUFRAMES_FRAME_SHM_SIZE, 7424);
    CHECK_U(CUFRAMES_FRAME_SHM_SIZE, 0x0100 + 16 * 192 + 32 * 128);
    CHECK_U(CUFRAMES_FRAME_SLOTS_OFFSET, 0x0100);
    CHECK_U(CUFRAMES_FRAME_SUBSCRIBERS_OFFSET, 0x0D00);
    CHECK_U(CUFRAMES_FRAME_WAITERS_OFFSET, 0x00D8);
    /* Our extensions live inside reserved bytes (docs/protocol.md, "Extensions"). */
    CHECK_U(CUFRAMES_FRAME_MEMORY_KIND_OFFSET, CUFRAMES_FRAME_WAITERS_OFFSET + 4);
    CHECK(CUFRAMES_FRAME_MEMORY_KIND_OFFSET + 4 <= offsetof(cuframes_shared_header_t, slots));
    CHECK_U(CUFRAMES_SUB_DELIVERED_OFFSET, offsetof(cuframes_subscriber_slot_t, reserved));
    CHECK_U(CUFRAMES_SUB_DROPPED_OVERRUN_OFFSET, CUFRAMES_SUB_DELIVERED_OFFSET + 8);
    CHECK_U(CUFRAMES_SUB_DROPPED_TORN_OFFSET, CUFRAMES_SUB_DROPPED_OVERRUN_OFFSET + 8);
    CHECK(CUFRAMES_SUB_DROPPED_TORN_OFFSET + 8 <= sizeof(cuframes_subscriber_slot_t));
    CHECK_U(CUFRAMES_PACKET_HEADER_SIZE, 0x1040);
    CHECK_U(CUFRAMES_PACKET_SLOT_SIZE, 64);

    /* §2.0 ownership and policy, §2.3 states, R14 memory kinds, §3.8 reasons */
    CHECK_U(CUFRAMES_OWNERSHIP_LIBRARY, 0);
    CHECK_U(CUFRAMES_POLICY_DROP_OLDEST, 0);
    CHECK_U(CUFRAMES_POLICY_STRICT_WAIT, 1);
    CHECK_U(CUFRAMES_SUBSCRIBER_FREE, 0);
    CHECK_U(CUFRAMES_SUBSCRIBER_CONNECTING, 1);
    CHECK_U(CUFRAMES_SUBSCRIBER_ACTIVE, 2);
    CHECK_U(CUFRAMES_SUBSCRIBER_DRAINING, 3);
    CHECK_U(CUFRAMES_MEMORY_CUDA_VMM, 0);
    CHECK_U(CUFRAMES_MEMORY_HOST_MEMFD, 1);
    CHECK_U(CUFRAMES_SHUTDOWN_NORMAL, 0);
    CHECK_U(CUFRAMES_SHUTDOWN_ERROR, 1);
    CHECK_U(CUFRAMES_SHUTDOWN_UPGRADE, 2);

    /* §3.2 */
    CHECK_U(CUFRAMES_MSG_HELLO_REQ, 0x01);
    CHECK_U(CUFRAMES_MSG_HELLO_RESP, 0x02);
    CHECK_U(CUFRAMES_MSG_SUBSCRIBE_REQ, 0x03);
    CHECK_U(CUFRAMES_MSG_SUBSCRIBE_RESP, 0x04);
    CHECK_U(CUFRAMES_MSG_VMM_FDS, 0x05);
    CHECK_U(CUFRAMES_MSG_UNSUBSCRIBE, 0x10);
    CHECK_U(CUFRAMES_MSG_EVENT_FD_LEGACY, 0x20);
    CHECK_U(CUFRAMES_MSG_SHUTDOWN, 0x30);
    CHECK_U(CUFRAMES_MSG_PING, 0xF0);
    CHECK_U(CUFRAMES_MSG_PONG, 0xF1);
    CHECK_U(CUFRAMES_MSG_ERROR, 0xFE);

    /* §10.9 / R3 */
    CHECK_U(CUFRAMES_SUBSCRIBE_WANTS_FRAMES, 1u << 0);
    CHECK_U(CUFRAMES_SUBSCRIBE_WANTS_PACKETS, 1u << 1);
    CHECK_U(CUFRAMES_SUBSCRIBE_ACK_PAGE, 1u << 2);
    CHECK_U(CUFRAMES_PUBLISHER_ACK_PAGES, 1u << 0);
    CHECK_U(CUFRAMES_MSG_ACK_PAGE, 0x06);
    /* ACK page (extension, docs/protocol.md "ACK pages"). */
    CHECK_U(sizeof(cuframes_ack_page_t), CUFRAMES_ACK_PAGE_SIZE);
    CHECK_U(CUFRAMES_ACK_PAGE_SIZE, 4096);
    CHECK_U(CUFRAMES_ACK_PAGE_MAGIC, 0xCC7C1DACu);
    CHECK_U(offsetof(cuframes_ack_page_t, magic), 0x00);
    CHECK_U(offsetof(cuframes_ack_page_t, version), 0x04);
    CHECK_U(offsetof(cuframes_ack_page_t, ack_count), 0x08);
    CHECK_U(offsetof(cuframes_ack_page_t, ready), 0x0C);
    CHECK_U(offsetof(cuframes_ack_page_t, acked_seq), 0x10);
    CHECK_U(offsetof(cuframes_ack_page_t, last_seen_seq), 0x90);
    CHECK_U(offsetof(cuframes_ack_page_t, last_ack_ns), 0x98);
    CHECK_U(offsetof(cuframes_ack_page_t, delivered), 0xA0);
    CHECK_U(offsetof(cuframes_ack_page_t, dropped_overrun), 0xA8);
    CHECK_U(offsetof(cuframes_ack_page_t, dropped_torn), 0xB0);
    CHECK_U(offsetof(cuframes_ack_page_t, reserved_b), 0xB8);

    /* §10.5 */
    CHECK_U(CUFRAMES_PACKET_FLAG_KEY, 1u << 0);
    CHECK_U(CUFRAMES_PACKET_FLAG_CORRUPT, 1u << 1);
    CHECK_U(CUFRAMES_PACKET_FLAG_DISCONTINUITY, 1u << 2);
    CHECK_U(CUFRAMES_PACKET_FLAG_LAST_IN_AU, 1u << 3);
    CHECK_U(CUFRAMES_PACKET_FLAGS_KNOWN,
            CUFRAMES_PACKET_FLAG_KEY | CUFRAMES_PACKET_FLAG_CORRUPT |
                CUFRAMES_PACKET_FLAG_DISCONTINUITY | CUFRAMES_PACKET_FLAG_LAST_IN_AU);

    /* §10.3: FFmpeg's AV_CODEC_ID_* values */
    CHECK_U(CUFRAMES_CODEC_ID_H264, 27);
    CHECK_U(CUFRAMES_CODEC_ID_HEVC, 173);
    CHECK_U(CUFRAMES_CODEC_ID_AV1, 226);
}

/* §8 ShmHeaderMagic, and the other function of the header. */
static void functions(struct ctx *c)
{
    static const int codes[] = {
        CUFRAMES_OK,
        CUFRAMES_ERR_INVALID_ARG,
        CUFRAMES_ERR_PROTOCOL,
        CUFRAMES_ERR_FORMAT,
        CUFRAMES_ERR_TOO_MANY,
        CUFRAMES_ERR_NOT_FOUND,
        CUFRAMES_ERR_ALREADY_EXISTS,
        CUFRAMES_ERR_TIMEOUT,
        CUFRAMES_ERR_DISCONNECTED,
        CUFRAMES_ERR_PACKET_OVERRUN,
        CUFRAMES_ERR_PERMISSION,
        CUFRAMES_ERR_CUDA,
        CUFRAMES_ERR_IO,
        CUFRAMES_ERR_NO_MEMORY,
    };
    size_t i;

    CHECK_U(cuframes_protocol_version(), 4);
    CHECK_U(cuframes_protocol_version(), CUFRAMES_PROTOCOL_VERSION);

    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = cuframes_strerror(codes[i]);
        c->checks++;
        if (!s || !*s || strcmp(s, "unknown error") == 0) {
            c->failures++;
            say(c, "FAIL layout.c:%d: cuframes_strerror(%d) = \"%s\"\n", __LINE__, codes[i],
                s ? s : "(null)");
        }
    }
    CHECK_S(cuframes_strerror(CUFRAMES_OK), "success");
    CHECK_S(cuframes_strerror(CUFRAMES_ERR_TOO_MANY), "too many subscribers (at most 31)");
    CHECK_S(cuframes_strerror(12345), "unknown error");
    CHECK_S(cuframes_strerror(-14), "unknown error");
}

int cuframes_conformance_run(char *report, size_t len)
{
    struct ctx ctx;
    struct ctx *c = &ctx;

    memset(&ctx, 0, sizeof(ctx));
    ctx.report = report;
    ctx.len = len;
    if (report && len)
        report[0] = '\0';

    frame_meta(c);
    slot_descriptor(c);
    subscriber_slot(c);
    shared_header(c);
    packet_ring_header(c);
    packet_slot_entry(c);
    enums(c);
    constants(c);
    functions(c);

    say(c, "layout.c: %d checks, %d failures\n", ctx.checks, ctx.failures);
    return ctx.failures;
}
