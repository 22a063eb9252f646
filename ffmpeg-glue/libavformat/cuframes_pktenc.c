/*
 * cuframes_pkt muxer: publish encoded H.264/HEVC/AV1 packets into a cuframes packet ring
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
 * The output "file name" is the cuframes key (`-f cuframes_pkt cam1`). All the work is in
 * libcuframes: the publisher (shared with hwupload_cuframes of the same process, R6), the
 * packet ring (protocol v4 §10) and the conversion of avcC/hvcC/av1C extradata to the
 * ring's Annex B / OBU form (cuframes_codec_*). This file only forwards.
 */

#include <stdlib.h>

#include "libavutil/dict.h"
#include "libavutil/intreadwrite.h"
#include "libavutil/opt.h"
#include "libavutil/time.h"
#include "avformat.h"
#include "mux.h"
#include "url.h"
#include "cuframes_pkt.h"

typedef struct CuframesPktMuxContext {
    const AVClass *class;
    char *runtime_dir;
    char *file_mode;
    int ring_slots;
    int data_size;
    int wait_subscribers;
    int64_t wait_timeout;
    int64_t gap;
    int max_subscribers_per_uid;
    int max_subscribers_per_pid;

    cuframes_publisher_t *pub;
    uint32_t codec_id;
    int have_extradata;
    int64_t last_ts_ns;
    uint64_t seq;
    uint64_t discard_published, disposable_published;
} CuframesPktMuxContext;

static void cuframes_pkt_deinit(AVFormatContext *s)
{
    CuframesPktMuxContext *c = s->priv_data;

    if (c->discard_published || c->disposable_published)
        av_log(s, AV_LOG_INFO, "'%s': published %"PRIu64" packets flagged DISCARD and %"PRIu64
               " flagged DISPOSABLE as ordinary packets (the ring has no bits for them)\n",
               s->url, c->discard_published, c->disposable_published);
    cuframes_publisher_destroy(c->pub);
    c->pub = NULL;
}

static int cuframes_pkt_fail(AVFormatContext *s, int rc, const char *what)
{
    av_log(s, AV_LOG_ERROR, "%s '%s': %s\n", what, s->url, cuframes_last_error());
    return ff_cuframes_averror(rc);
}

static int cuframes_pkt_wait_subscribers(AVFormatContext *s)
{
    CuframesPktMuxContext *c = s->priv_data;
    int64_t deadline = av_gettime_relative() + c->wait_timeout;
    int n;

    while ((n = cuframes_publisher_packet_subscriber_count(c->pub)) < c->wait_subscribers) {
        if (n < 0)
            return cuframes_pkt_fail(s, n, "cannot count the subscribers of");
        if (ff_check_interrupt(&s->interrupt_callback))
            return AVERROR_EXIT;
        if (av_gettime_relative() >= deadline) {
            av_log(s, AV_LOG_ERROR, "only %d of %d subscribers connected to '%s' within %.3f s\n",
                   n, c->wait_subscribers, s->url, c->wait_timeout / 1e6);
            return AVERROR(ETIMEDOUT);
        }
        av_usleep(10000);
    }
    if (c->wait_subscribers)
        av_log(s, AV_LOG_VERBOSE, "%d subscribers connected to '%s'\n", n, s->url);
    return 0;
}

static int cuframes_pkt_init(AVFormatContext *s)
{
    CuframesPktMuxContext *c = s->priv_data;
    AVCodecParameters *par;
    cuframes_publisher_options_t po;
    cuframes_packet_ring_config_t rc_cfg;
    uint8_t extradata[CUFRAMES_MAX_EXTRADATA_SIZE];
    size_t extradata_size = 0;
    char *end;
    int rc;

    if (s->nb_streams != 1 || s->streams[0]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) {
        av_log(s, AV_LOG_ERROR, "cuframes_pkt carries exactly one video stream (got %u streams); "
               "select it with -map 0:v:0\n", s->nb_streams);
        return AVERROR(EINVAL);
    }
    par = s->streams[0]->codecpar;
    c->codec_id = ff_cuframes_pkt_ring_codec(par->codec_id);
    if (!c->codec_id) {
        av_log(s, AV_LOG_ERROR, "cuframes_pkt carries H.264, HEVC or AV1, not %s\n",
               avcodec_get_name(par->codec_id));
        return AVERROR(EINVAL);
    }
    c->last_ts_ns = CUFRAMES_NO_PTS;

    /* avcC/hvcC/av1C (MP4, Matroska) or Annex B/OBUs -> the ring's form (R30). */
    if (par->extradata_size > 0) {
        rc = cuframes_codec_ring_extradata(c->codec_id, par->extradata, par->extradata_size,
                                           extradata, sizeof(extradata), &extradata_size);
        if (rc != CUFRAMES_OK)
            return cuframes_pkt_fail(s, rc, "unusable codec extradata for");
    }

    cuframes_publisher_options_default(&po);
    po.runtime_dir = c->runtime_dir;
    po.max_subscribers_per_uid = c->max_subscribers_per_uid;
    po.max_subscribers_per_pid = c->max_subscribers_per_pid;
    po.file_mode   = c->file_mode ? strtoul(c->file_mode, &end, 8) : 0;
    if (!c->file_mode || !*c->file_mode || *end || po.file_mode > 0777) {
        av_log(s, AV_LOG_ERROR, "file_mode '%s' is not an octal mode such as 0660\n", c->file_mode);
        return AVERROR(EINVAL);
    }
    rc = cuframes_publisher_open_shared(s->url, &po, &c->pub);
    if (rc != CUFRAMES_OK)
        return cuframes_pkt_fail(s, rc, "cannot publish");

    cuframes_packet_ring_config_default(&rc_cfg);
    rc_cfg.codec_id = c->codec_id;
    if (c->ring_slots)
        rc_cfg.ring_slots = c->ring_slots;
    if (c->data_size)
        rc_cfg.data_size = c->data_size;
    rc_cfg.extradata      = extradata;
    rc_cfg.extradata_size = extradata_size;
    rc = cuframes_publisher_enable_packets(c->pub, &rc_cfg);
    if (rc != CUFRAMES_OK)
        return cuframes_pkt_fail(s, rc, "cannot create the packet ring of");
    c->have_extradata = extradata_size > 0;
    av_log(s, AV_LOG_VERBOSE, "publishing %s packets as '%s' (%u slots, %u bytes, extradata %zu bytes%s)\n",
           avcodec_get_name(par->codec_id), s->url, rc_cfg.ring_slots, rc_cfg.data_size,
           extradata_size, extradata_size ? "" : ": taken from the first keyframe");

    return cuframes_pkt_wait_subscribers(s);
}

static int64_t cuframes_pkt_ts_ns(int64_t ts, AVRational tb)
{
    if (ts == AV_NOPTS_VALUE)
        return CUFRAMES_NO_PTS;
    return av_rescale_q_rnd(ts, tb, CUFRAMES_PKT_NS_TB, AV_ROUND_NEAR_INF | AV_ROUND_PASS_MINMAX);
}

static int cuframes_pkt_write_packet(AVFormatContext *s, AVPacket *pkt)
{
    CuframesPktMuxContext *c = s->priv_data;
    AVStream *st = s->streams[0];
    int64_t pts_ns = cuframes_pkt_ts_ns(pkt->pts, st->time_base);
    int64_t dts_ns = cuframes_pkt_ts_ns(pkt->dts, st->time_base);
    uint32_t flags = 0;
    const uint8_t *sd;
    size_t sd_size;
    int rc;

    if (!c->have_extradata) {
        uint8_t ps[CUFRAMES_MAX_EXTRADATA_SIZE];
        size_t ps_size = 0;

        if (!(pkt->flags & AV_PKT_FLAG_KEY)) {
            av_log(s, AV_LOG_VERBOSE, "dropping a packet before the first keyframe: "
                   "the ring's extradata comes from that keyframe\n");
            return 0;
        }
        rc = cuframes_codec_keyframe_extradata(c->codec_id, pkt->data, pkt->size,
                                               ps, sizeof(ps), &ps_size);
        if (rc != CUFRAMES_OK)
            return cuframes_pkt_fail(s, rc, "cannot read the parameter sets of the first keyframe for");
        if (ps_size) {
            rc = cuframes_publisher_set_packet_extradata(c->pub, ps, ps_size);
            if (rc != CUFRAMES_OK)
                return cuframes_pkt_fail(s, rc, "cannot set the extradata of");
        } else {
            av_log(s, AV_LOG_WARNING, "neither the stream header nor the first keyframe carries "
                   "parameter sets; subscribers of '%s' get no extradata\n", s->url);
        }
        c->have_extradata = 1;
    }

    if (pkt->flags & AV_PKT_FLAG_KEY)
        flags |= CUFRAMES_PACKET_FLAG_KEY;
    if (pkt->flags & AV_PKT_FLAG_CORRUPT)
        flags |= CUFRAMES_PACKET_FLAG_CORRUPT;
    /* DISCARD (decode, do not show: an MP4 edit list's preroll) and DISPOSABLE (no other
     * frame refers to it) have no ring bit (§10.5). Both are published as ordinary packets,
     * deliberately: a DISCARD packet is often the keyframe the next ones are predicted from,
     * so dropping it would break every subscriber's decoding; DISPOSABLE is only a hint.
     * Subscribers therefore show the preroll frames; the counts are logged. */
    if ((pkt->flags & AV_PKT_FLAG_DISCARD) && !c->discard_published++)
        av_log(s, AV_LOG_WARNING, "'%s': packets flagged DISCARD (e.g. an edit list's "
               "preroll) are published as ordinary packets: the ring has no bit for it, so "
               "subscribers show these frames\n", s->url);
    if (pkt->flags & AV_PKT_FLAG_DISPOSABLE)
        c->disposable_published++;
    /* Ring flags with no AVPacket equivalent, from an upstream cuframes_pkt demuxer (R15). */
    sd = av_packet_get_side_data(pkt, AV_PKT_DATA_STRINGS_METADATA, &sd_size);
    if (sd) {
        AVDictionary *dict = NULL;
        const AVDictionaryEntry *e;

        if (av_packet_unpack_dictionary(sd, sd_size, &dict) >= 0 &&
            (e = av_dict_get(dict, CUFRAMES_PKT_FLAGS_KEY, NULL, 0)))
            flags |= strtoul(e->value, NULL, 0) &
                     (CUFRAMES_PACKET_FLAG_DISCONTINUITY | CUFRAMES_PACKET_FLAG_LAST_IN_AU);
        av_dict_free(&dict);
    }
    /* A dts gap (or a jump back) before this packet (§10.5). */
    if (dts_ns != CUFRAMES_NO_PTS && c->last_ts_ns != CUFRAMES_NO_PTS && c->gap > 0 &&
        (dts_ns < c->last_ts_ns || dts_ns - c->last_ts_ns > c->gap * 1000)) {
        av_log(s, AV_LOG_VERBOSE, "dts step of %.3f s: flagging DISCONTINUITY\n",
               (dts_ns - c->last_ts_ns) / 1e9);
        flags |= CUFRAMES_PACKET_FLAG_DISCONTINUITY;
    }
    if (dts_ns != CUFRAMES_NO_PTS)
        c->last_ts_ns = dts_ns;

    rc = cuframes_publisher_publish_packet(c->pub, pkt->data, pkt->size, pts_ns, dts_ns,
                                           flags, &c->seq);
    if (rc != CUFRAMES_OK)
        return cuframes_pkt_fail(s, rc, "cannot publish a packet to");
    return 0;
}

static int cuframes_pkt_check_bitstream(AVFormatContext *s, AVStream *st, const AVPacket *pkt)
{
    /* The ring carries Annex B (R30): length-prefixed MP4/Matroska input is converted. */
    if (pkt->size >= 5 && AV_RB32(pkt->data) != 0x0000001 && AV_RB24(pkt->data) != 0x000001) {
        if (st->codecpar->codec_id == AV_CODEC_ID_H264)
            return ff_stream_add_bitstream_filter(st, "h264_mp4toannexb", NULL);
        if (st->codecpar->codec_id == AV_CODEC_ID_HEVC)
            return ff_stream_add_bitstream_filter(st, "hevc_mp4toannexb", NULL);
    }
    return 1;
}

#define OFFSET(x) offsetof(CuframesPktMuxContext, x)
#define E AV_OPT_FLAG_ENCODING_PARAM
static const AVOption options[] = {
    { "runtime_dir", FF_CUFRAMES_HELP_RUNTIME_DIR,
      OFFSET(runtime_dir), AV_OPT_TYPE_STRING, { .str = NULL }, 0, 0, E },
    { "file_mode", "permissions of the socket and shared memory, octal",
      OFFSET(file_mode), AV_OPT_TYPE_STRING, { .str = "0660" }, 0, 0, E },
    { "max_subscribers_per_uid", "subscriber slots (of 31) the processes of one uid may hold; the publisher's own uid and root are not counted; 31 = no cap",
      OFFSET(max_subscribers_per_uid), AV_OPT_TYPE_INT, { .i64 = 8 }, 0, CUFRAMES_MAX_SUBSCRIBERS, E },
    { "max_subscribers_per_pid", "subscriber slots (of 31) one process may hold (a process in another PID namespace is counted by its uid only); 31 = no cap",
      OFFSET(max_subscribers_per_pid), AV_OPT_TYPE_INT, { .i64 = 4 }, 0, CUFRAMES_MAX_SUBSCRIBERS, E },
    { "ring_slots", "packet slots in the ring (1..1024); 0 = library default (64)",
      OFFSET(ring_slots), AV_OPT_TYPE_INT, { .i64 = 0 }, 0, CUFRAMES_MAX_PACKET_RING_SLOTS, E },
    { "data_size", "bytes of the ring's data area, the largest packet that fits; 0 = library default (8 MiB)",
      OFFSET(data_size), AV_OPT_TYPE_INT, { .i64 = 0 }, 0, INT_MAX, E },
    { "wait_subscribers", FF_CUFRAMES_HELP_WAIT_SUBSCRIBERS " (the wait holds the whole command: docs/ffmpeg.md)",
      OFFSET(wait_subscribers), AV_OPT_TYPE_INT, { .i64 = 0 }, 0, CUFRAMES_MAX_SUBSCRIBERS, E },
    { "wait_timeout", "how long to wait for wait_subscribers, then fail",
      OFFSET(wait_timeout), AV_OPT_TYPE_DURATION, { .i64 = 10000000 }, 0, INT64_MAX, E },
    /* cuframes 0.4 names (same types). */
    { "min_subscribers", "deprecated: use wait_subscribers",
      OFFSET(wait_subscribers), AV_OPT_TYPE_INT, { .i64 = 0 }, 0, CUFRAMES_MAX_SUBSCRIBERS, E | AV_OPT_FLAG_DEPRECATED },
    { "subscriber_wait", "deprecated: use wait_timeout",
      OFFSET(wait_timeout), AV_OPT_TYPE_DURATION, { .i64 = 10000000 }, 0, INT64_MAX, E | AV_OPT_FLAG_DEPRECATED },
    { "discont_gap", "a dts step larger than this (or backwards) flags the packet DISCONTINUITY; 0 = never",
      OFFSET(gap), AV_OPT_TYPE_DURATION, { .i64 = 1000000 }, 0, INT64_MAX / 1000, E },
    { NULL },
};

static const AVClass cuframes_pkt_muxer_class = {
    .class_name = "cuframes_pkt muxer",
    .item_name  = av_default_item_name,
    .option     = options,
    .version    = LIBAVUTIL_VERSION_INT,
    .category   = AV_CLASS_CATEGORY_MUXER,
};

const FFOutputFormat ff_cuframes_pkt_muxer = {
    .p.name            = "cuframes_pkt",
    .p.long_name       = NULL_IF_CONFIG_SMALL("cuframes packet ring (shared memory, H.264/HEVC/AV1)"),
    .priv_data_size    = sizeof(CuframesPktMuxContext),
    .p.audio_codec     = AV_CODEC_ID_NONE,
    .p.video_codec     = AV_CODEC_ID_H264,
    .p.subtitle_codec  = AV_CODEC_ID_NONE,
    .flags_internal    = FF_OFMT_FLAG_MAX_ONE_OF_EACH,
    .init              = cuframes_pkt_init,
    .write_packet      = cuframes_pkt_write_packet,
    .deinit            = cuframes_pkt_deinit,
    .check_bitstream   = cuframes_pkt_check_bitstream,
    .p.flags           = AVFMT_NOFILE | AVFMT_TS_NEGATIVE | AVFMT_TS_NONSTRICT,
    .p.priv_class      = &cuframes_pkt_muxer_class,
};
