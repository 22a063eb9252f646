//! Rejoin after a kick, per uid (STRICT_WAIT, R11/R27). A subscriber that never ACKs costs
//! a STRICT_WAIT publisher one `ack_timeout` of stalled publishing before it is kicked; one
//! that subscribes again at once after every kick would hold the publisher at a few frames
//! per timeout for as long as it likes. So a uid whose frame subscriber was kicked waits
//! before its next frame subscription is admitted:
//!
//! - the first kick: one `ack_timeout`; each further kick (of a subscriber admitted after
//!   the previous wait ended) doubles it, up to [`MAX_DOUBLINGS`] doublings and never more
//!   than [`BACKOFF_CAP`] (or one `ack_timeout`, if that is longer): a slow but honest
//!   reader always gets back in, after a bounded wait;
//! - a uid none of whose subscribers was kicked for twice its longest wait is forgotten
//!   (it behaves again: the next kick starts over at one `ack_timeout`).
//!
//! Kicks of subscribers admitted before the wait started (several subscribers of one uid,
//! kicked in one wait) count once. Root and the publisher's own uid are not held back:
//! they can stop the publisher anyway, and the host's own STRICT_WAIT readers come back at
//! once. The record is the publisher's (which bit it kicked, the uid SO_PEERCRED gave),
//! never a subscriber's word.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Doublings of the wait at most: 32 × `ack_timeout`.
pub const MAX_DOUBLINGS: u32 = 5;
/// The longest wait (unless `ack_timeout` itself is longer).
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// Uids remembered at most: each kicked uid costs one entry, and the oldest are forgotten
/// first when there are more (uids are few on a host; this only bounds the map).
const MAX_UIDS: usize = 1024;

struct Record {
    /// Kicks counted (escalations).
    kicks: u32,
    /// Its next frame subscription is admitted from then on.
    until: Instant,
    /// The last kick of one of its subscribers (also one that did not escalate).
    last_kick: Instant,
    /// The current wait and its bound, for the forgetting rule.
    backoff: Duration,
    cap: Duration,
}

/// What the server remembers of kicked uids.
#[derive(Default)]
pub struct Rejoins {
    by_uid: HashMap<u32, Record>,
}

/// A refused rejoin: how long is left, and how many kicks led to it.
#[derive(Debug, PartialEq, Eq)]
pub struct Backoff {
    pub left: Duration,
    pub kicks: u32,
    pub wait: Duration,
}

impl Backoff {
    pub fn message(&self, uid: u32) -> String {
        format!(
            "uid {uid}'s frame subscribers missed their ACKs (consumer_ack_timeout) {} \
             time(s): its next frame subscription is admitted in {} ms (rejoin backoff: one \
             ack timeout, doubled per kick, at most 32 of them or {} s; forgotten after twice \
             that without a kick)",
            self.kicks,
            self.left.as_millis().max(1),
            BACKOFF_CAP.as_secs()
        )
    }
}

fn cap_for(ack_timeout: Duration) -> Duration {
    (ack_timeout * (1 << MAX_DOUBLINGS))
        .min(BACKOFF_CAP)
        .max(ack_timeout)
}

impl Rejoins {
    /// A frame subscriber of `uid` was kicked now by a ring with `ack_timeout`.
    pub fn kicked(&mut self, uid: u32, now: Instant, ack_timeout: Duration) {
        self.forget_old(now);
        let cap = cap_for(ack_timeout);
        match self.by_uid.get_mut(&uid) {
            // Admitted before the current wait began: the same misbehaviour, counted once.
            Some(r) if now < r.until => r.last_kick = now,
            Some(r) => {
                r.kicks += 1;
                let doublings = (r.kicks - 1).min(MAX_DOUBLINGS);
                r.backoff = (ack_timeout * (1 << doublings)).min(cap);
                r.cap = cap;
                r.until = now + r.backoff;
                r.last_kick = now;
            }
            None => {
                if self.by_uid.len() >= MAX_UIDS {
                    let oldest = self
                        .by_uid
                        .iter()
                        .min_by_key(|(_, r)| r.last_kick)
                        .map(|(u, _)| *u);
                    if let Some(u) = oldest {
                        self.by_uid.remove(&u);
                    }
                }
                self.by_uid.insert(
                    uid,
                    Record {
                        kicks: 1,
                        until: now + ack_timeout,
                        last_kick: now,
                        backoff: ack_timeout,
                        cap,
                    },
                );
            }
        }
    }

    /// Must a frame subscription of `uid` wait now? None: admit it.
    pub fn check(&mut self, uid: u32, now: Instant) -> Option<Backoff> {
        self.forget_old(now);
        let r = self.by_uid.get(&uid)?;
        (now < r.until).then(|| Backoff {
            left: r.until - now,
            kicks: r.kicks,
            wait: r.backoff,
        })
    }

    /// Uids that behaved for twice their longest wait start over.
    fn forget_old(&mut self, now: Instant) {
        self.by_uid
            .retain(|_, r| now.saturating_duration_since(r.last_kick) < r.cap * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(100);

    #[test]
    fn the_wait_doubles_per_kick_up_to_its_cap_and_is_forgotten_after_good_behaviour() {
        let mut r = Rejoins::default();
        let t0 = Instant::now();
        assert_eq!(r.check(7, t0), None, "never kicked");
        r.kicked(7, t0, T);
        assert_eq!(r.check(7, t0).unwrap().left, T);
        assert_eq!(r.check(8, t0), None, "another uid is not held back");
        // Another subscriber of the same uid kicked in the same wait: counted once.
        r.kicked(7, t0 + T / 2, T);
        assert_eq!(r.check(7, t0 + T / 2).unwrap().kicks, 1);
        let mut now = t0 + T;
        assert_eq!(r.check(7, now), None, "admitted after one ack timeout");
        let mut waits = Vec::new();
        for _ in 0..8 {
            r.kicked(7, now, T);
            let b = r.check(7, now).unwrap();
            waits.push(b.wait);
            now += b.wait;
            assert_eq!(r.check(7, now), None);
        }
        let ms: Vec<u128> = waits.iter().map(|w| w.as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 1600, 3200, 3200, 3200, 3200]);
        // Behaving (no kick) for twice the cap: the next kick starts over.
        now += cap_for(T) * 2;
        r.kicked(7, now, T);
        assert_eq!(r.check(7, now).unwrap().wait, T);
    }

    #[test]
    fn the_wait_is_bounded_also_for_long_ack_timeouts() {
        let mut r = Rejoins::default();
        let mut now = Instant::now();
        let long = Duration::from_secs(10);
        for _ in 0..10 {
            r.kicked(1, now, long);
            let b = r.check(1, now).unwrap();
            assert!(b.wait <= BACKOFF_CAP, "{:?}", b.wait);
            now += b.wait;
        }
        let huge = BACKOFF_CAP * 2;
        r.kicked(2, now, huge);
        assert_eq!(
            r.check(2, now).unwrap().wait,
            huge,
            "never below one timeout"
        );
    }

    /// "Forgotten after twice its longest wait": at exactly 2 × cap after its last kick a
    /// uid starts over; a moment earlier it is still remembered (its next kick doubles).
    #[test]
    fn a_uid_is_forgotten_exactly_twice_its_cap_after_its_last_kick() {
        let two_caps = cap_for(T) * 2;
        for (after, wait, kicks) in [
            (two_caps - Duration::from_nanos(1), 2 * T, 2),
            (two_caps, T, 1),
        ] {
            let mut r = Rejoins::default();
            let t0 = Instant::now();
            r.kicked(7, t0, T);
            r.kicked(7, t0 + after, T);
            let b = r.check(7, t0 + after).unwrap();
            assert_eq!(
                (b.wait, b.kicks),
                (wait, kicks),
                "kicked again {after:?} later"
            );
        }
    }

    /// The map of kicked uids is bounded: the oldest kicked is forgotten only when
    /// [`MAX_UIDS`] are remembered, never while there is room.
    #[test]
    fn kicked_uids_are_forgotten_oldest_first_only_past_the_bound() {
        let mut r = Rejoins::default();
        let t0 = Instant::now();
        let at = |i: u32| t0 + Duration::from_micros(u64::from(i));
        for uid in 0..MAX_UIDS as u32 {
            r.kicked(uid, at(uid), T);
        }
        let now = at(MAX_UIDS as u32);
        assert!(
            (0..MAX_UIDS as u32).all(|uid| r.check(uid, now).is_some()),
            "every kicked uid is held back while there is room"
        );
        r.kicked(5000, now, T);
        assert_eq!(r.check(0, now), None, "the oldest kicked uid is forgotten");
        assert!(r.check(1, now).is_some() && r.check(5000, now).is_some());
    }
}
