/*
 * cuframes_pkt demuxer: read encoded H.264/HEVC/AV1 packets from a cuframes packet ring
 *
 * This file is part of FFmpeg.
 *
 * FFmpeg is free software; you can redistribute it and/or
 * modify it under the terms of the GNU Lesser General Public
 * License as published by the Free Software Foundation; either
 * version 2.1 of the License, or (at your option) any later version.
 *
 * FFmpeg is distributed in the hope that it will be useful,
 * but WITHOUT ANY WARRANTY; without even the implied warranty of
 * MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the GNU
 * Lesser General Public License for more details.
 *
 * You should have received a copy of the GNU Lesser General Public
 * License along with FFmpeg; if not, write to the Free Software
 * Foundation, Inc., 51 Franklin Street, Fifth Floor, Boston, MA 02110-1301 USA
 */

/*
 * The input "file name" is the cuframes key (`-f cuframes_pkt -i cam1`). libcuframes does
 * the work: the handshake, the keyframe-aligned start (§10.8, R26), overrun recovery with
 * DISCONTINUITY (R9), the end of stream when the publisher leaves, and the parsing of the
 * ring's extradata (cuframes_codec_video_info). This file only forwards.
 */

#include "libavutil/dict.h"
#include "libavutil/mem.h"
#include "libavutil/opt.h"
#include "libavutil/time.h"
#include "avformat.h"
#include "demux.h"
#include "internal.h"
#include "url.h"
#include "cuframes_pkt.h"

/* How long one wait for a packet lasts before the interrupt callback is looked at. */
#define CUFRAMES_PKT_POLL_MS 100

typedef struct CuframesPktDemuxContext {
    const AVClass *class;
    char *runtime_dir;
    char *name;
    int64_t handshake_timeout;
    int64_t wait_publisher;
    int64_t read_timeout;
    AVRational time_base;
    int reconnect;
    int64_t spin_us;
    int64_t publisher_uid;
    int64_t max_packet_ring_size;
    int64_t max_packet_size;

    cuframes_subscriber_t *sub;
    AVPacket *pending;
    /* How the gaps are told apart and counted: the seq of the last packet returned (0 before
     * the first), the library's losses (overruns + oversized) at the last discontinuity, and
     * the packets this reader lost, for the warning of each gap and the one at the end. */
    uint64_t last_seq;
    uint64_t losses_seen;
    uint64_t lost_packets;
    uint64_t lossy_gaps;
} CuframesPktDemuxContext;

static int cuframes_pkt_read_close(AVFormatContext *s)
{
    CuframesPktDemuxContext *c = s->priv_data;

    if (c->lost_packets)
        av_log(s, AV_LOG_WARNING, "'%s': %"PRIu64" packets lost in %"PRIu64" gaps: this reader "
               "fell behind by more than the ring holds (a larger ring_slots/data_size at the "
               "publisher, or -thread_queue_size here, lets it fall further behind)\n",
               s->url, c->lost_packets, c->lossy_gaps);
    cuframes_subscriber_destroy(c->sub);
    c->sub = NULL;
    av_packet_free(&c->pending);
    return 0;
}

static int cuframes_pkt_fail(AVFormatContext *s, int rc, const char *what)
{
    av_log(s, AV_LOG_ERROR, "%s '%s': %s\n", what, s->url, cuframes_last_error());
    return ff_cuframes_averror(rc);
}

static int cuframes_pkt_connect(AVFormatContext *s)
{
    CuframesPktDemuxContext *c = s->priv_data;
    cuframes_subscriber_options_t o;
    int64_t deadline = av_gettime_relative() + c->wait_publisher;
    int rc;

    cuframes_subscriber_options_default(&o);
    o.runtime_dir        = c->runtime_dir;
    o.name               = c->name;
    o.flags              = CUFRAMES_SUBSCRIBE_WANTS_PACKETS;
    o.connect_timeout_ms = ff_cuframes_duration_ms(c->handshake_timeout);
    o.spin_us            = (uint32_t)c->spin_us;
    o.max_packet_ring_size = (uint32_t)c->max_packet_ring_size;
    o.max_packet_size      = (uint32_t)c->max_packet_size;
    /* A restarted publisher is waited for as long as a missing one at the start. */
    if (c->reconnect)
        o.reconnect_ms = (uint32_t)av_clip64(FFMAX(c->wait_publisher / 1000, 1), 1, UINT32_MAX);
    o.publisher_uid = c->publisher_uid;
    for (;;) {
        rc = cuframes_subscriber_connect(s->url, &o, &c->sub);
        /* NOT_FOUND: no publisher yet, or one without a packet ring yet. */
        if (rc != CUFRAMES_ERR_NOT_FOUND || av_gettime_relative() >= deadline)
            break;
        if (ff_check_interrupt(&s->interrupt_callback))
            return AVERROR_EXIT;
        av_usleep(20000);
    }
    if (rc == CUFRAMES_ERR_NOT_FOUND) {
        av_log(s, AV_LOG_ERROR, "%s. Start a packet publisher, e.g. "
               "'ffmpeg -re -i in.mp4 -c copy -f cuframes_pkt %s', or wait for it with -wait_publisher\n",
               cuframes_last_error(), s->url);
        return AVERROR(ENOENT);
    }
    if (rc != CUFRAMES_OK)
        return cuframes_pkt_fail(s, rc, "cannot subscribe to");
    return 0;
}

/* cuframes_packet_buffer_fn: the payload goes straight into the AVPacket (one copy). The
 * library asks only for packets within max_packet_size (larger ones are skipped before). */
static uint8_t *cuframes_pkt_buffer(void *opaque, size_t size)
{
    AVPacket *pkt = opaque;

    av_packet_unref(pkt);
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE || av_new_packet(pkt, (int)size) < 0)
        return NULL;
    return pkt->data;
}

/* Say what a DISCONTINUITY before packet `seq` stands for: packets this reader lost (the
 * library counted an overrun or an oversized packet since the last one, and seqs were skipped),
 * or a gap it did not cause (the publisher flagged one, or a restarted publisher). */
static void cuframes_pkt_log_gap(AVFormatContext *s, uint64_t seq)
{
    CuframesPktDemuxContext *c = s->priv_data;
    cuframes_packet_stats_t st = { 0 };
    uint64_t losses;

    if (cuframes_subscriber_packet_stats(c->sub, &st) != CUFRAMES_OK) {
        av_log(s, AV_LOG_WARNING, "discontinuity before packet %"PRIu64" of '%s'\n", seq, s->url);
        return;
    }
    losses = st.overruns + st.oversized;
    /* Differences, never sums, of the publisher's seqs: a seq near UINT64_MAX wraps nothing. */
    if (losses > c->losses_seen && c->last_seq && seq > c->last_seq && seq - c->last_seq > 1) {
        uint64_t lost = seq - c->last_seq - 1;

        /* Saturating: across reconnects, hostile publishers' seq jumps could wrap the sum. */
        c->lost_packets = lost > UINT64_MAX - c->lost_packets ? UINT64_MAX : c->lost_packets + lost;
        c->lossy_gaps++;
        av_log(s, AV_LOG_WARNING, "discontinuity before packet %"PRIu64" of '%s': %"PRIu64" packets "
               "lost (overwritten before this reader read them, or larger than max_packet_size); "
               "resuming at a keyframe\n", seq, s->url, lost);
    } else {
        av_log(s, AV_LOG_WARNING, "discontinuity before packet %"PRIu64" of '%s' (a gap at the "
               "publisher, or a restarted publisher)\n", seq, s->url);
    }
    /* A new reader after a reconnect counts from 0 again. */
    c->losses_seen = losses;
}

/* The next packet of the ring into pkt: waits, watching the interrupt callback. */
static int cuframes_pkt_next(AVFormatContext *s, AVPacket *pkt, AVRational tb)
{
    CuframesPktDemuxContext *c = s->priv_data;
    int64_t deadline = c->read_timeout > 0 ? av_gettime_relative() + c->read_timeout : INT64_MAX;
    cuframes_packet_info_t info;
    int rc, ret;

    for (;;) {
        rc = cuframes_subscriber_next_packet_into(c->sub, CUFRAMES_PKT_POLL_MS,
                                                  cuframes_pkt_buffer, pkt, &info);
        if (rc != CUFRAMES_ERR_TIMEOUT)
            break;
        /* A read that raced the publisher may have left a buffer behind. */
        av_packet_unref(pkt);
        if (ff_check_interrupt(&s->interrupt_callback))
            return AVERROR_EXIT;
        if (av_gettime_relative() >= deadline) {
            av_log(s, AV_LOG_ERROR, "no packet from '%s' within %.3f s\n", s->url, c->read_timeout / 1e6);
            return AVERROR(ETIMEDOUT);
        }
    }
    if (rc == CUFRAMES_ERR_DISCONNECTED) {
        av_packet_unref(pkt);
        av_log(s, AV_LOG_VERBOSE, "end of stream: %s\n", cuframes_last_error());
        return AVERROR_EOF;
    }
    if (rc != CUFRAMES_OK) {
        av_packet_unref(pkt);
        return cuframes_pkt_fail(s, rc, "cannot read a packet from");
    }
    pkt->stream_index = 0;
    pkt->pts = info.pts_ns == CUFRAMES_NO_PTS ? AV_NOPTS_VALUE :
               av_rescale_q(info.pts_ns, CUFRAMES_PKT_NS_TB, tb);
    pkt->dts = info.dts_ns == CUFRAMES_NO_PTS ? AV_NOPTS_VALUE :
               av_rescale_q(info.dts_ns, CUFRAMES_PKT_NS_TB, tb);
    if (info.flags & CUFRAMES_PACKET_FLAG_KEY)
        pkt->flags |= AV_PKT_FLAG_KEY;
    if (info.flags & CUFRAMES_PACKET_FLAG_CORRUPT)
        pkt->flags |= AV_PKT_FLAG_CORRUPT;
    /* DISCONTINUITY and LAST_IN_AU have no AVPacket flag: packet side data (R15). */
    if (info.flags & (CUFRAMES_PACKET_FLAG_DISCONTINUITY | CUFRAMES_PACKET_FLAG_LAST_IN_AU)) {
        AVDictionary *dict = NULL;
        uint8_t *sd;
        size_t sd_size;
        char val[16];

        if (info.flags & CUFRAMES_PACKET_FLAG_DISCONTINUITY)
            cuframes_pkt_log_gap(s, info.seq);
        snprintf(val, sizeof(val), "0x%x", (unsigned)info.flags);
        if ((ret = av_dict_set(&dict, CUFRAMES_PKT_FLAGS_KEY, val, 0)) < 0)
            return ret;
        sd = av_packet_pack_dictionary(dict, &sd_size);
        av_dict_free(&dict);
        if (!sd)
            return AVERROR(ENOMEM);
        if ((ret = av_packet_add_side_data(pkt, AV_PKT_DATA_STRINGS_METADATA, sd, sd_size)) < 0) {
            av_free(sd);
            return ret;
        }
    }
    /* The next gap is counted from this packet. */
    c->last_seq = info.seq;
    return 0;
}

static int cuframes_pkt_read_header(AVFormatContext *s)
{
    CuframesPktDemuxContext *c = s->priv_data;
    uint8_t extradata[CUFRAMES_MAX_EXTRADATA_SIZE];
    size_t extradata_size = 0;
    cuframes_codec_video_info_t vi;
    uint32_t codec_id;
    AVStream *st;
    int rc, ret;

    if ((ret = cuframes_pkt_connect(s)) < 0)
        return ret;
    rc = cuframes_subscriber_packet_codec(c->sub, &codec_id);
    if (rc != CUFRAMES_OK)
        return cuframes_pkt_fail(s, rc, "no packet codec for");
    if (ff_cuframes_pkt_av_codec(codec_id) == AV_CODEC_ID_NONE) {
        av_log(s, AV_LOG_ERROR, "'%s' carries codec id %u; cuframes_pkt reads H.264, HEVC or AV1\n",
               s->url, codec_id);
        return AVERROR_PATCHWELCOME;
    }

    rc = cuframes_subscriber_packet_extradata(c->sub, extradata, sizeof(extradata), &extradata_size);
    if (rc != CUFRAMES_OK)
        return cuframes_pkt_fail(s, rc, "cannot read the extradata of");
    if (!extradata_size) {
        /* The publisher sets it with its first keyframe (§10.3): read that keyframe now. */
        if (!(c->pending = av_packet_alloc()))
            return AVERROR(ENOMEM);
        if ((ret = cuframes_pkt_next(s, c->pending, c->time_base)) < 0)
            return ret;
        rc = cuframes_subscriber_packet_extradata(c->sub, extradata, sizeof(extradata), &extradata_size);
        if (rc == CUFRAMES_OK && !extradata_size)
            rc = cuframes_codec_keyframe_extradata(codec_id, c->pending->data, c->pending->size,
                                                   extradata, sizeof(extradata), &extradata_size);
        if (rc != CUFRAMES_OK)
            return cuframes_pkt_fail(s, rc, "cannot read the extradata of");
    }

    if (!(st = avformat_new_stream(s, NULL)))
        return AVERROR(ENOMEM);
    st->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
    st->codecpar->codec_id   = ff_cuframes_pkt_av_codec(codec_id);
    if (extradata_size) {
        if ((ret = ff_alloc_extradata(st->codecpar, extradata_size)) < 0)
            return ret;
        memcpy(st->codecpar->extradata, extradata, extradata_size);
        rc = cuframes_codec_video_info(codec_id, extradata, extradata_size, &vi);
        if (rc == CUFRAMES_OK) {
            st->codecpar->width   = vi.width;
            st->codecpar->height  = vi.height;
            st->codecpar->profile = vi.profile;
            st->codecpar->level   = vi.level;
        } else {
            av_log(s, AV_LOG_WARNING, "cannot read the picture size from the extradata of '%s': %s\n",
                   s->url, cuframes_last_error());
        }
    } else {
        av_log(s, AV_LOG_WARNING, "'%s' has no codec extradata; decoders need in-band parameter sets\n",
               s->url);
    }
    avpriv_set_pts_info(st, 64, c->time_base.num, c->time_base.den);
    return 0;
}

static int cuframes_pkt_read_packet(AVFormatContext *s, AVPacket *pkt)
{
    CuframesPktDemuxContext *c = s->priv_data;

    if (c->pending && c->pending->size) {
        av_packet_move_ref(pkt, c->pending);
        return 0;
    }
    return cuframes_pkt_next(s, pkt, s->streams[0]->time_base);
}

#define OFFSET(x) offsetof(CuframesPktDemuxContext, x)
#define D AV_OPT_FLAG_DECODING_PARAM
static const AVOption options[] = {
    { "wait_publisher", FF_CUFRAMES_HELP_WAIT_PUBLISHER,
      OFFSET(wait_publisher), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_WAIT_PUBLISHER_DEFAULT }, 0, INT64_MAX, D },
    { "handshake_timeout", FF_CUFRAMES_HELP_HANDSHAKE_TIMEOUT,
      OFFSET(handshake_timeout), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_HANDSHAKE_TIMEOUT_DEFAULT }, 1000, INT64_MAX, D },
    { "read_timeout", FF_CUFRAMES_HELP_READ_TIMEOUT,
      OFFSET(read_timeout), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_READ_TIMEOUT_DEFAULT }, 0, INT64_MAX, D },
    /* cuframes 0.4 called the handshake timeout connect_timeout (a duration already). */
    { "connect_timeout", "deprecated: use handshake_timeout",
      OFFSET(handshake_timeout), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_HANDSHAKE_TIMEOUT_DEFAULT }, 1000, INT64_MAX, D | AV_OPT_FLAG_DEPRECATED },
    { "name", FF_CUFRAMES_HELP_NAME,
      OFFSET(name), AV_OPT_TYPE_STRING, { .str = "ffmpeg cuframes_pkt" }, 0, 0, D },
    { "runtime_dir", FF_CUFRAMES_HELP_RUNTIME_DIR,
      OFFSET(runtime_dir), AV_OPT_TYPE_STRING, { .str = NULL }, 0, 0, D },
    { "timebase", "time base of the stream (ring timestamps are nanoseconds: 1/1000000000 is lossless)",
      OFFSET(time_base), AV_OPT_TYPE_RATIONAL, { .dbl = 1.0 / 90000 }, 1e-9, 1, D },
    { "reconnect", "keep reading across a publisher restart: wait (up to wait_publisher) for the new publisher, resume at its keyframe (discontinuity), timestamps kept increasing",
      OFFSET(reconnect), AV_OPT_TYPE_BOOL, { .i64 = 0 }, 0, 1, D },
    { "publisher_uid", "accept only a publisher running as this uid, on every connection (-1: any; later connections, reconnect or a new ring, must still be to the uid the first saw)",
      OFFSET(publisher_uid), AV_OPT_TYPE_INT64, { .i64 = -1 }, -1, UINT32_MAX, D },
    { "spin", "before sleeping for a packet, poll this long (lower latency, a busy CPU meanwhile; 0: sleep at once)",
      OFFSET(spin_us), AV_OPT_TYPE_DURATION, { .i64 = 0 }, 0, UINT32_MAX, D },
    { "max_packet_ring_size", "largest packet data ring to map, in bytes (e.g. 1Gi): a larger one is refused; 0 = 256 MiB",
      OFFSET(max_packet_ring_size), AV_OPT_TYPE_INT64, { .i64 = 0 }, 0, UINT32_MAX, D },
    { "max_packet_size", "largest packet to read, in bytes (e.g. 128Mi): a larger one is skipped, the stream resuming at the next keyframe (a discontinuity); 0 = 64 MiB",
      OFFSET(max_packet_size), AV_OPT_TYPE_INT64, { .i64 = 0 }, 0, UINT32_MAX, D },
    { NULL },
};

static const AVClass cuframes_pkt_demuxer_class = {
    .class_name = "cuframes_pkt demuxer",
    .item_name  = av_default_item_name,
    .option     = options,
    .version    = LIBAVUTIL_VERSION_INT,
    .category   = AV_CLASS_CATEGORY_DEMUXER,
};

const FFInputFormat ff_cuframes_pkt_demuxer = {
    .p.name         = "cuframes_pkt",
    .p.long_name    = NULL_IF_CONFIG_SMALL("cuframes packet ring (shared memory, H.264/HEVC/AV1)"),
    .p.flags        = AVFMT_NOFILE | AVFMT_TS_DISCONT | AVFMT_NOBINSEARCH | AVFMT_NOGENSEARCH |
                      AVFMT_NO_BYTE_SEEK,
    .p.priv_class   = &cuframes_pkt_demuxer_class,
    .priv_data_size = sizeof(CuframesPktDemuxContext),
    .flags_internal = FF_INFMT_FLAG_INIT_CLEANUP,
    .read_header    = cuframes_pkt_read_header,
    .read_packet    = cuframes_pkt_read_packet,
    .read_close     = cuframes_pkt_read_close,
};
