//! The Prometheus text exposition, parsed into samples, and lookups in it.

use std::collections::{BTreeMap, BTreeSet};

/// One sample of the exposition: a metric name, its labels and its value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parse the OpenMetrics text: every sample, checking that each belongs to a family with
/// a TYPE line and that the body ends with `# EOF`.
pub fn parse_metrics(body: &str) -> Vec<Sample> {
    assert!(body.ends_with("# EOF\n"), "no EOF marker:\n{body}");
    let mut families = BTreeSet::new();
    let mut samples = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() && b[i] != b'{' && b[i] != b' ' {
            i += 1;
        }
        let name = line[..i].to_owned();
        let mut labels = BTreeMap::new();
        if b[i] == b'{' {
            i += 1;
            while b[i] != b'}' {
                let eq = i + line[i..].find('=').unwrap();
                let lname = line[i..eq].to_owned();
                assert_eq!(b[eq + 1], b'"', "{line}");
                i = eq + 2;
                let mut v = Vec::new();
                loop {
                    match b[i] {
                        b'"' => break,
                        b'\\' => {
                            v.push(match b[i + 1] {
                                b'n' => b'\n',
                                c @ (b'\\' | b'"') => c,
                                c => panic!("bad escape \\{} in {line}", c as char),
                            });
                            i += 2;
                        }
                        c => {
                            v.push(c);
                            i += 1;
                        }
                    }
                }
                labels.insert(lname, String::from_utf8(v).unwrap());
                i += 1;
                if b[i] == b',' {
                    i += 1;
                }
            }
            i += 1;
        }
        assert_eq!(b[i], b' ', "{line}");
        let value: f64 = line[i + 1..].trim().parse().unwrap();
        let family = ["_total", ""]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| families.contains(*f)));
        assert!(family.is_some(), "{name} has no TYPE line");
        assert!(name.starts_with("cuframes_"), "{name}");
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    samples
}

/// The samples of `name` whose labels include every pair of `want`.
pub fn find<'a>(s: &'a [Sample], name: &str, want: &[(&str, &str)]) -> Vec<&'a Sample> {
    s.iter()
        .filter(|x| {
            x.name == name
                && want
                    .iter()
                    .all(|(k, v)| x.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

/// The one value of `name` with `want`, or None when there is none.
pub fn value(s: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let v = find(s, name, want);
    assert!(v.len() <= 1, "{name} {want:?} more than once: {v:?}");
    v.first().map(|x| x.value)
}

pub fn must(s: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    value(s, name, want).unwrap_or_else(|| panic!("no {name} {want:?}"))
}
