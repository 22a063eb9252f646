//! The C conformance fixture of protocol-v4.md §8 (`c/layout.c`) passes.

#[test]
fn c_fixture_has_no_failures() {
    let (failures, report) = cuframes_conformance::run_c_fixture();
    assert_eq!(failures, 0, "C conformance fixture failed:\n{report}");
    // The fixture really ran: its summary line counts hundreds of checks.
    let checks: u32 = report
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("layout.c: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in the report:\n{report}"));
    assert!(checks > 300, "only {checks} checks ran:\n{report}");
    println!("{report}");
}
