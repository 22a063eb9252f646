//! A ring's colour description in Python: FFmpeg's names for the code points
//! (`av_color_range_name`, `av_color_primaries_name`, `av_color_transfer_name`,
//! `av_color_space_name`, `av_chroma_location_name`; see core/src/colour.rs for the numbering),
//! both ways.
//!
//! What Python sees: every key is present; a field the publisher left unspecified is None; a
//! code point FFmpeg has no name for (reserved, or newer than this table) is its int, so no
//! value is lost. The range reads "limited" / "full" (FFmpeg's "tv" / "pc"), as `to_rgb`'s
//! `range` argument does. Publishing accepts the names (and FFmpeg's aliases), ints, or None.

use cuframes_core::colour::{
    ColourInfo, MATRIX_UNSPECIFIED, PRIMARIES_UNSPECIFIED, RANGE_FULL, RANGE_LIMITED,
    RANGE_UNSPECIFIED, TRANSFER_UNSPECIFIED,
};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt};

/// FFmpeg 7.1 / 9.0 `av_color_primaries_name`, by code point (None: no name of its own).
const PRIMARIES: &[(u8, &str)] = &[
    (1, "bt709"),
    (4, "bt470m"),
    (5, "bt470bg"),
    (6, "smpte170m"),
    (7, "smpte240m"),
    (8, "film"),
    (9, "bt2020"),
    (10, "smpte428"),
    (11, "smpte431"),
    (12, "smpte432"),
    (22, "ebu3213"),
];

/// `av_color_transfer_name`.
const TRANSFER: &[(u8, &str)] = &[
    (1, "bt709"),
    (4, "bt470m"),
    (5, "bt470bg"),
    (6, "smpte170m"),
    (7, "smpte240m"),
    (8, "linear"),
    (9, "log100"),
    (10, "log316"),
    (11, "iec61966-2-4"),
    (12, "bt1361e"),
    (13, "iec61966-2-1"),
    (14, "bt2020-10"),
    (15, "bt2020-12"),
    (16, "smpte2084"),
    (17, "smpte428"),
    (18, "arib-std-b67"),
];

/// `av_color_space_name` (the YCbCr matrix).
const MATRIX: &[(u8, &str)] = &[
    (0, "gbr"),
    (1, "bt709"),
    (4, "fcc"),
    (5, "bt470bg"),
    (6, "smpte170m"),
    (7, "smpte240m"),
    (8, "ycgco"),
    (9, "bt2020nc"),
    (10, "bt2020c"),
    (11, "smpte2085"),
    (12, "chroma-derived-nc"),
    (13, "chroma-derived-c"),
    (14, "ictcp"),
    (15, "ipt-c2"),
    (16, "ycgco-re"),
    (17, "ycgco-ro"),
];

/// `av_chroma_location_name` (0 is "unspecified").
const CHROMA_LOCATION: &[(u8, &str)] = &[
    (1, "left"),
    (2, "center"),
    (3, "topleft"),
    (4, "top"),
    (5, "bottomleft"),
    (6, "bottom"),
];

/// Names accepted besides the canonical ones: FFmpeg's option aliases, and `to_rgb`'s matrix
/// names.
const RANGE_NAMES: &[(&str, u8)] = &[
    ("limited", RANGE_LIMITED),
    ("tv", RANGE_LIMITED),
    ("mpeg", RANGE_LIMITED),
    ("full", RANGE_FULL),
    ("pc", RANGE_FULL),
    ("jpeg", RANGE_FULL),
];
const MATRIX_ALIASES: &[(&str, u8)] = &[("rgb", 0), ("bt601", 6), ("bt2020", 9), ("ycocg", 8)];
const PRIMARIES_ALIASES: &[(&str, u8)] = &[("bt601", 6), ("jedec-p22", 22)];

/// One field of the description: its key, unspecified value, names and aliases.
struct Field {
    key: &'static str,
    unspecified: u8,
    names: &'static [(u8, &'static str)],
    aliases: &'static [(&'static str, u8)],
}

const FIELDS: [Field; 5] = [
    Field {
        key: "range",
        unspecified: RANGE_UNSPECIFIED,
        names: &[],
        aliases: RANGE_NAMES,
    },
    Field {
        key: "primaries",
        unspecified: PRIMARIES_UNSPECIFIED,
        names: PRIMARIES,
        aliases: PRIMARIES_ALIASES,
    },
    Field {
        key: "transfer",
        unspecified: TRANSFER_UNSPECIFIED,
        names: TRANSFER,
        aliases: &[],
    },
    Field {
        key: "matrix",
        unspecified: MATRIX_UNSPECIFIED,
        names: MATRIX,
        aliases: MATRIX_ALIASES,
    },
    Field {
        key: "chroma_location",
        unspecified: 0,
        names: CHROMA_LOCATION,
        aliases: &[],
    },
];

impl Field {
    fn name(&self, code: u8) -> Option<&'static str> {
        if self.key == "range" {
            return match code {
                RANGE_LIMITED => Some("limited"),
                RANGE_FULL => Some("full"),
                _ => None,
            };
        }
        self.names.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
    }

    /// The Python value of `code`: its name, None when unspecified, else the int.
    fn to_py<'py>(&self, py: Python<'py>, code: u8) -> PyResult<Bound<'py, PyAny>> {
        if code == self.unspecified {
            return Ok(py.None().into_bound(py));
        }
        Ok(match self.name(code) {
            Some(n) => n.into_pyobject(py)?.into_any(),
            None => code.into_pyobject(py)?.into_any(),
        })
    }

    fn parse(&self, v: &Bound<'_, PyAny>) -> PyResult<u8> {
        if v.is_none() {
            return Ok(self.unspecified);
        }
        if v.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "colour[{:?}] must be a name, an int code point or None, not a bool",
                self.key
            )));
        }
        if v.is_instance_of::<PyInt>() || v.hasattr("__index__")? {
            // An int of the wrong value, not of the wrong type: code points are one byte
            // (H.273), and the conversion's OverflowError would not say so.
            return v.extract::<u8>().map_err(|e| {
                if !e.is_instance_of::<PyOverflowError>(v.py()) {
                    return e; // `__index__` itself failed: its own error
                }
                let shown = v.str().map_or_else(|_| "?".to_string(), |s| s.to_string());
                PyValueError::new_err(format!(
                    "colour[{:?}]: code point {shown} is out of range 0..=255 (H.273)",
                    self.key
                ))
            });
        }
        if let Ok(code) = v.extract::<u8>() {
            return Ok(code);
        }
        let Ok(text) = v.extract::<String>() else {
            return Err(PyTypeError::new_err(format!(
                "colour[{:?}] must be a name, an int code point or None",
                self.key
            )));
        };
        let wanted = text.to_ascii_lowercase().replace('_', "-");
        if wanted == "unknown" || wanted == "unspecified" {
            return Ok(self.unspecified);
        }
        let named = self
            .names
            .iter()
            .find(|(_, n)| *n == wanted)
            .map(|(c, _)| *c);
        let aliased = self
            .aliases
            .iter()
            .find(|(n, _)| *n == wanted)
            .map(|(_, c)| *c);
        named.or(aliased).ok_or_else(|| {
            let mut known: Vec<&str> = self.names.iter().map(|(_, n)| *n).collect();
            known.extend(self.aliases.iter().map(|(n, _)| *n));
            PyValueError::new_err(format!(
                "colour[{:?}]: unknown name {text:?} (FFmpeg's names: {})",
                self.key,
                known.join(", ")
            ))
        })
    }

    fn get(&self, c: &ColourInfo) -> u8 {
        match self.key {
            "range" => c.range,
            "primaries" => c.primaries,
            "transfer" => c.transfer,
            "matrix" => c.matrix,
            _ => c.chroma_location,
        }
    }

    fn set(&self, c: &mut ColourInfo, v: u8) {
        match self.key {
            "range" => c.range = v,
            "primaries" => c.primaries = v,
            "transfer" => c.transfer = v,
            "matrix" => c.matrix = v,
            _ => c.chroma_location = v,
        }
    }
}

/// `frame.colour`: every key, by name (see the module's rules); `sar` a (num, den) tuple, or
/// None when unknown.
pub(crate) fn to_dict<'py>(py: Python<'py>, c: &ColourInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for f in &FIELDS {
        d.set_item(f.key, f.to_py(py, f.get(c))?)?;
    }
    d.set_item("sar", c.sample_aspect_ratio())?;
    Ok(d)
}

/// `Publisher(colour=...)`: names, ints or None per key (missing keys: unspecified), the
/// inverse of [`to_dict`].
pub(crate) fn from_dict(d: &Bound<'_, PyDict>) -> PyResult<ColourInfo> {
    let mut c = ColourInfo::default();
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        if k == "sar" {
            c.sar = if v.is_none() { (0, 1) } else { v.extract()? };
            continue;
        }
        let Some(f) = FIELDS.iter().find(|f| f.key == k) else {
            return Err(PyValueError::new_err(format!(
                "colour has no key {k:?} (range, primaries, transfer, matrix, \
                 chroma_location, sar)"
            )));
        };
        f.set(&mut c, f.parse(&v)?);
    }
    Ok(c)
}
