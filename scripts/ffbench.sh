# shellcheck shell=bash
# The decode benchmarks' two building blocks, sourced by scripts/gpu-check.sh (ff_bench) and
# the diagnostics in tools/diag/: one test clip, and one decode's steady frame rate. Both sit
# beside steady_fps.py, here and in .gpu/ (gpu-check.sh build copies the three together).
#
#   . scripts/ffbench.sh
#   ffbench_clip "$ff" 1920x1080 1500 clip.h264
#   fps=$(ffbench_fps win.txt "$ff" -hwaccel cuda -hwaccel_output_format cuda -i clip.h264)
ffbench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# An H.264 clip of testsrc2 at 30 fps: SIZE (WxH), FRAMES frames, written to OUT. libx264
# ultrafast, one keyframe every 2 s, yuv420p: encoded on the GPU machine's cores, so nothing
# large is carried there, and decoded by nvdec like a camera's stream.
ffbench_clip() { # ffmpeg, size, frames, out
  "$1" -hide_banner -nostdin -loglevel error -y -f lavfi -i "testsrc2=s=$2:r=30" \
    -frames:v "$3" -c:v libx264 -preset ultrafast -crf 30 -g 60 -pix_fmt yuv420p "$4"
}

# Runs COMMAND (an ffmpeg command line, a wrapper before it allowed, without its output) to the
# null muxer with its progress on a pipe, and prints the steady frame rate (10 % to 90 % of
# the frames: steady_fps.py says why). WINDOW (a file, or empty for none) gets the window's
# times and the whole run's rate. The progress period is FFBENCH_STATS_PERIOD (0.05 s).
ffbench_fps() { # window, command...
  local window=$1; shift
  "$@" -f null -progress pipe:1 -stats_period "${FFBENCH_STATS_PERIOD:-0.05}" -nostats - |
    STEADY_FPS_WINDOW="$window" python3 "$ffbench_dir/steady_fps.py"
}
