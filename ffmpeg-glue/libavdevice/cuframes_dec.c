/*
 * cuframes input device: read the frames a cuframes publisher shares (-f cuframes -i KEY).
 *
 * This file is part of FFmpeg (cuframes glue).
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

/**
 * @file
 * Frames come out as AV_CODEC_ID_WRAPPED_AVFRAME packets (like kmsgrab): AV_PIX_FMT_CUDA
 * frames with a hardware frames context whose sw_format is the ring's format, or software
 * frames (output=software, and host rings by default).
 *
 * Zero copy (R12): where the policy allows it (STRICT_WAIT, or accept_overwrite), a frame's
 * data pointers are the ring slot itself; the buffer's free callback releases the frame with
 * the CUDA stream of the device context, so the slot is ACKed only after the GPU work queued
 * there by the last reader has run. Otherwise the subscriber copies each frame (COPY) and the
 * AVFrame wraps that copy.
 *
 * Probing: avformat_find_stream_info keeps the packets it reads until the caller asks for
 * them, maybe much later. The device sets all stream parameters in read_header, turns the
 * frame-rate analysis off (fpsprobesize 0 unless the user set it), so probing reads one
 * frame, and hands out the first frame as a copy, so no ring slot is held by the probe.
 */

#include <cuframes.h>
#include "libavutil/cuframes_glue.h"

#include "libavutil/avstring.h"
#include "libavutil/buffer.h"
#include "libavutil/hwcontext.h"
#include "libavutil/hwcontext_cuda_internal.h"
#include "libavutil/imgutils.h"
#include "libavutil/internal.h"
#include "libavutil/mathematics.h"
#include "libavutil/mem.h"
#include "libavutil/opt.h"
#include "libavutil/pixdesc.h"
#include "libavutil/time.h"

#include "libavformat/avformat.h"
#include "libavformat/demux.h"
#include "libavformat/internal.h"
#include "libavformat/url.h"

#define CUFRAMES_CU_STREAM_LEGACY ((void *)0x1)

enum { MODE_AUTO = -1 }; /* else CUFRAMES_MODE_COPY / CUFRAMES_MODE_ZERO_COPY */
enum { OUTPUT_AUTO = -1, OUTPUT_CUDA = 0, OUTPUT_SOFTWARE = 1 };

typedef struct CuframesDemuxContext {
    const AVClass *class;

    /* options */
    int mode;
    int accept_overwrite;
    int output;
    int device;
    AVRational framerate;
    int64_t wait_publisher;
    int64_t handshake_timeout;
    int64_t read_timeout;
    int deprecated_timeout_ms; /* -2: not set */
    char *name;
    int64_t spin_us;
    char *runtime_dir;
    int reconnect;
    int64_t publisher_uid;
    int64_t wait_publisher_exit;

    /* state */
    cuframes_subscriber_t *sub;
    cuframes_cuda_context_t *warm; /* CUDA made ready while waiting for the publisher */
    int ended;                     /* the publisher ended the stream */
    cuframes_frame_layout_t layout;
    cuframes_colour_t colour;      /* as the publisher announced it (present = 0: none) */
    enum AVPixelFormat sw_format;
    int memory_kind;
    int zero_copy;
    int out_cuda;
    AVBufferRef *device_ref;
    AVBufferRef *frames_ref;
    AVRational time_base;
    uint64_t frames_out, copies;
    uint64_t host_copies_at_start;
} CuframesDemuxContext;

/* What the free callback of a frame's buffer needs: the cuframes frame, and the CUDA device
 * (kept alive by the reference) whose stream the last reader used. */
typedef struct HeldFrame {
    cuframes_frame_t *frame;
    AVBufferRef *device_ref;
} HeldFrame;

static void release_held(void *opaque, uint8_t *data)
{
    HeldFrame *h = opaque;

    if (h->device_ref) {
        AVHWDeviceContext *dc = (AVHWDeviceContext *)h->device_ref->data;
        AVCUDADeviceContext *hw = dc->hwctx;
        CudaFunctions *cu = hw->internal->cuda_dl;
        CUcontext dummy;
        int pushed = cu->cuCtxPushCurrent(hw->cuda_ctx) == CUDA_SUCCESS;
        /* R12: the ACK (or, for a COPY frame, the buffer's reuse) follows the work the
         * readers queued on the device's stream. */
        cuframes_frame_release(h->frame, pushed ? (hw->stream ? (void *)hw->stream
                                                               : CUFRAMES_CU_STREAM_LEGACY)
                                                : NULL);
        if (pushed)
            cu->cuCtxPopCurrent(&dummy);
        av_buffer_unref(&h->device_ref);
    } else {
        cuframes_frame_release(h->frame, NULL);
    }
    av_free(h);
}

static void free_wrapped_frame(void *opaque, uint8_t *data)
{
    AVFrame *frame = (AVFrame *)data;
    av_frame_free(&frame);
}

static av_cold int cuframes_read_close(AVFormatContext *avctx)
{
    CuframesDemuxContext *s = avctx->priv_data;

    if (s->sub) {
        cuframes_frame_stats_t st = { 0 };
        cuframes_subscriber_stats(s->sub, &st);
        av_log(avctx, AV_LOG_INFO, "key %s: %"PRIu64" frames out (%s, %"PRIu64" copied); "
               "delivered %"PRIu64", dropped %"PRIu64" overwritten + %"PRIu64" torn; "
               "cuframes host copies: %"PRIu64"\n", avctx->url, s->frames_out,
               s->zero_copy ? "zero copy" : "copy", s->copies, st.delivered,
               st.dropped_overrun, st.dropped_torn,
               cuframes_host_copy_count() - s->host_copies_at_start);
        /* After the publisher's end, our GPU state goes after its process: the driver
         * serialises the two teardowns, and the publisher's (its decoder, its ring) would
         * otherwise wait for every reader's. */
        if (s->ended && s->wait_publisher_exit > 0)
            cuframes_subscriber_wait_publisher_exit(s->sub, (uint32_t)av_clip64(
                s->wait_publisher_exit / 1000, 1, UINT32_MAX));
        cuframes_subscriber_destroy(s->sub);
        s->sub = NULL;
    }
    cuframes_cuda_context_release(s->warm);
    s->warm = NULL;
    av_buffer_unref(&s->frames_ref);
    av_buffer_unref(&s->device_ref);
    return 0;
}

static int connect_subscriber(AVFormatContext *avctx)
{
    CuframesDemuxContext *s = avctx->priv_data;
    cuframes_subscriber_options_t o;
    int64_t deadline = av_gettime_relative() + s->wait_publisher;
    int ret;

    cuframes_subscriber_options_default(&o);
    o.runtime_dir = s->runtime_dir;
    o.name = s->name;
    o.cuda_device = s->device;
    o.mode = s->mode == CUFRAMES_MODE_COPY ? CUFRAMES_MODE_COPY : CUFRAMES_MODE_ZERO_COPY;
    o.flags = CUFRAMES_SUBSCRIBE_WANTS_FRAMES;
    o.accept_zero_copy_overwrite = s->accept_overwrite;
    o.spin_us = (uint32_t)s->spin_us;
    o.connect_timeout_ms = ff_cuframes_duration_ms(s->handshake_timeout);
    /* A restarted publisher is waited for as long as a missing one at the start. */
    if (s->reconnect)
        o.reconnect_ms = (uint32_t)av_clip64(FFMAX(s->wait_publisher / 1000, 1), 1, UINT32_MAX);
    o.publisher_uid = s->publisher_uid;

    for (;;) {
        ret = cuframes_subscriber_connect(avctx->url, &o, &s->sub);
        if (ret == CUFRAMES_OK) {
            /* Connected: a CUDA ring's import holds the context now. For a host ring the
             * warm-up's reference stays until the end: dropping it would destroy the
             * context on the reading thread, before the first frame. */
            if (cuframes_subscriber_memory_kind(s->sub) == (int)CUFRAMES_MEMORY_CUDA_VMM) {
                cuframes_cuda_context_release(s->warm);
                s->warm = NULL;
            }
            return 0;
        }
        /* Wait for a publisher that is not there (yet), or whose frame ring is not set up
         * yet; any other error is final. */
        if (ret != CUFRAMES_ERR_NOT_FOUND && ret != CUFRAMES_ERR_DISCONNECTED &&
            ret != CUFRAMES_ERR_IO && ret != CUFRAMES_ERR_TIMEOUT)
            break;
        if (av_gettime_relative() >= deadline)
            break;
        if (ff_check_interrupt(&avctx->interrupt_callback))
            return AVERROR_EXIT;
        /* While waiting, CUDA gets ready (once): a publisher that waits for its subscribers
         * then waits for our import only, not for the driver's set-up. */
        if (!s->warm && s->output != OUTPUT_SOFTWARE)
            cuframes_subscriber_warm_up(&o, &s->warm);
        av_usleep(5000);
    }
    return ff_cuframes_log_error(avctx, ret, "Cannot subscribe");
}

static int setup_cuda_frames(AVFormatContext *avctx);

static void free_cuda_device(AVHWDeviceContext *dc)
{
    cuframes_cuda_context_release(dc->user_opaque);
}

/* The output frames' CUDA device context is built on the device's primary context, the one
 * cuframes imports the ring into and makes its copies in, so that every frame this device
 * hands out (ring slots, cuframes' copies, pool frames) lives in one context. */
static int setup_cuda(AVFormatContext *avctx)
{
    CuframesDemuxContext *s = avctx->priv_data;
    cuframes_cuda_context_t *ref = NULL;
    AVHWDeviceContext *dc;
    void *cu_ctx = NULL;
    int ret;

    ret = cuframes_cuda_primary_context(s->device, &cu_ctx, &ref);
    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(avctx, ret, "Cannot open the CUDA device for the output frames");
    s->device_ref = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
    if (!s->device_ref) {
        cuframes_cuda_context_release(ref);
        return AVERROR(ENOMEM);
    }
    dc = (AVHWDeviceContext *)s->device_ref->data;
    dc->user_opaque = ref;
    dc->free = free_cuda_device;
    ((AVCUDADeviceContext *)dc->hwctx)->cuda_ctx = cu_ctx;
    ret = av_hwdevice_ctx_init(s->device_ref);
    if (ret < 0) {
        av_log(avctx, AV_LOG_ERROR, "Cannot create the CUDA device context.\n");
        return ret;
    }
    return setup_cuda_frames(avctx);
}

/* The output frames context for the ring's current geometry (again after a new ring). */
static int setup_cuda_frames(AVFormatContext *avctx)
{
    CuframesDemuxContext *s = avctx->priv_data;
    AVHWFramesContext *fc;
    int ret;

    av_buffer_unref(&s->frames_ref);
    s->frames_ref = av_hwframe_ctx_alloc(s->device_ref);
    if (!s->frames_ref)
        return AVERROR(ENOMEM);
    fc = (AVHWFramesContext *)s->frames_ref->data;
    fc->format    = AV_PIX_FMT_CUDA;
    fc->sw_format = s->sw_format;
    fc->width     = s->layout.width;
    fc->height    = s->layout.height;
    ret = av_hwframe_ctx_init(s->frames_ref);
    if (ret < 0)
        av_log(avctx, AV_LOG_ERROR, "Cannot create the CUDA frames context.\n");
    return ret;
}

/* -timeout, the millisecond read timeout of cuframes 0.4, still accepted: it sets the
 * duration that replaced it. */
static void apply_deprecated_options(AVFormatContext *avctx)
{
    CuframesDemuxContext *s = avctx->priv_data;

    if (s->deprecated_timeout_ms != -2) {
        av_log(avctx, AV_LOG_WARNING, "-timeout (ms) is deprecated: use -read_timeout\n");
        /* -1 means forever (read_timeout 0); 0 fails at the first empty poll. */
        s->read_timeout = s->deprecated_timeout_ms < 0 ? 0 :
                          FFMAX((int64_t)s->deprecated_timeout_ms * 1000, 1);
    }
}

static av_cold int cuframes_read_header(AVFormatContext *avctx)
{
    CuframesDemuxContext *s = avctx->priv_data;
    AVStream *st;
    int ret;

    apply_deprecated_options(avctx);
    s->host_copies_at_start = cuframes_host_copy_count();
    ret = connect_subscriber(avctx);
    if (ret < 0)
        return ret;
    ret = cuframes_subscriber_frame_layout(s->sub, &s->layout);
    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(avctx, ret, "The publisher has no frame ring");
    s->sw_format = ff_cuframes_pix_fmt_from_format(s->layout.format);
    if (s->sw_format == AV_PIX_FMT_NONE) {
        av_log(avctx, AV_LOG_ERROR, "The ring carries unknown format %u.\n", s->layout.format);
        return AVERROR(EINVAL);
    }
    if (cuframes_subscriber_colour(s->sub, &s->colour) != CUFRAMES_OK)
        memset(&s->colour, 0, sizeof(s->colour));
    s->memory_kind = cuframes_subscriber_memory_kind(s->sub);
    /* device=-1: the publisher's GPU, found by its UUID (containers and CUDA_VISIBLE_DEVICES
     * renumber devices); an explicit device was checked against that UUID at connect. */
    if (cuframes_subscriber_cuda_device(s->sub) >= 0)
        s->device = cuframes_subscriber_cuda_device(s->sub);
    else if (s->device < 0)
        s->device = 0;
    s->zero_copy   = cuframes_subscriber_is_zero_copy(s->sub);
    if (s->output == OUTPUT_AUTO)
        s->out_cuda = s->memory_kind == CUFRAMES_MEMORY_CUDA_VMM;
    else
        s->out_cuda = s->output == OUTPUT_CUDA;
    if (s->mode == CUFRAMES_MODE_ZERO_COPY && !s->zero_copy)
        av_log(avctx, AV_LOG_WARNING, "ZERO_COPY is not possible under DROP_OLDEST without "
               "accept_overwrite=1 (the publisher can overwrite a frame while it is held); "
               "frames are copied.\n");
    if (s->out_cuda || s->memory_kind == CUFRAMES_MEMORY_CUDA_VMM) {
        /* CUDA output, or a CUDA ring downloaded for software output. */
        ret = setup_cuda(avctx);
        if (ret < 0)
            return ret;
    }

    st = avformat_new_stream(avctx, NULL);
    if (!st)
        return AVERROR(ENOMEM);
    st->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
    st->codecpar->codec_id   = AV_CODEC_ID_WRAPPED_AVFRAME;
    st->codecpar->width      = s->layout.width;
    st->codecpar->height     = s->layout.height;
    st->codecpar->format     = s->out_cuda ? AV_PIX_FMT_CUDA : s->sw_format;
    if (s->colour.present) {
        st->codecpar->sample_aspect_ratio = st->sample_aspect_ratio = ff_cuframes_sar(&s->colour);
        st->codecpar->color_range         = ff_cuframes_range(&s->colour);
        st->codecpar->color_primaries     = ff_cuframes_primaries(&s->colour);
        st->codecpar->color_trc           = ff_cuframes_transfer(&s->colour);
        st->codecpar->color_space         = ff_cuframes_matrix(&s->colour);
        st->codecpar->chroma_location     = ff_cuframes_chroma_location(&s->colour);
    }
    if (s->framerate.num > 0 && s->framerate.den > 0) {
        s->time_base = av_inv_q(s->framerate);
        st->avg_frame_rate = st->r_frame_rate = s->framerate;
    } else {
        s->time_base = (AVRational){ 1, 1000000000 }; /* pts_ns as they are (R25) */
    }
    avpriv_set_pts_info(st, 64, s->time_base.num, s->time_base.den);
    /* Probing must not sit on ring slots: with every parameter known, one frame suffices. */
    if (avctx->fps_probe_size < 0)
        avctx->fps_probe_size = 0;

    av_log(avctx, AV_LOG_INFO, "Subscribed to %s: %ux%u %s in %s memory, %s, %s output.\n",
           avctx->url, s->layout.width, s->layout.height, av_get_pix_fmt_name(s->sw_format),
           s->memory_kind == CUFRAMES_MEMORY_CUDA_VMM ? "CUDA VMM" : "host",
           s->zero_copy ? "zero copy" : "copy", s->out_cuda ? "CUDA" : "software");
    return 0;
}

/* An AVFrame whose planes are the cuframes frame's (the ring slot, or the subscriber's copy);
 * freeing its buffer releases the cuframes frame. */
static AVFrame *wrap_frame(AVFormatContext *avctx, cuframes_frame_t *f,
                           const cuframes_frame_info_t *info)
{
    CuframesDemuxContext *s = avctx->priv_data;
    int cuda = info->memory_kind == CUFRAMES_MEMORY_CUDA_VMM;
    AVFrame *out = av_frame_alloc();
    HeldFrame *h = av_mallocz(sizeof(*h));

    if (!out || !h)
        goto fail;
    h->frame = f;
    if (cuda) {
        h->device_ref = av_buffer_ref(s->device_ref);
        if (!h->device_ref)
            goto fail;
    }
    /* Ring memory must never be written through a frame: read-only buffer. */
    out->buf[0] = av_buffer_create((uint8_t *)h, sizeof(*h), release_held, h,
                                   AV_BUFFER_FLAG_READONLY);
    if (!out->buf[0])
        goto fail;
    for (unsigned i = 0; i < info->plane_count && i < 3; i++) {
        out->data[i]     = (uint8_t *)(uintptr_t)info->data[i];
        out->linesize[i] = info->pitch[i];
    }
    out->width  = s->layout.width;
    out->height = s->layout.height;
    if (cuda) {
        out->format = AV_PIX_FMT_CUDA;
        out->hw_frames_ctx = av_buffer_ref(s->frames_ref);
        if (!out->hw_frames_ctx) {
            av_frame_free(&out);
            return NULL;
        }
    } else {
        out->format = s->sw_format;
    }
    return out;
fail:
    if (h && h->device_ref)
        av_buffer_unref(&h->device_ref);
    av_free(h);
    av_frame_free(&out);
    cuframes_frame_release(f, NULL);
    return NULL;
}

/* A frame of the output kind (CUDA or software) holding a copy of `src`. */
static int copy_frame(AVFormatContext *avctx, AVFrame **dst, const AVFrame *src)
{
    CuframesDemuxContext *s = avctx->priv_data;
    AVFrame *out = av_frame_alloc();
    int ret;

    if (!out)
        return AVERROR(ENOMEM);
    if (s->out_cuda) {
        ret = av_hwframe_get_buffer(s->frames_ref, out, 0);
        if (ret >= 0)
            ret = av_hwframe_transfer_data(out, src, 0); /* on the device's stream */
    } else {
        out->format = s->sw_format;
        out->width  = src->width;
        out->height = src->height;
        ret = av_frame_get_buffer(out, 0);
        if (ret >= 0)
            ret = src->hw_frames_ctx ? av_hwframe_transfer_data(out, src, 0)
                                     : av_frame_copy(out, src);
    }
    if (ret < 0) {
        av_log(avctx, AV_LOG_ERROR, "Cannot copy the frame: %s\n", av_err2str(ret));
        av_frame_free(&out);
        return ret;
    }
    *dst = out;
    s->copies++;
    return 0;
}

/* The ring moved between host and CUDA memory (a replaced ring, a restarted publisher). The
 * output keeps its kind: the frames of a CUDA ring are downloaded for software output and
 * a host ring's uploaded for CUDA output, on a CUDA device set up when first needed. */
static int follow_memory(AVFormatContext *avctx, const cuframes_frame_t *f, int memory_kind)
{
    CuframesDemuxContext *s = avctx->priv_data;
    int device, ret;

    if (memory_kind != s->memory_kind)
        av_log(avctx, AV_LOG_INFO, "%s: the publisher's ring moved to %s memory.\n", avctx->url,
               memory_kind == CUFRAMES_MEMORY_CUDA_VMM ? "CUDA" : "host");
    s->memory_kind = memory_kind;
    if (memory_kind != CUFRAMES_MEMORY_CUDA_VMM)
        return 0;
    device = cuframes_frame_cuda_device(f);
    if (device < 0)
        return ff_cuframes_log_error(avctx, device, "Cannot inspect the frame");
    if (s->device_ref && device != s->device) {
        av_log(avctx, AV_LOG_ERROR, "%s: the publisher's ring moved from CUDA device %d to %d; "
               "one input reads one GPU.\n", avctx->url, s->device, device);
        return AVERROR(ENOSYS);
    }
    if (s->device_ref)
        return 0;
    s->device = device;
    ret = setup_cuda(avctx);
    if (ret < 0) {
        av_buffer_unref(&s->frames_ref);
        av_buffer_unref(&s->device_ref);
    }
    return ret;
}

/* The publisher replaced its ring (a size or format change, docs/ffmpeg.md): frames of the
 * new ring have another layout. The output frames follow it (FFmpeg reconfigures the filters
 * when the frame size changes); CUDA output gets a frames context of the new geometry. */
static int follow_layout(AVFormatContext *avctx, const cuframes_frame_t *f)
{
    CuframesDemuxContext *s = avctx->priv_data;
    cuframes_frame_layout_t l;
    enum AVPixelFormat fmt;
    int ret = cuframes_frame_layout(f, &l);

    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(avctx, ret, "Cannot inspect the frame");
    if (l.format == s->layout.format && l.width == s->layout.width && l.height == s->layout.height)
        return 0;
    fmt = ff_cuframes_pix_fmt_from_format(l.format);
    if (fmt == AV_PIX_FMT_NONE) {
        av_log(avctx, AV_LOG_ERROR, "The new ring carries unknown format %u.\n", l.format);
        return AVERROR(EINVAL);
    }
    av_log(avctx, AV_LOG_INFO, "%s: the publisher's ring changed from %ux%u %s to %ux%u %s.\n",
           avctx->url, s->layout.width, s->layout.height, av_get_pix_fmt_name(s->sw_format),
           l.width, l.height, av_get_pix_fmt_name(fmt));
    s->layout    = l;
    s->sw_format = fmt;
    if (cuframes_frame_colour(f, &s->colour) != CUFRAMES_OK)
        memset(&s->colour, 0, sizeof(s->colour));
    if (s->frames_ref)
        return setup_cuda_frames(avctx);
    return 0;
}

static int cuframes_read_packet(AVFormatContext *avctx, AVPacket *pkt)
{
    CuframesDemuxContext *s = avctx->priv_data;
    int64_t deadline = s->read_timeout > 0 ? av_gettime_relative() + s->read_timeout : INT64_MAX;
    cuframes_frame_t *f = NULL;
    cuframes_frame_info_t info;
    AVFrame *frame;
    int ret, is_cuda;

    for (;;) {
        ret = cuframes_subscriber_next_frame(s->sub, 100, &f);
        if (ret == CUFRAMES_OK)
            break;
        if (ret == CUFRAMES_ERR_DISCONNECTED) {
            av_log(avctx, AV_LOG_VERBOSE, "End of stream: %s\n", cuframes_last_error());
            s->ended = 1;
            return AVERROR_EOF;
        }
        if (ret != CUFRAMES_ERR_TIMEOUT)
            return ff_cuframes_log_error(avctx, ret, "Cannot read a frame");
        if (ff_check_interrupt(&avctx->interrupt_callback))
            return AVERROR_EXIT;
        if (av_gettime_relative() >= deadline) {
            av_log(avctx, AV_LOG_ERROR, "No frame from %s within %.3f s.\n", avctx->url,
                   s->read_timeout / 1e6);
            return AVERROR(ETIMEDOUT);
        }
    }
    ret = cuframes_frame_info(f, &info);
    if (ret != CUFRAMES_OK) {
        cuframes_frame_release(f, NULL);
        return ff_cuframes_log_error(avctx, ret, "Cannot inspect the frame");
    }
    ret = follow_layout(avctx, f);
    if (ret >= 0)
        ret = follow_memory(avctx, f, info.memory_kind);
    if (ret < 0) {
        cuframes_frame_release(f, NULL);
        return ret;
    }
    frame = wrap_frame(avctx, f, &info);
    if (!frame)
        return AVERROR(ENOMEM);
    is_cuda = info.memory_kind == CUFRAMES_MEMORY_CUDA_VMM;

    /* Copy when the output kind differs from the ring's memory, and for the first zero-copy
     * frame (the one probing may keep indefinitely). Freeing the wrapper releases the slot
     * after the copy (R12: the copy runs on the stream the release follows). */
    if (is_cuda != s->out_cuda || (info.zero_copy && s->frames_out == 0)) {
        AVFrame *copy;
        ret = copy_frame(avctx, &copy, frame);
        av_frame_free(&frame);
        if (ret < 0)
            return ret;
        frame = copy;
    }

    ff_cuframes_colour_to_frame(&s->colour, frame);
    frame->pts = av_rescale_q(info.pts_ns, (AVRational){ 1, 1000000000 }, s->time_base);
    frame->pkt_dts = frame->pts;
    frame->time_base = s->time_base;

    pkt->buf = av_buffer_create((uint8_t *)frame, sizeof(*frame), free_wrapped_frame, NULL, 0);
    if (!pkt->buf) {
        av_frame_free(&frame);
        return AVERROR(ENOMEM);
    }
    pkt->data  = (uint8_t *)frame;
    pkt->size  = sizeof(*frame);
    pkt->pts   = pkt->dts = frame->pts;
    pkt->flags |= AV_PKT_FLAG_KEY | AV_PKT_FLAG_TRUSTED;
    pkt->stream_index = 0;
    s->frames_out++;
    return 0;
}

#define OFFSET(x) offsetof(CuframesDemuxContext, x)
#define FLAGS AV_OPT_FLAG_DECODING_PARAM
static const AVOption options[] = {
    { "mode", "how frames are received",
      OFFSET(mode), AV_OPT_TYPE_INT, { .i64 = MODE_AUTO }, -1, 1, FLAGS, .unit = "mode" },
        { "auto", "zero copy where the publisher's policy allows it (strict_wait), copy otherwise",
          0, AV_OPT_TYPE_CONST, { .i64 = MODE_AUTO }, 0, 0, FLAGS, .unit = "mode" },
        { "zero_copy", "frames are the ring's slots, ACKed once released and the GPU work queued on them is done; warns and copies under drop_oldest unless accept_overwrite",
          0, AV_OPT_TYPE_CONST, { .i64 = CUFRAMES_MODE_ZERO_COPY }, 0, 0, FLAGS, .unit = "mode" },
        { "copy", "copy every frame out of the ring at once",
          0, AV_OPT_TYPE_CONST, { .i64 = CUFRAMES_MODE_COPY }, 0, 0, FLAGS, .unit = "mode" },
    { "accept_overwrite", "allow zero copy under drop_oldest although the publisher can overwrite a frame while it is held",
      OFFSET(accept_overwrite), AV_OPT_TYPE_BOOL, { .i64 = 0 }, 0, 1, FLAGS },
    { "output", "kind of the output frames",
      OFFSET(output), AV_OPT_TYPE_INT, { .i64 = OUTPUT_AUTO }, -1, 1, FLAGS, .unit = "output" },
        { "auto", "CUDA frames from a CUDA ring, software frames from a host ring",
          0, AV_OPT_TYPE_CONST, { .i64 = OUTPUT_AUTO }, 0, 0, FLAGS, .unit = "output" },
        { "cuda", "AV_PIX_FMT_CUDA frames (a host ring is uploaded)",
          0, AV_OPT_TYPE_CONST, { .i64 = OUTPUT_CUDA }, 0, 0, FLAGS, .unit = "output" },
        { "software", "software frames in the ring's pixel format (a CUDA ring is downloaded)",
          0, AV_OPT_TYPE_CONST, { .i64 = OUTPUT_SOFTWARE }, 0, 0, FLAGS, .unit = "output" },
    { "device", "CUDA device of this process to import the ring on and output frames from; -1: the publisher's GPU, found by its UUID (an explicit device must be that GPU)",
      OFFSET(device), AV_OPT_TYPE_INT, { .i64 = -1 }, -1, INT_MAX, FLAGS },
    { "framerate", "nominal frame rate; when set, timestamps are in 1/framerate units (else nanoseconds)",
      OFFSET(framerate), AV_OPT_TYPE_RATIONAL, { .dbl = 0 }, 0, 1000000, FLAGS },
    { "wait_publisher", FF_CUFRAMES_HELP_WAIT_PUBLISHER,
      OFFSET(wait_publisher), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_WAIT_PUBLISHER_DEFAULT }, 0, INT64_MAX, FLAGS },
    { "handshake_timeout", FF_CUFRAMES_HELP_HANDSHAKE_TIMEOUT,
      OFFSET(handshake_timeout), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_HANDSHAKE_TIMEOUT_DEFAULT }, 1000, INT64_MAX, FLAGS },
    { "read_timeout", FF_CUFRAMES_HELP_READ_TIMEOUT,
      OFFSET(read_timeout), AV_OPT_TYPE_DURATION, { .i64 = FF_CUFRAMES_READ_TIMEOUT_DEFAULT }, 0, INT64_MAX, FLAGS },
    { "timeout", "deprecated: milliseconds, -1 forever; use read_timeout",
      OFFSET(deprecated_timeout_ms), AV_OPT_TYPE_INT, { .i64 = -2 }, -2, INT_MAX, FLAGS | AV_OPT_FLAG_DEPRECATED },
    { "name", FF_CUFRAMES_HELP_NAME,
      OFFSET(name), AV_OPT_TYPE_STRING, { .str = "ffmpeg" }, 0, 0, FLAGS },
    { "runtime_dir", FF_CUFRAMES_HELP_RUNTIME_DIR,
      OFFSET(runtime_dir), AV_OPT_TYPE_STRING, { .str = NULL }, 0, 0, FLAGS },
    { "spin", "before sleeping for a frame, poll this long (lower latency, a busy CPU meanwhile; 0: sleep at once)",
      OFFSET(spin_us), AV_OPT_TYPE_DURATION, { .i64 = 0 }, 0, UINT32_MAX, FLAGS },
    { "reconnect", "keep reading across a publisher restart: wait (up to wait_publisher) for the new publisher; timestamps kept increasing",
      OFFSET(reconnect), AV_OPT_TYPE_BOOL, { .i64 = 0 }, 0, 1, FLAGS },
    { "publisher_uid", "accept only a publisher running as this uid, on every connection (-1: any; later connections, reconnect or a new ring, must still be to the uid the first saw)",
      OFFSET(publisher_uid), AV_OPT_TYPE_INT64, { .i64 = -1 }, -1, UINT32_MAX, FLAGS },
    { "wait_publisher_exit", "after the publisher ended the stream, wait up to this long for its process to exit before releasing the GPU state (the driver would make the publisher's teardown wait for ours; 0: release at once)",
      OFFSET(wait_publisher_exit), AV_OPT_TYPE_DURATION, { .i64 = 1000000 }, 0, 60000000, FLAGS },
    { NULL },
};

static const AVClass cuframes_demuxer_class = {
    .class_name = "cuframes indev",
    .item_name  = av_default_item_name,
    .option     = options,
    .version    = LIBAVUTIL_VERSION_INT,
    .category   = AV_CLASS_CATEGORY_DEVICE_VIDEO_INPUT,
};

const FFInputFormat ff_cuframes_demuxer = {
    .p.name         = "cuframes",
    .p.long_name    = NULL_IF_CONFIG_SMALL("cuframes shared frame ring (GPU or host memory)"),
    .p.flags        = AVFMT_NOFILE,
    .p.priv_class   = &cuframes_demuxer_class,
    .priv_data_size = sizeof(CuframesDemuxContext),
    /* read_header fails after connecting in several ways (no frame ring, unknown format, no
     * CUDA device for the output): read_close then destroys the subscriber, so the
     * publisher does not keep counting a reader that is gone (an API user's process lives
     * on after avformat_open_input fails). */
    .flags_internal = FF_INFMT_FLAG_INIT_CLEANUP,
    .read_header    = cuframes_read_header,
    .read_packet    = cuframes_read_packet,
    .read_close     = cuframes_read_close,
};
