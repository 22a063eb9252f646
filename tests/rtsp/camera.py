#!/usr/bin/python3
"""A real RTSP camera for the tests: GStreamer's RTSP server serving a clip in a loop.

Runs on Debian's system python3 (python3-gi, gir1.2-gst-rtsp-server-1.0 and the GStreamer
plugin packages listed in scripts/packages-debian.txt), never in a venv.

    camera.py serve --clip CLIP --codec h264|hevc [--fps 25] [--port 0] [--mount /cam]
                    [--record-mount /out --record-codec h264|hevc --record-file FILE]
    camera.py encode --codec hevc --gop FRAMES --yuv RAW.yuv --size 320x240 --fps 25 OUT
    camera.py check

`serve` plays CLIP (raw Annex B, one slice per picture, parameter sets before every IDR) at
its real rate, looping like an IP camera that never stops: RTP timestamps keep increasing
across the loop. Every client shares the one stream (a camera has one encoder). When it
listens it prints `PORT <n>` on stdout (port 0 lets the kernel pick a free one); SIGTERM or
SIGINT stops it cleanly (exit status 0). `--record-mount` adds a mount in RECORD mode
(ANNOUNCE/RECORD, what `ffmpeg -f rtsp` does): the access units it receives are depayloaded
and written to FILE as Annex B, flushed as they arrive.

`encode` makes an HEVC clip with GStreamer's x265 encoder (Debian has no ffmpeg with
libx265 here): a keyframe every FRAMES pictures, no B-frames, parameter sets repeated.

`check` exits 0 when everything `serve` needs is installed, else 2 naming what is missing.
"""

import argparse
import signal
import sys

MISSING_EXIT = 2


def load_gstreamer():
    """Gst, GstRtspServer and GLib, or exit MISSING_EXIT saying what is missing."""
    try:
        import gi

        gi.require_version("Gst", "1.0")
        gi.require_version("GstRtspServer", "1.0")
        from gi.repository import GLib, Gst, GstRtspServer
    except (ImportError, ValueError) as e:
        print(
            f"missing: GStreamer RTSP server for Python ({e}); install python3-gi and "
            "gir1.2-gst-rtsp-server-1.0 (scripts/install-deps.sh)",
            file=sys.stderr,
        )
        sys.exit(MISSING_EXIT)
    Gst.init(None)
    elements = [
        "multifilesrc", "h264parse", "h265parse", "rtph264pay", "rtph265pay",
        "rtph264depay", "rtph265depay", "filesink", "rawvideoparse", "x265enc",
    ]
    missing = [e for e in elements if Gst.ElementFactory.find(e) is None]
    if missing:
        print(
            f"missing: GStreamer elements {', '.join(missing)}; install the GStreamer plugin "
            "packages of scripts/packages-debian.txt (scripts/install-deps.sh)",
            file=sys.stderr,
        )
        sys.exit(MISSING_EXIT)
    return Gst, GstRtspServer, GLib


CODECS = {
    # codec: (caps name, parser, payloader, depayloader)
    "h264": ("video/x-h264", "h264parse", "rtph264pay", "rtph264depay"),
    "hevc": ("video/x-h265", "h265parse", "rtph265pay", "rtph265depay"),
}


def quote(path):
    """A file path as a quoted gst-launch property value."""
    if '"' in path or "\\" in path:
        raise SystemExit(f"unsupported character in path {path!r}")
    return f'"{path}"'


def serve(args):
    Gst, GstRtspServer, GLib = load_gstreamer()
    caps, parse, pay, _ = CODECS[args.codec]
    server = GstRtspServer.RTSPServer()
    server.set_address(args.address)
    server.set_service(str(args.port))
    mounts = server.get_mount_points()

    # The clip's bytes loop without end; the parser splits them into access units and, from
    # the framerate in the caps, gives each its timestamp, so timestamps keep increasing
    # across the loop. The RTSP server's sinks play them at that rate.
    play = GstRtspServer.RTSPMediaFactory()
    play.set_launch(
        f"( multifilesrc location={quote(args.clip)} loop=true "
        f'caps="{caps},stream-format=byte-stream,framerate={args.fps}/1" '
        f"! {parse} name=parse ! {pay} name=pay0 pt=96 )"
    )

    # The parser gives a raw stream decode timestamps only; the clips have no B-frames (as
    # most IP cameras), so each picture's presentation time is its decode time, and the
    # payloader takes RTP timestamps from presentation times.
    def pts_from_dts(_pad, info):
        buf = info.get_buffer()
        if buf.pts == Gst.CLOCK_TIME_NONE:
            buf.pts = buf.dts
        return Gst.PadProbeReturn.OK

    def configure(_factory, media):
        parser = media.get_element().get_by_name("parse")
        parser.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, pts_from_dts)

    play.connect("media-configure", configure)
    play.set_shared(True)
    # A camera's stream restarts from the source when the last client has gone and a new one
    # comes; `shared` media must not be reused after it stopped.
    play.set_eos_shutdown(False)
    mounts.add_factory(args.mount, play)

    if args.record_mount:
        if not args.record_file or not args.record_codec:
            raise SystemExit("--record-mount needs --record-codec and --record-file")
        rcaps, rparse, _, rdepay = CODECS[args.record_codec]
        record = GstRtspServer.RTSPMediaFactory()
        record.set_transport_mode(GstRtspServer.RTSPTransportMode.RECORD)
        # Unbuffered: what arrived is in the file at once, also when the pusher is killed.
        record.set_launch(
            f"( {rdepay} name=depay0 ! {rparse} "
            f"! {rcaps},stream-format=byte-stream,alignment=au "
            f"! filesink location={quote(args.record_file)} buffer-mode=unbuffered sync=false )"
        )
        record.set_latency(50)
        mounts.add_factory(args.record_mount, record)

    if server.attach(None) == 0:
        print(f"cannot listen on {args.address}:{args.port}", file=sys.stderr)
        sys.exit(1)
    loop = GLib.MainLoop()

    def stop(*_):
        loop.quit()
        return GLib.SOURCE_REMOVE

    for s in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, s, stop)
    print(f"PORT {server.get_bound_port()}", flush=True)
    loop.run()
    return 0


def encode(args):
    Gst, _, _ = load_gstreamer()
    if args.codec != "hevc":
        raise SystemExit("encode makes HEVC clips (H.264 clips come from ffmpeg's libx264)")
    w, h = (int(x) for x in args.size.split("x"))
    g = args.gop
    pipeline = Gst.parse_launch(
        f"filesrc location={quote(args.yuv)} "
        f"! rawvideoparse width={w} height={h} format=i420 framerate={args.fps}/1 "
        f'! x265enc speed-preset=ultrafast bitrate=400 option-string="keyint={g}:min-keyint={g}:'
        'scenecut=0:bframes=0:repeat-headers=1:aud=0:info=0:frame-threads=1:pools=none" '
        "! h265parse ! video/x-h265,stream-format=byte-stream,alignment=au "
        f"! filesink location={quote(args.out)}"
    )
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(
        120 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR
    )
    pipeline.set_state(Gst.State.NULL)
    if msg is None or msg.type != Gst.MessageType.EOS:
        detail = msg.parse_error() if msg is not None else "no end within 120 s"
        print(f"encoding failed: {detail}", file=sys.stderr)
        return 1
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a clip in a loop over RTSP")
    s.add_argument("--clip", required=True)
    s.add_argument("--codec", choices=sorted(CODECS), required=True)
    s.add_argument("--fps", type=int, default=25)
    s.add_argument("--address", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--mount", default="/cam")
    s.add_argument("--record-mount")
    s.add_argument("--record-codec", choices=sorted(CODECS))
    s.add_argument("--record-file")
    e = sub.add_parser("encode", help="make an HEVC clip with x265")
    e.add_argument("--codec", choices=["hevc"], required=True)
    e.add_argument("--gop", type=int, required=True)
    e.add_argument("--yuv", required=True)
    e.add_argument("--size", default="320x240")
    e.add_argument("--fps", type=int, default=25)
    e.add_argument("out")
    sub.add_parser("check", help="exit 0 when the RTSP server and its plugins are installed")
    args = p.parse_args()
    if args.cmd == "serve":
        return serve(args)
    if args.cmd == "encode":
        return encode(args)
    load_gstreamer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
