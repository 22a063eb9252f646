//! Links what the static FFmpeg of FFMPEG_DIR needs besides its own libraries (libcuframes,
//! libx264, libdav1d, libm, ...), as its pkg-config files say, and generates the bindings of
//! cuframes.h. ffmpeg-sys-next links libavformat.a & co. itself.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FFMPEG_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let ffmpeg_dir = PathBuf::from(env::var("FFMPEG_DIR").expect(
        "FFMPEG_DIR must name an FFmpeg prefix with the cuframes components \
         (scripts/test-ffmpeg-sys.sh sets it)",
    ));
    let pc_path = format!(
        "{}:{}",
        ffmpeg_dir.join("lib/pkgconfig").display(),
        env::var("PKG_CONFIG_PATH").unwrap_or_default()
    );
    let out = Command::new("pkg-config")
        .args(["--static", "--libs", "libavdevice", "libavfilter"])
        .env("PKG_CONFIG_PATH", &pc_path)
        .output()
        .expect("run pkg-config");
    assert!(
        out.status.success(),
        "pkg-config --static --libs libavdevice libavfilter (PKG_CONFIG_PATH={pc_path}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // As link arguments, not link-lib: they must come after the FFmpeg archives, which
    // ffmpeg-sys-next bundles into its rlib, on the linker's command line.
    for flag in String::from_utf8(out.stdout).unwrap().split_whitespace() {
        if flag.starts_with("-l") || flag.starts_with("-L") || flag == "-pthread" {
            println!("cargo:rustc-link-arg={flag}");
        }
    }
    if let Ok(extra) = env::var("CUFRAMES_FFMPEG_STATICLIB") {
        // The directory where a static-only libx264.a stands (scripts/build-ffmpeg.sh).
        println!("cargo:rustc-link-arg=-L{extra}");
    }

    let include = Command::new("pkg-config")
        .args(["--variable=includedir", "cuframes"])
        .env("PKG_CONFIG_PATH", &pc_path)
        .output()
        .expect("run pkg-config");
    let include = String::from_utf8(include.stdout).unwrap().trim().to_owned();
    assert!(!include.is_empty(), "pkg-config finds no cuframes.pc");
    let header = format!("{include}/cuframes.h");
    println!("cargo:rerun-if-changed={header}");
    bindgen::Builder::default()
        .header(&header)
        .allowlist_function("cuframes_.*")
        .allowlist_type("cuframes_.*")
        .allowlist_var("CUFRAMES_.*")
        .prepend_enum_name(false)
        .generate()
        .expect("bindgen cuframes.h")
        .write_to_file(PathBuf::from(env::var("OUT_DIR").unwrap()).join("cuframes.rs"))
        .unwrap();
}
