//! Generation names: an SHM name with a generation suffix, `<name>.<16 lowercase hex digits>`.
//! They travel in HELLO_RESP (R19), so their syntax is part of the protocol; `paths`
//! re-exports them beside the names they extend.

/// Separates an SHM name from its generation (`cuframes-cam1.0123456789abcdef`). Keys have
/// no '.', so a generation name is nobody's key: a ring that another user keeps from its
/// name (/dev/shm is sticky: a name someone else created first stays theirs) lives under
/// its generation name, which HELLO_RESP announces (R19), and the staged object that a new
/// ring is built in before it is renamed to its name has one too.
pub const GENERATION_SEPARATOR: char = '.';
/// Hex digits of a generation (64 random bits).
pub const GENERATION_DIGITS: usize = 16;

/// `<name>.<generation>`: an SHM name under which nobody else can have created an object
/// first (`generation` is 64 random bits).
pub fn generation_name(name: &str, generation: u64) -> String {
    format!("{name}{GENERATION_SEPARATOR}{generation:016x}")
}

/// `(name, Some(generation))` for a generation name `<name>.<16 lowercase hex digits>`,
/// `(name, None)` for any other name.
pub fn split_generation(name: &str) -> (&str, Option<u64>) {
    if let Some((base, digits)) = name.rsplit_once(GENERATION_SEPARATOR) {
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if digits.len() == GENERATION_DIGITS && digits.chars().all(hex) {
            if let Ok(g) = u64::from_str_radix(digits, 16) {
                return (base, Some(g));
            }
        }
    }
    (name, None)
}
