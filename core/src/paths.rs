//! Keys, the runtime directory (R16) and the names of every object a publisher creates (§1).

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorCode, Result};
use crate::wire::MAX_KEY_LEN;

pub use crate::wire::generation::{
    generation_name, split_generation, GENERATION_DIGITS, GENERATION_SEPARATOR,
};

/// Default socket directory (R16).
pub const DEFAULT_RUNTIME_DIR: &str = "/run/cuframes";
/// Environment variable overriding the socket directory (R16).
pub const RUNTIME_DIR_ENV: &str = "CUFRAMES_RUNTIME_DIR";
/// Prefix of every SHM object of this project.
pub const SHM_PREFIX: &str = "cuframes-";
/// Suffix of packet SHM objects.
pub const PACKET_SHM_SUFFIX: &str = "-packets";

/// A validated key: `^[a-zA-Z0-9_-]{1,63}$` (§1).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

/// `{key:?}` in messages shows the key quoted (`"cam1"`), never the Rust form `Key("cam1")`.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl Key {
    /// A key, checked against `^[a-zA-Z0-9_-]{1,63}$` ([`validate_key`]).
    pub fn new(key: &str) -> Result<Key> {
        validate_key(key)?;
        Ok(Key(key.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `cuframes-<key>`: the frame SHM name relative to /dev/shm (R19).
    pub fn frame_shm_name(&self) -> String {
        format!("{SHM_PREFIX}{}", self.0)
    }

    /// `cuframes-<key>-packets` (R19).
    pub fn packet_shm_name(&self) -> String {
        format!("{SHM_PREFIX}{}{PACKET_SHM_SUFFIX}", self.0)
    }

    /// Whether `name` is this key's frame SHM: its name, or a generation name of it.
    pub fn is_frame_shm(&self, name: &str) -> bool {
        split_generation(name).0 == self.frame_shm_name()
    }

    /// Whether `name` is this key's packet SHM: its name, or a generation name of it.
    pub fn is_packet_shm(&self, name: &str) -> bool {
        split_generation(name).0 == self.packet_shm_name()
    }
}

/// The keys whose SHM objects `name` (or the name before its generation) can be: as a frame
/// SHM (`cuframes-<key>`) and as a packet SHM (`cuframes-<key>-packets`); neither for a name
/// that is not one of this project's. No key ends in `-packets` ([`validate_key`]), so at most
/// one of the two is `Some`.
pub fn shm_name_keys(name: &str) -> (Option<&str>, Option<&str>) {
    let Some(rest) = split_generation(name).0.strip_prefix(SHM_PREFIX) else {
        return (None, None);
    };
    let frame = validate_key(rest).is_ok().then_some(rest);
    let packet = rest
        .strip_suffix(PACKET_SHM_SUFFIX)
        .filter(|k| validate_key(k).is_ok());
    (frame, packet)
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Check a key against `^[a-zA-Z0-9_-]{1,63}$`, saying what is wrong with it.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid(
            "key is empty (expected 1..63 characters of [a-zA-Z0-9_-])",
        ));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key is {} bytes long; at most {MAX_KEY_LEN} are allowed",
            key.len()
        )));
    }
    if let Some(bad) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(Error::invalid(format!(
            "key {key:?} contains {bad:?}; only [a-zA-Z0-9_-] are allowed"
        )));
    }
    if key.ends_with(PACKET_SHM_SUFFIX) {
        // R32: the frame SHM of key "X-packets" would be the packet SHM of key "X".
        return Err(Error::invalid(format!(
            "key {key:?} ends in {PACKET_SHM_SUFFIX:?}, which is reserved for packet rings (the \
             frame ring of a key \"X{PACKET_SHM_SUFFIX}\" would be the packet ring of key \"X\")"
        )));
    }
    Ok(())
}

/// Where sockets live: the API's choice, else `$CUFRAMES_RUNTIME_DIR`, else `/run/cuframes`.
pub fn runtime_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    match std::env::var_os(RUNTIME_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_RUNTIME_DIR),
    }
}

/// `<runtime_dir>/<key>.sock`, refused when it does not fit `sockaddr_un` (107 bytes).
pub fn socket_path(dir: &Path, key: &Key) -> Result<PathBuf> {
    let path = dir.join(format!("{}.sock", key.as_str()));
    let len = path.as_os_str().len();
    if len > 107 {
        return Err(Error::new(
            ErrorCode::InvalidArg,
            format!(
                "socket path {} is {len} bytes; Unix sockets allow 107 (use a shorter runtime directory or key)",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// Accept an SHM name from the wire (R19): relative to /dev/shm, optional leading '/',
/// and it must be one of this project's names (or a generation name of one), so a peer
/// cannot point us at another object.
pub fn parse_wire_shm_name(name: &str) -> Result<String> {
    let bare = name.strip_prefix('/').unwrap_or(name);
    let rest = split_generation(bare)
        .0
        .strip_prefix(SHM_PREFIX)
        .ok_or_else(|| {
            Error::protocol(format!(
                "SHM name {name:?} does not start with {SHM_PREFIX:?}"
            ))
        })?;
    let key = rest.strip_suffix(PACKET_SHM_SUFFIX).unwrap_or(rest);
    validate_key(key)
        .map_err(|e| Error::protocol(format!("SHM name {name:?}: {}", e.message())))?;
    Ok(bare.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_in_a_message_is_the_key_quoted_not_a_rust_form() {
        let k = Key::new("cam1").unwrap();
        assert_eq!(format!("{k:?}"), "\"cam1\"");
        assert_eq!(format!("{k}"), "cam1");
        let dir = std::env::temp_dir().join(format!("cuframes-nokey-{}", std::process::id()));
        let opts = crate::subscriber::SubscriberOptions {
            runtime_dir: Some(dir),
            ..Default::default()
        };
        let e = crate::subscriber::Subscriber::connect("nosuch", &opts)
            .err()
            .unwrap();
        let text = e.to_string();
        assert!(
            text.starts_with("CUFRAMES_ERR_NOT_FOUND: no publisher for key \"nosuch\": "),
            "{text}"
        );
        assert!(!text.contains("Key("), "{text}");
    }

    #[test]
    fn an_shm_name_gives_the_keys_it_can_belong_to() {
        assert_eq!(shm_name_keys("cuframes-cam1"), (Some("cam1"), None));
        assert_eq!(
            shm_name_keys("cuframes-cam1.0123456789abcdef"),
            (Some("cam1"), None)
        );
        assert_eq!(shm_name_keys("cuframes-cam1-packets"), (None, Some("cam1")));
        assert_eq!(
            shm_name_keys("cuframes-cam.1-packets"),
            (None, None),
            "a key has no '.'"
        );
        assert_eq!(shm_name_keys("other-cam1"), (None, None));
        assert_eq!(shm_name_keys("cuframes-"), (None, None));
    }

    #[test]
    fn keys_follow_the_regex() {
        for ok in ["a", "cam1", "Cam_1-x", &"k".repeat(63)] {
            assert!(validate_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "cam 1", "cam/1", "cäm", "a.b", &"k".repeat(64), "x\0"] {
            let e = validate_key(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{bad}");
        }
    }

    #[test]
    fn r32_keys_never_end_in_packets() {
        let e = Key::new("cam1-packets").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArg);
        assert!(
            e.message().contains("reserved for packet rings"),
            "{}",
            e.message()
        );
        Key::new("cam1-packets2").unwrap();
        Key::new("packets").unwrap();
        assert!(parse_wire_shm_name("cuframes-cam1-packets-packets").is_err());
    }

    #[test]
    fn names_follow_section_1() {
        let k = Key::new("cam1").unwrap();
        assert_eq!(k.frame_shm_name(), "cuframes-cam1");
        assert_eq!(k.packet_shm_name(), "cuframes-cam1-packets");
        let p = socket_path(Path::new("/run/cuframes"), &k).unwrap();
        assert_eq!(p, PathBuf::from("/run/cuframes/cam1.sock"));
    }

    #[test]
    fn explicit_dir_wins() {
        assert_eq!(
            runtime_dir(Some(Path::new("/tmp/x"))),
            PathBuf::from("/tmp/x")
        );
    }

    #[test]
    fn too_long_socket_path_is_refused() {
        let k = Key::new(&"k".repeat(63)).unwrap();
        assert!(socket_path(Path::new(&"/d".repeat(30)), &k).is_err());
    }

    #[test]
    fn wire_shm_names_are_confined_to_the_project() {
        assert_eq!(
            parse_wire_shm_name("/cuframes-cam1").unwrap(),
            "cuframes-cam1"
        );
        assert_eq!(
            parse_wire_shm_name("cuframes-cam1-packets").unwrap(),
            "cuframes-cam1-packets"
        );
        assert!(parse_wire_shm_name("../etc/passwd").is_err());
        assert!(parse_wire_shm_name("cuframes-a/b").is_err());
        assert!(parse_wire_shm_name("other").is_err());
        // Generation names: exactly 16 lowercase hex digits after one '.'.
        for good in [
            "cuframes-cam1.0123456789abcdef",
            "/cuframes-cam1-packets.ffffffffffffffff",
        ] {
            assert_eq!(
                parse_wire_shm_name(good).unwrap(),
                good.trim_start_matches('/')
            );
        }
        for bad in [
            "cuframes-cam1.0123",
            "cuframes-cam1.0123456789ABCDEF",
            "cuframes-cam1..0123456789abcdef",
            "cuframes-.0123456789abcdef",
            "cuframes-cam1.0123456789abcdef.0123456789abcdef",
            "cuframes-cam1.0123456789abcdef-packets",
        ] {
            assert!(parse_wire_shm_name(bad).is_err(), "{bad}");
        }
        let k = Key::new("cam1").unwrap();
        assert!(
            k.is_frame_shm("cuframes-cam1") && k.is_frame_shm("cuframes-cam1.00000000000000ff")
        );
        assert!(!k.is_frame_shm("cuframes-cam1-packets") && !k.is_frame_shm("cuframes-cam12"));
        assert!(k.is_packet_shm("cuframes-cam1-packets.00000000000000ff"));
        assert!(!k.is_packet_shm("cuframes-cam1.00000000000000ff"));
    }
}
