/*
 * What every cuframes component needs from the library in FFmpeg's terms: error codes,
 * pixel formats and colour descriptions. Header-only; the components include it as "libavutil/cuframes_glue.h".
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

#ifndef AVUTIL_CUFRAMES_GLUE_H
#define AVUTIL_CUFRAMES_GLUE_H

#include <errno.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#include <cuframes.h>

#include "libavutil/error.h"
#include "libavutil/frame.h"
#include "libavutil/pixdesc.h"
#include "libavutil/log.h"
#include "libavutil/pixfmt.h"

/** The AVERROR for a cuframes_error_t code. */
static inline int ff_cuframes_averror(int code)
{
    switch (code) {
    case CUFRAMES_OK:                 return 0;
    case CUFRAMES_ERR_INVALID_ARG:
    case CUFRAMES_ERR_FORMAT:         return AVERROR(EINVAL);
    case CUFRAMES_ERR_PROTOCOL:       return AVERROR_INVALIDDATA;
    case CUFRAMES_ERR_NOT_FOUND:      return AVERROR(ENOENT);
    case CUFRAMES_ERR_ALREADY_EXISTS: return AVERROR(EEXIST);
    case CUFRAMES_ERR_TIMEOUT:        return AVERROR(ETIMEDOUT);
    case CUFRAMES_ERR_DISCONNECTED:   return AVERROR_EOF;
    case CUFRAMES_ERR_PERMISSION:     return AVERROR(EACCES);
    case CUFRAMES_ERR_NO_MEMORY:      return AVERROR(ENOMEM);
    case CUFRAMES_ERR_TOO_MANY:       return AVERROR(EUSERS);
    default:                          return AVERROR_EXTERNAL;
    }
}

/**
 * Log what failed with the library's message, and return the AVERROR. The message (its code
 * name, then what exactly went wrong) is the one wording of the error, the same as the C API
 * and the cuframes tool show; nothing is appended to it. cuframes_strerror() only stands in
 * when a failing call left no message.
 */
static inline int ff_cuframes_log_error(void *log_ctx, int code, const char *what)
{
    const char *msg = cuframes_last_error();
    av_log(log_ctx, AV_LOG_ERROR, "%s: %s\n", what, msg && *msg ? msg : cuframes_strerror(code));
    return ff_cuframes_averror(code);
}

/*
 * One option vocabulary for the four components (docs/ffmpeg.md, "Options common to the
 * components"): the same name has the same meaning, type (AV_OPT_TYPE_DURATION for every
 * time) and help text wherever it appears, so `-h filter=`/`-h demuxer=`/... read alike.
 */
#define FF_CUFRAMES_HELP_WAIT_PUBLISHER \
    "how long to wait for a missing publisher (and its ring) to appear; 0 = fail at once"
#define FF_CUFRAMES_HELP_HANDSHAKE_TIMEOUT \
    "how long the handshake with the publisher may take"
#define FF_CUFRAMES_HELP_READ_TIMEOUT \
    "fail when nothing arrives for this long; 0 = wait forever"
#define FF_CUFRAMES_HELP_WAIT_SUBSCRIBERS \
    "before writing the first frame or packet, wait until this many subscribers are connected and ready (frames: slots mapped)"
#define FF_CUFRAMES_HELP_RUNTIME_DIR \
    "directory of the publisher's socket (default: $CUFRAMES_RUNTIME_DIR, else /run/cuframes)"
#define FF_CUFRAMES_HELP_NAME \
    "subscriber name shown to operators (printable ASCII, at most 31 bytes)"

/* Defaults shared by both inputs: a missing publisher is an error at once (the same in
 * -f cuframes and -f cuframes_pkt), the handshake may take 5 s, reads wait forever. */
#define FF_CUFRAMES_WAIT_PUBLISHER_DEFAULT    0
#define FF_CUFRAMES_HANDSHAKE_TIMEOUT_DEFAULT 5000000
#define FF_CUFRAMES_READ_TIMEOUT_DEFAULT      0

/** A duration option (microseconds) as the library's u32 milliseconds, at least 1 ms. */
static inline uint32_t ff_cuframes_duration_ms(int64_t us)
{
    int64_t ms = us / 1000;
    return ms < 1 ? 1 : ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

/* The ring formats (R7) and the FFmpeg pixel formats with the same memory layout. */
#define FF_CUFRAMES_FORMATS(X)                  \
    X(AV_PIX_FMT_NV12,    CUFRAMES_FORMAT_NV12)    \
    X(AV_PIX_FMT_P010LE,  CUFRAMES_FORMAT_P010)    \
    X(AV_PIX_FMT_P016LE,  CUFRAMES_FORMAT_P016)    \
    X(AV_PIX_FMT_YUV420P, CUFRAMES_FORMAT_YUV420P) \
    X(AV_PIX_FMT_YUV444P, CUFRAMES_FORMAT_YUV444P) \
    X(AV_PIX_FMT_RGBA,    CUFRAMES_FORMAT_RGBA)    \
    X(AV_PIX_FMT_BGRA,    CUFRAMES_FORMAT_BGRA)

static inline cuframes_format_t ff_cuframes_format_from_pix_fmt(enum AVPixelFormat f)
{
#define FF_CUFRAMES_TO_RING(pix, ring) if (f == pix) return ring;
    FF_CUFRAMES_FORMATS(FF_CUFRAMES_TO_RING)
#undef FF_CUFRAMES_TO_RING
    return CUFRAMES_FORMAT_NONE;
}

static inline enum AVPixelFormat ff_cuframes_pix_fmt_from_format(uint32_t f)
{
#define FF_CUFRAMES_TO_PIX(pix, ring) if (f == ring) return pix;
    FF_CUFRAMES_FORMATS(FF_CUFRAMES_TO_PIX)
#undef FF_CUFRAMES_TO_PIX
    return AV_PIX_FMT_NONE;
}

/* The colour description of a frame as the ring announces it (cuframes_colour_t: H.273 code
 * points, FFmpeg's range and chroma-location numbering, docs/protocol.md). */
static inline void ff_cuframes_colour_from_frame(const AVFrame *f, AVRational sar,
                                                 cuframes_colour_t *c)
{
    memset(c, 0, sizeof(*c));
    c->present         = 1;
    if (f->sample_aspect_ratio.num) /* the frame's own, else its link's */
        sar = f->sample_aspect_ratio;
    c->sar_num         = sar.num > 0 && sar.den > 0 ? (uint32_t)sar.num : 0;
    c->sar_den         = sar.num > 0 && sar.den > 0 ? (uint32_t)sar.den : 1;
    c->range           = (uint8_t)f->color_range;
    c->primaries       = (uint8_t)f->color_primaries;
    c->transfer        = (uint8_t)f->color_trc;
    c->matrix          = (uint8_t)f->colorspace;
    c->chroma_location = (uint8_t)f->chroma_location;
}

/* The announced values FFmpeg knows; anything else (a newer or broken peer) is unspecified. */
static inline enum AVColorRange ff_cuframes_range(const cuframes_colour_t *c)
{
    return av_color_range_name(c->range) ? (enum AVColorRange)c->range : AVCOL_RANGE_UNSPECIFIED;
}
static inline enum AVColorPrimaries ff_cuframes_primaries(const cuframes_colour_t *c)
{
    return av_color_primaries_name(c->primaries) ? (enum AVColorPrimaries)c->primaries
                                                 : AVCOL_PRI_UNSPECIFIED;
}
static inline enum AVColorTransferCharacteristic ff_cuframes_transfer(const cuframes_colour_t *c)
{
    return av_color_transfer_name(c->transfer) ? (enum AVColorTransferCharacteristic)c->transfer
                                               : AVCOL_TRC_UNSPECIFIED;
}
static inline enum AVColorSpace ff_cuframes_matrix(const cuframes_colour_t *c)
{
    return av_color_space_name(c->matrix) ? (enum AVColorSpace)c->matrix : AVCOL_SPC_UNSPECIFIED;
}
static inline enum AVChromaLocation ff_cuframes_chroma_location(const cuframes_colour_t *c)
{
    return av_chroma_location_name(c->chroma_location) ? (enum AVChromaLocation)c->chroma_location
                                                       : AVCHROMA_LOC_UNSPECIFIED;
}
static inline AVRational ff_cuframes_sar(const cuframes_colour_t *c)
{
    return c->sar_num && c->sar_den && c->sar_num <= INT_MAX && c->sar_den <= INT_MAX
               ? (AVRational){ (int)c->sar_num, (int)c->sar_den }
               : (AVRational){ 0, 1 };
}

/* Tag a frame with the announced description (nothing when none was announced). */
static inline void ff_cuframes_colour_to_frame(const cuframes_colour_t *c, AVFrame *f)
{
    if (!c->present)
        return;
    f->sample_aspect_ratio = ff_cuframes_sar(c);
    f->color_range         = ff_cuframes_range(c);
    f->color_primaries     = ff_cuframes_primaries(c);
    f->color_trc           = ff_cuframes_transfer(c);
    f->colorspace          = ff_cuframes_matrix(c);
    f->chroma_location     = ff_cuframes_chroma_location(c);
}

#endif /* AVUTIL_CUFRAMES_GLUE_H */
