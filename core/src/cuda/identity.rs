//! Which GPU is which, across processes. Device ordinals are per process: a container, or
//! `CUDA_VISIBLE_DEVICES`, renumbers the devices it shows, so "device 0" of a publisher and
//! "device 0" of a subscriber may be different GPUs. The UUID (`cuDeviceGetUuid_v2`) is the
//! same everywhere; the publisher announces its ring's (the frame meta extension) and a
//! subscriber maps it back to one of its own ordinals with [`resolve_device`].

use std::fmt;

use cudarc::driver::sys;

use super::driver::{call, device_count};
use crate::error::{Error, ErrorCode, Result};

/// A GPU's UUID, shown as `nvidia-smi -L` shows it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuUuid(pub [u8; 16]);

impl fmt::Display for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(f, "GPU-")?;
        for (i, byte) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                write!(f, "-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The UUID of this process's device `ordinal`.
pub fn device_uuid(ordinal: i32) -> Result<GpuUuid> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: `dev` is a valid out-pointer.
    call("cuDeviceGet", || unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: `uuid` is a valid out-pointer to a CUuuid; `dev` came from cuDeviceGet.
    call("cuDeviceGetUuid_v2", || unsafe {
        sys::cuDeviceGetUuid_v2(&mut uuid, dev)
    })?;
    Ok(GpuUuid(uuid.bytes.map(|c| c as u8)))
}

/// The GPUs this process sees, in ordinal order; `Err` says why none can be listed (no
/// driver, no device), for the refusal message.
pub fn visible_gpus() -> std::result::Result<Vec<GpuUuid>, String> {
    let n = device_count().map_err(|e| e.message().to_owned())?;
    (0..n)
        .map(|i| device_uuid(i).map_err(|e| e.message().to_owned()))
        .collect()
}

/// Requested device meaning "the publisher's GPU, whatever its ordinal is here".
pub const DEVICE_AUTO: i32 = -1;

/// This process's ordinal of the GPU a publisher announced.
///
/// - `announced` None (a publisher that does not announce it): the requested ordinal, or 0
///   for [`DEVICE_AUTO`], as before the extension existed.
/// - `requested` [`DEVICE_AUTO`]: the ordinal whose UUID is `announced`.
/// - `requested` N: N, if it is that GPU; otherwise refused, naming both UUIDs.
///
/// `visible` is [`visible_gpus`] (a parameter so the decision can be tested without GPUs).
/// Refusals are `ErrorCode::NotFound`.
pub fn resolve_device(
    announced: Option<GpuUuid>,
    requested: i32,
    visible: std::result::Result<Vec<GpuUuid>, String>,
) -> Result<i32> {
    let Some(want) = announced else {
        return Ok(requested.max(0));
    };
    let env = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("CUDA_VISIBLE_DEVICES={v:?}"),
        Err(_) => "CUDA_VISIBLE_DEVICES unset".to_owned(),
    };
    let list = match &visible {
        Ok(v) if v.is_empty() => "none".to_owned(),
        Ok(v) => v
            .iter()
            .enumerate()
            .map(|(i, u)| format!("{i} = {u}"))
            .collect::<Vec<_>>()
            .join(", "),
        Err(why) => format!("none ({why})"),
    };
    let found = visible
        .as_ref()
        .ok()
        .and_then(|v| v.iter().position(|u| *u == want));
    let requested_uuid = usize::try_from(requested)
        .ok()
        .and_then(|r| visible.as_ref().ok()?.get(r).copied());
    match (found, requested) {
        (Some(i), DEVICE_AUTO) => Ok(i as i32),
        (Some(i), r) if i as i32 == r => Ok(r),
        (Some(i), r) => Err(Error::new(
            ErrorCode::NotFound,
            format!(
                "device {r} of this process is {}, but the publisher's ring is on {want} \
                 (this process's device {i}); ask for device {i} or leave the device unset \
                 (visible GPUs: {list}; {env})",
                requested_uuid.map_or("no GPU".to_owned(), |u| u.to_string()),
            ),
        )),
        (None, r) => Err(Error::new(
            ErrorCode::NotFound,
            format!(
                "the publisher's ring is on {want}, which this process cannot see{}; \
                 visible GPUs: {list}; {env} (containers: pass that GPU in, e.g. \
                 --gpus device={want})",
                match (r, requested_uuid) {
                    (DEVICE_AUTO, _) => String::new(),
                    (r, Some(u)) => format!(" (device {r} here is {u})"),
                    (r, None) => format!(" (there is no device {r} here)"),
                }
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: GpuUuid = GpuUuid([0xA0; 16]);
    const B: GpuUuid = GpuUuid([0xB1; 16]);
    const C: GpuUuid = GpuUuid([0xC2; 16]);

    #[test]
    fn uuids_print_like_nvidia_smi() {
        let mut b = [0u8; 16];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 * 0x11;
        }
        assert_eq!(
            GpuUuid(b).to_string(),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }

    #[test]
    fn the_announced_gpu_is_found_whatever_its_ordinal() {
        // The publisher's GPU B is this process's device 1 (renumbered).
        assert_eq!(
            resolve_device(Some(B), DEVICE_AUTO, Ok(vec![A, B])).unwrap(),
            1
        );
        assert_eq!(resolve_device(Some(B), 1, Ok(vec![A, B])).unwrap(), 1);
        // No announcement (an older publisher): the ordinal as asked, 0 for auto.
        assert_eq!(resolve_device(None, DEVICE_AUTO, Ok(vec![])).unwrap(), 0);
        assert_eq!(resolve_device(None, 3, Err("no driver".into())).unwrap(), 3);
    }

    #[test]
    fn another_gpu_or_an_invisible_one_is_refused_naming_both() {
        let e = resolve_device(Some(B), 0, Ok(vec![A, B])).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound);
        let m = e.message();
        assert!(
            m.contains(&A.to_string()) && m.contains(&B.to_string()),
            "{m}"
        );
        assert!(m.contains("device 1"), "{m}");

        let e = resolve_device(Some(C), 0, Ok(vec![A, B])).unwrap_err();
        let m = e.message();
        assert!(
            m.contains(&C.to_string()) && m.contains(&A.to_string()),
            "{m}"
        );
        assert!(m.contains("cannot see"), "{m}");

        let e = resolve_device(Some(C), DEVICE_AUTO, Err("no CUDA driver".into())).unwrap_err();
        assert!(e.message().contains("no CUDA driver"), "{}", e.message());
        assert!(e.message().contains(&C.to_string()));
    }
}
