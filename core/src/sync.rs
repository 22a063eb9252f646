//! Where the frame ring's atomics, fences and locks come from: `std` in every real build, and
//! `loom` under `--cfg loom`, so that the loom models (`frame_ring::loom_models`) run the
//! production reader, ACK page and publication code over memory whose every access loom
//! tracks (`docs/testing.md`, "Memory-order models").
//!
//! In a real build [`Mapping`], [`Shared64`] and [`Shared32`] are exactly `shm`'s (a
//! re-export) and [`wrap`] is the identity: nothing here changes production code. Under loom
//! they are enums: a real mapping still works as before (the rest of the crate compiles and
//! runs unchanged), and [`Mapping::model`] is in-process memory of loom atomics, one per
//! 8-byte and one per 4-byte word. A 32-bit handle of a 64-bit field (a futex word over the
//! low half of `global_seq` or of a slot's ACK bitmap) is then an atomic of its own: the
//! production code only hands those to futex calls, which need no value of them.

#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::Mutex;

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::Mutex;

#[cfg(not(loom))]
pub use crate::shm::{Mapping, Shared32, Shared64};

/// A mapping as the frame ring's types hold it (the identity outside loom).
#[cfg(not(loom))]
#[inline]
pub fn wrap(map: crate::shm::Mapping) -> Mapping {
    map
}

#[cfg(loom)]
pub use model::{wrap, Mapping, Shared32, Shared64};

#[cfg(loom)]
mod model {
    use std::sync::Arc;

    use super::{AtomicU32, AtomicU64, Ordering};
    use crate::error::Result;
    use crate::shm;

    /// In-process memory of loom atomics: `w64[i]` is the u64 at offset 8i, `w32[i]` the u32
    /// at offset 4i.
    pub struct Words {
        w64: Box<[AtomicU64]>,
        w32: Box<[AtomicU32]>,
    }

    /// A real mapping, or loom-tracked memory shared by every `Mapping` made from it.
    pub enum Mapping {
        Os(shm::Mapping),
        Model(Arc<Words>),
    }

    pub fn wrap(map: shm::Mapping) -> Mapping {
        Mapping::Os(map)
    }

    impl Mapping {
        /// `len` bytes of zeroed loom memory (inside `loom::model`: loom atomics live in one
        /// execution).
        pub fn model(len: usize) -> Mapping {
            Mapping::Model(Arc::new(Words {
                w64: (0..len / 8).map(|_| AtomicU64::new(0)).collect(),
                w32: (0..len / 4).map(|_| AtomicU32::new(0)).collect(),
            }))
        }

        /// Another view of the same loom memory (a second process's mapping of the object).
        pub fn share(&self) -> Mapping {
            match self {
                Mapping::Model(w) => Mapping::Model(Arc::clone(w)),
                Mapping::Os(_) => panic!("only model memory is shared this way"),
            }
        }

        pub fn map(
            fd: std::os::fd::BorrowedFd<'_>,
            len: usize,
            writable: bool,
            what: &str,
        ) -> Result<Mapping> {
            shm::Mapping::map(fd, len, writable, what).map(Mapping::Os)
        }

        fn os(&self, what: &str) -> &shm::Mapping {
            match self {
                Mapping::Os(m) => m,
                Mapping::Model(_) => panic!("{what} is not modelled under loom"),
            }
        }

        pub fn atomic_u64(&self, offset: usize) -> Shared64<'_> {
            match self {
                Mapping::Os(m) => Shared64::Os(m.atomic_u64(offset)),
                Mapping::Model(w) => {
                    assert!(offset % 8 == 0, "misaligned model access at {offset}");
                    Shared64::Model(&w.w64[offset / 8])
                }
            }
        }

        pub fn atomic_u32(&self, offset: usize) -> Shared32<'_> {
            match self {
                Mapping::Os(m) => Shared32::Os(m.atomic_u32(offset)),
                Mapping::Model(w) => {
                    assert!(offset % 4 == 0, "misaligned model access at {offset}");
                    Shared32::Model(&w.w32[offset / 4])
                }
            }
        }

        pub fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
            self.atomic_u64(offset).load(order)
        }

        pub fn load_u32(&self, offset: usize, order: Ordering) -> u32 {
            self.atomic_u32(offset).load(order)
        }

        pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
            self.os("read_bytes").read_bytes(offset, out)
        }

        pub fn write_bytes(&self, offset: usize, data: &[u8]) {
            self.os("write_bytes").write_bytes(offset, data)
        }

        pub fn zero(&self, offset: usize, len: usize) {
            self.os("zero").zero(offset, len)
        }
    }

    macro_rules! field {
        ($name:ident, $int:ty, $atomic:ident) => {
            /// A field handle: `shm`'s, or a loom atomic of model memory.
            #[derive(Clone, Copy)]
            pub enum $name<'a> {
                Os(shm::$name<'a>),
                Model(&'a $atomic),
            }

            // One macro for both widths: not every operation is used at each.
            #[allow(dead_code)]
            impl $name<'_> {
                pub fn load(self, order: Ordering) -> $int {
                    match self {
                        $name::Os(f) => f.load(order),
                        $name::Model(a) => a.load(order),
                    }
                }

                pub fn store(self, value: $int, order: Ordering) {
                    match self {
                        $name::Os(f) => f.store(value, order),
                        $name::Model(a) => a.store(value, order),
                    }
                }

                pub fn fetch_add(self, value: $int, order: Ordering) -> $int {
                    match self {
                        $name::Os(f) => f.fetch_add(value, order),
                        $name::Model(a) => a.fetch_add(value, order),
                    }
                }

                pub fn fetch_sub(self, value: $int, order: Ordering) -> $int {
                    match self {
                        $name::Os(f) => f.fetch_sub(value, order),
                        $name::Model(a) => a.fetch_sub(value, order),
                    }
                }

                pub fn fetch_or(self, value: $int, order: Ordering) -> $int {
                    match self {
                        $name::Os(f) => f.fetch_or(value, order),
                        $name::Model(a) => a.fetch_or(value, order),
                    }
                }

                pub fn fetch_and(self, value: $int, order: Ordering) -> $int {
                    match self {
                        $name::Os(f) => f.fetch_and(value, order),
                        $name::Model(a) => a.fetch_and(value, order),
                    }
                }

                pub fn fetch_max(self, value: $int, order: Ordering) -> $int {
                    match self {
                        $name::Os(f) => f.fetch_max(value, order),
                        $name::Model(a) => a.fetch_max(value, order),
                    }
                }
            }
        };
    }

    field!(Shared64, u64, AtomicU64);
    field!(Shared32, u32, AtomicU32);

    /// A futex on model memory: wake-ups go nowhere and nothing sleeps on it (the models never
    /// wait); the address is one that no real futex uses.
    static NO_FUTEX: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

    impl crate::futex::FutexWord for Shared32<'_> {
        fn futex_addr(&self) -> *const u32 {
            match self {
                Shared32::Os(f) => f.as_ptr(),
                Shared32::Model(_) => NO_FUTEX.as_ptr(),
            }
        }
    }

    impl crate::futex::FutexWord for &AtomicU32 {
        fn futex_addr(&self) -> *const u32 {
            NO_FUTEX.as_ptr()
        }
    }
}
