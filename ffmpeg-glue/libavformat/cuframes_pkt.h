/*
 * cuframes_pkt muxer/demuxer: helpers shared by cuframes_pktenc.c and cuframes_pktdec.c
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

#ifndef AVFORMAT_CUFRAMES_PKT_H
#define AVFORMAT_CUFRAMES_PKT_H

#include <cuframes.h>

#include "libavutil/cuframes_glue.h"

#include "libavcodec/codec_id.h"
#include "libavutil/error.h"

/* Ring timestamps are nanoseconds (R25). */
#define CUFRAMES_PKT_NS_TB ((AVRational){ 1, 1000000000 })

/* Packet side data key (AV_PKT_DATA_STRINGS_METADATA) that carries the ring flags with no
 * AVPacket equivalent: DISCONTINUITY and LAST_IN_AU (R15). Value: "0x%x" of all ring flags. */
#define CUFRAMES_PKT_FLAGS_KEY "cuframes_flags"

/* The ring's codec_id is a wire value (cuframes.h CUFRAMES_CODEC_ID_*: 27, 173, 226, the
 * AV_CODEC_ID_* numbers of the FFmpeg the protocol was written against). FFmpeg's own enum
 * has moved since (9.0: HEVC 172, AV1 222), so map explicitly; 0 = not carried. */
static inline uint32_t ff_cuframes_pkt_ring_codec(enum AVCodecID id)
{
    switch (id) {
    case AV_CODEC_ID_H264: return CUFRAMES_CODEC_ID_H264;
    case AV_CODEC_ID_HEVC: return CUFRAMES_CODEC_ID_HEVC;
    case AV_CODEC_ID_AV1:  return CUFRAMES_CODEC_ID_AV1;
    default:               return 0;
    }
}

static inline enum AVCodecID ff_cuframes_pkt_av_codec(uint32_t ring_codec)
{
    switch (ring_codec) {
    case CUFRAMES_CODEC_ID_H264: return AV_CODEC_ID_H264;
    case CUFRAMES_CODEC_ID_HEVC: return AV_CODEC_ID_HEVC;
    case CUFRAMES_CODEC_ID_AV1:  return AV_CODEC_ID_AV1;
    default:                     return AV_CODEC_ID_NONE;
    }
}


#endif /* AVFORMAT_CUFRAMES_PKT_H */
