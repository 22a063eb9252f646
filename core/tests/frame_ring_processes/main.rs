//! Frame ring across processes (host memory): many subscribers, both policies, crashes,
//! hostile peers, leaks. Child processes are this test binary re-executed in a role
//! (`test_support::child`, see `child_entry`; the roles are in roles.rs).
//!
//! Files by scenario: fanout.rs (many subscribers, both policies), crashes.rs (SIGKILLed
//! peers), peers.rs (raw and hostile protocol peers, refused users, PING, readiness),
//! resources.rs (descriptor and mapping leaks, an idle subscriber's CPU).

mod crashes;
mod fanout;
mod peers;
mod resources;
mod roles;

use cuframes_test_support::child;

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    match role.as_str() {
        "subscriber" => roles::child_subscriber(&key),
        "publisher" => roles::child_publisher(&key),
        "leak_check" => resources::leak_check(),
        "refused_subscriber" => roles::refused_subscriber(&key),
        other => panic!("unknown role {other}"),
    }
}
