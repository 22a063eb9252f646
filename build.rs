//! Writes `cuframes.pc` into `OUT_DIR` and nowhere else (a build has no side effects outside
//! cargo's own directories): `scripts/install.sh PREFIX` copies it, with `prefix=` set to the
//! installation prefix, next to the installed `libcuframes.a`. One text of the `.pc` file,
//! here; the install script only substitutes the prefix.

use std::env;
use std::fs;
use std::path::PathBuf;

/// What a Rust static library needs from the system when linked into a C program
/// (what `rustc --print native-static-libs` reports for this crate on glibc).
pub const LIBS_PRIVATE: &str = "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let version = env::var("CARGO_PKG_VERSION").unwrap();
    let pc = format!(
        "prefix=/usr/local\n\
         libdir=${{prefix}}/lib\n\
         includedir=${{prefix}}/include\n\n\
         Name: cuframes\n\
         Description: Share GPU frames and encoded packets between processes\n\
         Version: {version}\n\
         Libs: -L${{libdir}} -lcuframes\n\
         Libs.private: {LIBS_PRIVATE}\n\
         Cflags: -I${{includedir}}\n",
    );
    fs::write(out.join("cuframes.pc"), pc).expect("write cuframes.pc into OUT_DIR");
}
