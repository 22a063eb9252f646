//! The command line of `camera_reader`.

use std::path::PathBuf;
use std::time::Duration;

/// What `--help` and a wrong command line print.
pub const USAGE: &str = "usage: camera_reader KEY [--wait-publisher SECS] [--read-timeout SECS] \
                         [--cuda-device N (-1: no CUDA)] [--name NAME] [--latencies FILE]";

/// The reader's settings.
#[derive(Debug, PartialEq)]
pub struct Args {
    /// The camera's key.
    pub key: String,
    /// How long to wait for the publisher and its frame ring to appear.
    pub wait_publisher: Duration,
    /// How long a wait for one frame may last before the reader gives up.
    pub read_timeout: Duration,
    /// The CUDA device whose context is made before `ready`; None: no CUDA (a host ring).
    pub cuda_device: Option<i32>,
    /// The subscriber name operators see.
    pub name: String,
    /// Where to write `seq latency_ns` per frame.
    pub latencies: Option<PathBuf>,
}

fn seconds(flag: &str, v: Option<String>) -> Result<Duration, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e6 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{flag} {v:?}: seconds between 0 and 1000000 expected"
        )),
    }
}

/// Parses the arguments after the program name.
pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut key = None;
    let mut a = Args {
        key: String::new(),
        wait_publisher: Duration::from_secs(60),
        read_timeout: Duration::from_secs(30),
        cuda_device: Some(0),
        name: String::from("camera_reader"),
        latencies: None,
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--wait-publisher" => a.wait_publisher = seconds(&arg, it.next())?,
            "--read-timeout" => a.read_timeout = seconds(&arg, it.next())?,
            "--cuda-device" => {
                let v = it.next().ok_or("--cuda-device needs a value")?;
                a.cuda_device = match v.parse::<i32>() {
                    Ok(-1) => None,
                    Ok(n) if n >= 0 => Some(n),
                    _ => return Err(format!("--cuda-device {v:?}: an ordinal or -1 expected")),
                };
            }
            "--name" => a.name = it.next().ok_or("--name needs a value")?,
            "--latencies" => {
                a.latencies = Some(it.next().ok_or("--latencies needs a file")?.into())
            }
            "-h" | "--help" => return Err(String::from("help")),
            s if s.starts_with('-') => return Err(format!("unknown option {s:?}")),
            s if key.is_none() => key = Some(s.to_string()),
            s => return Err(format!("one key expected, got a second one: {s:?}")),
        }
    }
    a.key = key.ok_or("a key is needed")?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Args, String> {
        parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_and_flags() {
        let a = p(&["cam1"]).unwrap();
        assert_eq!(a.cuda_device, Some(0));
        assert_eq!(a.wait_publisher, Duration::from_secs(60));
        let a = p(&["--cuda-device", "-1", "cam2", "--read-timeout", "2.5"]).unwrap();
        assert_eq!((a.key.as_str(), a.cuda_device), ("cam2", None));
        assert_eq!(a.read_timeout, Duration::from_millis(2500));
    }

    #[test]
    fn wrong_command_lines_are_refused() {
        for bad in [
            &[][..],
            &["a", "b"],
            &["a", "--wait-publisher"],
            &["a", "--wait-publisher", "0"],
            &["a", "--read-timeout", "nan"],
            &["a", "--cuda-device", "-2"],
            &["a", "--frobnicate"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }
}
