/*
 * hwupload_cuframes: publish every frame into a cuframes ring and pass it on unchanged.
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
 * The filter publishes each input frame into the frame ring of a cuframes publisher (key
 * `key`), then passes the frame on untouched. Software frames are copied (uploaded for a CUDA
 * ring); AV_PIX_FMT_CUDA frames are copied device to device on the frames' CUDA stream, with
 * the frames' context pushed, and published by a host function queued behind the copy (so no
 * subscriber can see a frame before its data is complete, and the filter never waits for the
 * GPU).
 *
 * The publisher is created on the first frame, when the size and format are known, with
 * cuframes_publisher_open_shared (R6: a cuframes_pkt muxer of the same command shares it).
 * A frame of another size or format makes a new ring generation
 * (cuframes_publisher_replace_frames): subscribers drain the old ring and follow the new one
 * (see docs/ffmpeg.md).
 */

#include <cuframes.h>
#include "libavutil/cuframes_glue.h"

#include "libavutil/avstring.h"
#include "libavutil/buffer.h"
#include "libavutil/hwcontext.h"
#include "libavutil/hwcontext_cuda_internal.h"
#include "libavutil/log.h"
#include "libavutil/mathematics.h"
#include "libavutil/opt.h"
#include "libavutil/pixdesc.h"
#include "libavutil/time.h"

#include "avfilter.h"
#include "filters.h"
#include "formats.h"
#include "video.h"
#include "version.h"

/* The legacy default stream of the current context (CU_STREAM_LEGACY in cuda.h). FFmpeg's
 * hwcontext uses it when AVCUDADeviceContext.stream is NULL; cuframes treats a NULL stream
 * as "no caller stream", so the legacy stream is named explicitly. */
#define CUFRAMES_CU_STREAM_LEGACY ((void *)0x1)

enum { MEMORY_AUTO = -1 }; /* otherwise CUFRAMES_MEMORY_CUDA_VMM / CUFRAMES_MEMORY_HOST_MEMFD */

typedef struct CuframesUploadContext {
    const AVClass *class;

    /* options */
    char *key;
    char *runtime_dir;
    int ring_size;
    int policy;
    int64_t ack_timeout;
    int memory;
    int device;
    int wait_subscribers;
    int allow_legacy;
    int max_subscribers_per_uid;
    int max_subscribers_per_pid;
    int64_t wait_timeout;

    /* state */
    cuframes_publisher_t *pub;
    int ring_memory;                /* CUFRAMES_MEMORY_* of the ring once created */
    int ring_device;                /* its CUDA device ordinal */
    uint64_t generations;           /* rings replaced after a size or format change */
    enum AVPixelFormat ring_pix_fmt; /* software format of the ring */
    int ring_w, ring_h;
    uint64_t published, device_copies, host_uploads, downloads;
    uint64_t host_copies_at_start;
} CuframesUploadContext;

static const char *memory_name(int m)
{
    return m == CUFRAMES_MEMORY_CUDA_VMM ? "CUDA VMM" : "host memfd";
}

static av_cold int cuframes_upload_init(AVFilterContext *ctx)
{
    CuframesUploadContext *s = ctx->priv;

    if (!s->key || !*s->key) {
        av_log(ctx, AV_LOG_ERROR, "The key option is required (e.g. hwupload_cuframes=key=cam1).\n");
        return AVERROR(EINVAL);
    }
    /* Durations: a value of 1000 s or more is most likely milliseconds as cuframes 0.4 took
     * them (ack_timeout=10000 means 10000 s), so it is warned about. */
    if (s->ack_timeout >= 1000 * INT64_C(1000000) || s->wait_timeout >= 1000 * INT64_C(1000000))
        av_log(ctx, AV_LOG_WARNING, "ack_timeout/wait_timeout are durations (10, 10s, "
               "10000ms), not milliseconds: %.0f s / %.0f s is meant?\n",
               s->ack_timeout / 1e6, s->wait_timeout / 1e6);
    s->ring_pix_fmt = AV_PIX_FMT_NONE;
    s->host_copies_at_start = cuframes_host_copy_count();
    return 0;
}

/* Where the frames waited: a pipeline slower with subscribers than without shows which wait
 * it was (their ACKs under strict_wait, or the GPU work before queued publications). */
static void log_waits(AVFilterContext *ctx)
{
    CuframesUploadContext *s = ctx->priv;
    cuframes_publisher_wait_stats_t w;

    if (cuframes_publisher_wait_stats(s->pub, &w) != CUFRAMES_OK)
        return;
    av_log(ctx, AV_LOG_VERBOSE, "key %s: waited for subscribers' ACKs %"PRIu64" times "
           "(%.1f ms), for queued publications %"PRIu64" times (%.1f ms); %"PRIu64" publications "
           "on the stream, %.1f us each on average, %.1f us at most\n", s->key,
           w.ack_waits, w.ack_wait_ns / 1e6, w.publication_waits, w.publication_wait_ns / 1e6,
           w.stream_publications,
           w.stream_publications ? w.stream_publication_ns / 1e3 / w.stream_publications : 0.0,
           w.stream_publication_max_ns / 1e3);
}

static av_cold void cuframes_upload_uninit(AVFilterContext *ctx)
{
    CuframesUploadContext *s = ctx->priv;

    if (s->pub) {
        av_log(ctx, AV_LOG_INFO, "key %s: published %"PRIu64" frames into the %s ring "
               "(%"PRIu64" device copies, %"PRIu64" host uploads, %"PRIu64" downloads, "
               "%"PRIu64" new ring generations); cuframes host copies: %"PRIu64"\n", s->key,
               s->published, memory_name(s->ring_memory), s->device_copies, s->host_uploads,
               s->downloads, s->generations,
               cuframes_host_copy_count() - s->host_copies_at_start);
        log_waits(ctx);
        cuframes_publisher_destroy(s->pub);
        s->pub = NULL;
    }
}

static int cuframes_upload_query_formats(const AVFilterContext *ctx,
                                         AVFilterFormatsConfig **cfg_in,
                                         AVFilterFormatsConfig **cfg_out)
{
    /* int, not enum AVPixelFormat: the list type that FFmpeg 7.1 to 9.0 all take. */
    static const int pix_fmts[] = {
        AV_PIX_FMT_NV12, AV_PIX_FMT_P010LE, AV_PIX_FMT_P016LE, AV_PIX_FMT_YUV420P,
        AV_PIX_FMT_YUV444P, AV_PIX_FMT_RGBA, AV_PIX_FMT_BGRA, AV_PIX_FMT_CUDA,
        AV_PIX_FMT_NONE,
    };
    return ff_set_common_formats_from_list2(ctx, cfg_in, cfg_out, pix_fmts);
}

static int cuframes_upload_config_output(AVFilterLink *outlink)
{
    AVFilterContext *ctx = outlink->src;
    AVFilterLink *inlink = ctx->inputs[0];
    FilterLink *inl  = ff_filter_link(inlink);
    FilterLink *outl = ff_filter_link(outlink);

    if (inlink->format == AV_PIX_FMT_CUDA) {
        AVHWFramesContext *fc;
        if (!inl->hw_frames_ctx) {
            av_log(ctx, AV_LOG_ERROR, "CUDA input without a hardware frames context.\n");
            return AVERROR(EINVAL);
        }
        fc = (AVHWFramesContext *)inl->hw_frames_ctx->data;
        if (ff_cuframes_format_from_pix_fmt(fc->sw_format) == CUFRAMES_FORMAT_NONE) {
            av_log(ctx, AV_LOG_ERROR, "CUDA frames of software format %s cannot be published: "
                   "a cuframes ring carries nv12, p010le, p016le, yuv420p, yuv444p, rgba or bgra.\n",
                   av_get_pix_fmt_name(fc->sw_format));
            return AVERROR(EINVAL);
        }
        av_buffer_unref(&outl->hw_frames_ctx);
        outl->hw_frames_ctx = av_buffer_ref(inl->hw_frames_ctx);
        if (!outl->hw_frames_ctx)
            return AVERROR(ENOMEM);
    }
    outlink->w = inlink->w;
    outlink->h = inlink->h;
    outlink->sample_aspect_ratio = inlink->sample_aspect_ratio;
    outlink->time_base = inlink->time_base;
    outl->frame_rate = inl->frame_rate;
    return 0;
}

/* The CUDA device ordinal of a hardware frame's context (the ring goes on the same device). */
static int frame_cuda_ordinal(AVFilterContext *ctx, const AVFrame *frame, int *ordinal)
{
    AVHWFramesContext *fc = (AVHWFramesContext *)frame->hw_frames_ctx->data;
    AVCUDADeviceContext *hw = fc->device_ctx->hwctx;
    CudaFunctions *cu = hw->internal->cuda_dl;
    CUcontext dummy;
    CUdevice dev;
    int ret;

    if (cu->cuCtxPushCurrent(hw->cuda_ctx) != CUDA_SUCCESS)
        return AVERROR_EXTERNAL;
    ret = cu->cuCtxGetDevice(&dev) == CUDA_SUCCESS ? 0 : AVERROR_EXTERNAL;
    cu->cuCtxPopCurrent(&dummy);
    if (ret < 0)
        av_log(ctx, AV_LOG_ERROR, "Cannot tell the CUDA device of the input frames.\n");
    *ordinal = dev;
    return ret;
}

/* The ring configuration for frames like `frame` (software format `sw`). */
static void ring_config(AVFilterContext *ctx, const AVFrame *frame, enum AVPixelFormat sw,
                        int memory, int ordinal, cuframes_frame_ring_config_t *rc)
{
    CuframesUploadContext *s = ctx->priv;

    cuframes_frame_ring_config_default(rc);
    rc->format         = ff_cuframes_format_from_pix_fmt(sw);
    rc->width          = frame->width;
    rc->height         = frame->height;
    rc->ring_size      = s->ring_size;
    rc->policy         = s->policy;
    rc->ack_timeout_ms = ff_cuframes_duration_ms(s->ack_timeout);
    rc->memory_kind    = memory;
    rc->cuda_device    = ordinal;
    /* Subscribers tag their frames with it (FFmpeg: the input device; Python: to_rgb). */
    ff_cuframes_colour_from_frame(frame, ctx->inputs[0]->sample_aspect_ratio, &rc->colour);
}

/* The input changed size or format (a camera switching resolution): a new ring generation
 * replaces the old one; subscribers drain the old ring and follow (docs/ffmpeg.md). */
static int replace_ring(AVFilterContext *ctx, const AVFrame *frame, enum AVPixelFormat sw,
                        enum AVPixelFormat old_fmt, int old_w, int old_h)
{
    CuframesUploadContext *s = ctx->priv;
    cuframes_frame_ring_config_t rc;
    int ret;

    ring_config(ctx, frame, sw, s->ring_memory, s->ring_device, &rc);
    ret = cuframes_publisher_replace_frames(s->pub, &rc);
    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(ctx, ret, "Cannot replace the frame ring");
    av_log(ctx, AV_LOG_INFO, "key %s: the input changed from %dx%d %s to %dx%d %s; "
           "published a new ring generation.\n", s->key, old_w, old_h,
           av_get_pix_fmt_name(old_fmt), frame->width, frame->height, av_get_pix_fmt_name(sw));
    s->ring_pix_fmt = sw;
    s->ring_w       = frame->width;
    s->ring_h       = frame->height;
    s->generations++;
    return 0;
}

static int create_publisher(AVFilterContext *ctx, const AVFrame *frame, enum AVPixelFormat sw)
{
    CuframesUploadContext *s = ctx->priv;
    cuframes_publisher_options_t po;
    cuframes_frame_ring_config_t rc;
    cuframes_frame_layout_t layout;
    int ret, memory = s->memory, ordinal = s->device;
    char where[64];

    cuframes_publisher_options_default(&po);
    po.allow_legacy_subscribers = s->allow_legacy;
    po.max_subscribers_per_uid  = s->max_subscribers_per_uid;
    po.max_subscribers_per_pid  = s->max_subscribers_per_pid;
    po.runtime_dir = s->runtime_dir;
    ret = cuframes_publisher_open_shared(s->key, &po, &s->pub);
    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(ctx, ret, "Cannot create the publisher");

    if (frame->format == AV_PIX_FMT_CUDA && ordinal < 0) {
        ret = frame_cuda_ordinal(ctx, frame, &ordinal);
        if (ret < 0)
            return ret;
    }
    if (ordinal < 0)
        ordinal = 0;
    if (memory == MEMORY_AUTO) {
        if (frame->format == AV_PIX_FMT_CUDA || cuframes_cuda_device_count() > ordinal)
            memory = CUFRAMES_MEMORY_CUDA_VMM;
        else
            memory = CUFRAMES_MEMORY_HOST_MEMFD;
    }

    s->ring_memory = memory;
    s->ring_device = ordinal;
    /* R6: a component of this process (a previous instance of this filter kept alive by the
     * cuframes_pkt muxer's handle) may already have given the key a frame ring. */
    if (cuframes_publisher_frame_layout(s->pub, &layout) == CUFRAMES_OK) {
        enum AVPixelFormat f = ff_cuframes_pix_fmt_from_format(layout.format);
        if (f != sw || layout.width != frame->width || layout.height != frame->height) {
            ret = replace_ring(ctx, frame, sw, f, layout.width, layout.height);
            if (ret < 0)
                return ret;
        } else {
            av_log(ctx, AV_LOG_VERBOSE, "Reusing the frame ring of key %s (%dx%d %s).\n",
                   s->key, frame->width, frame->height, av_get_pix_fmt_name(sw));
        }
    } else {
        ring_config(ctx, frame, sw, memory, ordinal, &rc);
        ret = cuframes_publisher_enable_frames(s->pub, &rc);
        if (ret != CUFRAMES_OK)
            return ff_cuframes_log_error(ctx, ret, "Cannot create the frame ring");
        if (memory == CUFRAMES_MEMORY_CUDA_VMM)
            snprintf(where, sizeof(where), "CUDA VMM memory on device %d", ordinal);
        else
            snprintf(where, sizeof(where), "host memfd memory");
        av_log(ctx, AV_LOG_INFO, "Publishing key %s: %dx%d %s, %d slots in %s, %s.\n",
               s->key, frame->width, frame->height, av_get_pix_fmt_name(sw), s->ring_size,
               where, s->policy == CUFRAMES_POLICY_STRICT_WAIT ? "STRICT_WAIT" : "DROP_OLDEST");
    }
    s->ring_memory  = memory;
    s->ring_pix_fmt = sw;
    s->ring_w       = frame->width;
    s->ring_h       = frame->height;

    if (s->wait_subscribers > 0) {
        int64_t deadline = av_gettime_relative() + s->wait_timeout;
        int n = 0;
        /* Ready ones: a reader still importing the slots (a new process takes ~0.1 s, one
         * after another) would hold up the first frames under strict_wait, and its imports
         * would slow the first frames' GPU work under either policy. */
        while ((n = cuframes_publisher_ready_frame_subscriber_count(s->pub)) < s->wait_subscribers &&
               av_gettime_relative() < deadline)
            av_usleep(5000);
        if (n < s->wait_subscribers)
            av_log(ctx, AV_LOG_WARNING, "Only %d of %d subscribers ready within %.3f s; "
                   "publishing anyway.\n", n, s->wait_subscribers, s->wait_timeout / 1e6);
        else
            av_log(ctx, AV_LOG_VERBOSE, "%d subscribers ready.\n", n);
    }
    return 0;
}

static int publish_cuda_frame(AVFilterContext *ctx, const AVFrame *frame, int64_t pts_ns)
{
    CuframesUploadContext *s = ctx->priv;
    AVHWFramesContext *fc = (AVHWFramesContext *)frame->hw_frames_ctx->data;
    AVCUDADeviceContext *hw = fc->device_ctx->hwctx;
    CudaFunctions *cu = hw->internal->cuda_dl;
    uint64_t planes[3] = { 0 };
    size_t pitches[3] = { 0 };
    int n = av_pix_fmt_count_planes(fc->sw_format), ret;
    CUcontext dummy;

    for (int i = 0; i < n && i < 3; i++) {
        planes[i]  = (uint64_t)(uintptr_t)frame->data[i];
        pitches[i] = frame->linesize[i];
    }
    if (cu->cuCtxPushCurrent(hw->cuda_ctx) != CUDA_SUCCESS) {
        av_log(ctx, AV_LOG_ERROR, "cuCtxPushCurrent failed.\n");
        return AVERROR_EXTERNAL;
    }
    /* The copy and then the publication are queued on the frames' stream, after the
     * producer's work; neither is waited for here: the frame becomes visible when the stream
     * reaches it, and this thread goes on to the next frame. The decoder's pool reuses the
     * source surface only through work queued later on the same stream. */
    ret = cuframes_publisher_publish_device_async(s->pub, planes, pitches, n,
                                                  hw->stream ? (void *)hw->stream : CUFRAMES_CU_STREAM_LEGACY,
                                                  pts_ns);
    cu->cuCtxPopCurrent(&dummy);
    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(ctx, ret, "Cannot publish the CUDA frame");
    s->device_copies++;
    return 0;
}

static int publish_host_frame(AVFilterContext *ctx, const AVFrame *frame, int64_t pts_ns)
{
    CuframesUploadContext *s = ctx->priv;
    const uint8_t *planes[3] = { NULL };
    size_t strides[3] = { 0 };
    int n = av_pix_fmt_count_planes(frame->format), ret;

    for (int i = 0; i < n && i < 3; i++) {
        if (frame->linesize[i] < 0) {
            av_log(ctx, AV_LOG_ERROR, "Frames with negative line sizes (vertically flipped) "
                   "are not supported.\n");
            return AVERROR(EINVAL);
        }
        planes[i]  = frame->data[i];
        strides[i] = frame->linesize[i];
    }
    ret = cuframes_publisher_publish_host(s->pub, planes, strides, n, pts_ns);
    if (ret != CUFRAMES_OK)
        return ff_cuframes_log_error(ctx, ret, "Cannot publish the frame");
    s->host_uploads += s->ring_memory == CUFRAMES_MEMORY_CUDA_VMM;
    return 0;
}

static int cuframes_upload_filter_frame(AVFilterLink *inlink, AVFrame *frame)
{
    AVFilterContext *ctx = inlink->dst;
    CuframesUploadContext *s = ctx->priv;
    enum AVPixelFormat sw = frame->format;
    int64_t pts_ns = INT64_MIN; /* R25: none -> CLOCK_MONOTONIC at publish */
    int ret;

    if (frame->format == AV_PIX_FMT_CUDA) {
        if (!frame->hw_frames_ctx) {
            av_log(ctx, AV_LOG_ERROR, "CUDA frame without a hardware frames context.\n");
            ret = AVERROR(EINVAL);
            goto fail;
        }
        sw = ((AVHWFramesContext *)frame->hw_frames_ctx->data)->sw_format;
    }
    if (ff_cuframes_format_from_pix_fmt(sw) == CUFRAMES_FORMAT_NONE) {
        av_log(ctx, AV_LOG_ERROR, "Pixel format %s cannot be published.\n",
               av_get_pix_fmt_name(sw));
        ret = AVERROR(EINVAL);
        goto fail;
    }

    if (!s->pub) {
        ret = create_publisher(ctx, frame, sw);
        if (ret < 0) {
            cuframes_publisher_destroy(s->pub);
            s->pub = NULL;
            goto fail;
        }
    } else if (sw != s->ring_pix_fmt || frame->width != s->ring_w || frame->height != s->ring_h) {
        ret = replace_ring(ctx, frame, sw, s->ring_pix_fmt, s->ring_w, s->ring_h);
        if (ret < 0)
            goto fail;
    }

    if (frame->pts != AV_NOPTS_VALUE)
        pts_ns = av_rescale_q(frame->pts, inlink->time_base, (AVRational){ 1, 1000000000 });

    if (frame->format == AV_PIX_FMT_CUDA && s->ring_memory == CUFRAMES_MEMORY_CUDA_VMM) {
        ret = publish_cuda_frame(ctx, frame, pts_ns);
    } else if (frame->format == AV_PIX_FMT_CUDA) {
        /* memory=host with CUDA input: download, then publish the host copy. */
        AVFrame *sw_frame = av_frame_alloc();
        if (!sw_frame) {
            ret = AVERROR(ENOMEM);
            goto fail;
        }
        ret = av_hwframe_transfer_data(sw_frame, frame, 0);
        if (ret >= 0) {
            s->downloads++;
            ret = publish_host_frame(ctx, sw_frame, pts_ns);
        } else {
            av_log(ctx, AV_LOG_ERROR, "Cannot download the CUDA frame for the host ring.\n");
        }
        av_frame_free(&sw_frame);
    } else {
        ret = publish_host_frame(ctx, frame, pts_ns);
    }
    if (ret < 0)
        goto fail;
    s->published++;
    return ff_filter_frame(ctx->outputs[0], frame);

fail:
    av_frame_free(&frame);
    return ret;
}

#define OFFSET(x) offsetof(CuframesUploadContext, x)
#define FLAGS (AV_OPT_FLAG_FILTERING_PARAM | AV_OPT_FLAG_VIDEO_PARAM)
static const AVOption cuframes_upload_options[] = {
    { "key", "publisher key: subscribers connect with -f cuframes -i KEY ([A-Za-z0-9_-]{1,63})",
      OFFSET(key), AV_OPT_TYPE_STRING, { .str = NULL }, 0, 0, FLAGS },
    { "ring_size", "number of frame slots in the ring",
      OFFSET(ring_size), AV_OPT_TYPE_INT, { .i64 = 4 }, 1, CUFRAMES_MAX_RING_SIZE, FLAGS },
    { "policy", "what the publisher does when a slot is still being read",
      OFFSET(policy), AV_OPT_TYPE_INT, { .i64 = CUFRAMES_POLICY_DROP_OLDEST }, 0, 1, FLAGS, .unit = "policy" },
        { "drop_oldest", "never wait: overwrite the oldest slot (slow subscribers skip frames)",
          0, AV_OPT_TYPE_CONST, { .i64 = CUFRAMES_POLICY_DROP_OLDEST }, 0, 0, FLAGS, .unit = "policy" },
        { "strict_wait", "wait for every subscriber's ACK: each one sees every frame",
          0, AV_OPT_TYPE_CONST, { .i64 = CUFRAMES_POLICY_STRICT_WAIT }, 0, 0, FLAGS, .unit = "policy" },
    { "ack_timeout", "strict_wait: how long a subscriber may hold a frame without ACKing before it is declared dead; "
      "also how long the end waits for subscribers following a size change",
      OFFSET(ack_timeout), AV_OPT_TYPE_DURATION, { .i64 = 1000000 }, 1000, UINT32_MAX * INT64_C(1000), FLAGS },
    { "memory", "where the ring's slots live",
      OFFSET(memory), AV_OPT_TYPE_INT, { .i64 = MEMORY_AUTO }, -1, 1, FLAGS, .unit = "memory" },
        { "auto", "CUDA VMM for CUDA input or when a CUDA device exists, else host memory",
          0, AV_OPT_TYPE_CONST, { .i64 = MEMORY_AUTO }, 0, 0, FLAGS, .unit = "memory" },
        { "cuda", "CUDA VMM device memory",
          0, AV_OPT_TYPE_CONST, { .i64 = CUFRAMES_MEMORY_CUDA_VMM }, 0, 0, FLAGS, .unit = "memory" },
        { "host", "host memory (memfd); CPU-only machines",
          0, AV_OPT_TYPE_CONST, { .i64 = CUFRAMES_MEMORY_HOST_MEMFD }, 0, 0, FLAGS, .unit = "memory" },
    { "device", "CUDA device ordinal of the ring (-1: the input frames' device, else 0)",
      OFFSET(device), AV_OPT_TYPE_INT, { .i64 = -1 }, -1, INT_MAX, FLAGS },
    { "allow_legacy", "admit plain protocol v4 subscribers without ACK pages (makes the frame ring writable by the group: see docs/protocol.md, trust model)",
      OFFSET(allow_legacy), AV_OPT_TYPE_BOOL, { .i64 = 0 }, 0, 1, FLAGS },
    { "max_subscribers_per_uid", "subscriber slots (of 31) the processes of one uid may hold; the publisher's own uid and root are not counted; 31 = no cap",
      OFFSET(max_subscribers_per_uid), AV_OPT_TYPE_INT, { .i64 = 8 }, 0, CUFRAMES_MAX_SUBSCRIBERS, FLAGS },
    { "max_subscribers_per_pid", "subscriber slots (of 31) one process may hold (a process in another PID namespace is counted by its uid only); 31 = no cap",
      OFFSET(max_subscribers_per_pid), AV_OPT_TYPE_INT, { .i64 = 4 }, 0, CUFRAMES_MAX_SUBSCRIBERS, FLAGS },
    { "wait_subscribers", FF_CUFRAMES_HELP_WAIT_SUBSCRIBERS,
      OFFSET(wait_subscribers), AV_OPT_TYPE_INT, { .i64 = 0 }, 0, CUFRAMES_MAX_SUBSCRIBERS, FLAGS },
    { "wait_timeout", "how long to wait for wait_subscribers, then publish anyway (with a warning)",
      OFFSET(wait_timeout), AV_OPT_TYPE_DURATION, { .i64 = 10000000 }, 0, INT64_MAX, FLAGS },
    { "runtime_dir", FF_CUFRAMES_HELP_RUNTIME_DIR,
      OFFSET(runtime_dir), AV_OPT_TYPE_STRING, { .str = NULL }, 0, 0, FLAGS },
    { NULL },
};

AVFILTER_DEFINE_CLASS(cuframes_upload);

static const AVFilterPad cuframes_upload_inputs[] = {
    {
        .name         = "default",
        .type         = AVMEDIA_TYPE_VIDEO,
        .filter_frame = cuframes_upload_filter_frame,
    },
};

static const AVFilterPad cuframes_upload_outputs[] = {
    {
        .name         = "default",
        .type         = AVMEDIA_TYPE_VIDEO,
        .config_props = cuframes_upload_config_output,
    },
};

/* FFmpeg 8.0 (libavfilter 11) moved the internal fields of AVFilter into FFFilter, which
 * embeds the public part as .p; FFmpeg 7.1 has them in AVFilter itself. Only the public
 * fields' spelling differs. */
#if LIBAVFILTER_VERSION_MAJOR >= 11
#define CUFRAMES_FILTER_TYPE FFFilter
#define CUFRAMES_PUBLIC(field) .p.field
#else
#define CUFRAMES_FILTER_TYPE AVFilter
#define CUFRAMES_PUBLIC(field) .field
#endif

const CUFRAMES_FILTER_TYPE ff_vf_hwupload_cuframes = {
    CUFRAMES_PUBLIC(name)        = "hwupload_cuframes",
    CUFRAMES_PUBLIC(description) = NULL_IF_CONFIG_SMALL("Publish frames into a cuframes ring "
                                   "(GPU or host memory) and pass them on unchanged."),
    CUFRAMES_PUBLIC(priv_class)  = &cuframes_upload_class,
    .init          = cuframes_upload_init,
    .uninit        = cuframes_upload_uninit,
    .priv_size     = sizeof(CuframesUploadContext),
    FILTER_INPUTS(cuframes_upload_inputs),
    FILTER_OUTPUTS(cuframes_upload_outputs),
    FILTER_QUERY_FUNC2(cuframes_upload_query_formats),
    .flags_internal = FF_FILTER_FLAG_HWFRAME_AWARE,
};
