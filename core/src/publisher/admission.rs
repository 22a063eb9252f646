//! Who may take what of the publisher's two scarce resources: pending-handshake places (the
//! server's connections that have not finished HELLO → SUBSCRIBE) and subscriber slots (the
//! 31 bits, R2). First come, first served would let one process, or a few colluding uids,
//! take all of either and lock everybody else out; the rules here keep a share for others.
//! Pure functions over the server's own records (SO_PEERCRED at accept time), never over
//! anything a peer writes.

use super::subscribers::Table;

/// Connections that have not finished their handshake, at most (protects the fd table
/// against a flood of idle connections).
pub const MAX_PENDING: usize = 64;
/// ... of them from one process, and from one uid: a flood from one peer then cannot take
/// the places of everybody else. A peer in another PID namespace has pid 0 here and is
/// counted by its uid only.
pub const MAX_PENDING_PER_PID: usize = 4;
pub const MAX_PENDING_PER_UID: usize = 16;

/// What to do with a new connection.
#[derive(Debug, PartialEq, Eq)]
pub enum PendingVerdict {
    Admit,
    /// Admit it, and drop the pending handshake at this index of the list given: the oldest
    /// one of the uid that holds the most.
    Evict(usize),
    Refuse,
}

/// May one more handshake from (`uid`, `pid`) be pending, given those pending now (`(uid,
/// pid)`, oldest first)?
///
/// When all [`MAX_PENDING`] places are taken, a newcomer whose uid holds fewer than the
/// biggest holder minus one takes the oldest place of that holder (water filling: after the
/// swap the newcomer's uid still holds no more than the holder, so the two never take a
/// place back and forth). Four uids at their cap of 16 then cannot lock a fifth out; that
/// takes about 64 distinct uids.
pub fn pending_verdict(pending: &[(u32, u32)], uid: u32, pid: u32) -> PendingVerdict {
    let of_uid = |u: u32| pending.iter().filter(|(pu, _)| *pu == u).count();
    if of_uid(uid) >= MAX_PENDING_PER_UID
        || (pid != 0 && pending.iter().filter(|(_, p)| *p == pid).count() >= MAX_PENDING_PER_PID)
    {
        return PendingVerdict::Refuse;
    }
    if pending.len() < MAX_PENDING {
        return PendingVerdict::Admit;
    }
    // The biggest holder; among equals, the one whose oldest handshake is oldest.
    let mut top: Option<(u32, usize, usize)> = None; // (uid, count, index of its oldest)
    for (i, (u, _)) in pending.iter().enumerate() {
        if top.is_some_and(|(tu, _, _)| tu == *u) {
            continue;
        }
        let n = of_uid(*u);
        if top.map_or(true, |(_, tn, _)| n > tn) {
            top = Some((*u, n, i));
        }
    }
    match top {
        Some((_, n, oldest)) if of_uid(uid) + 1 < n => PendingVerdict::Evict(oldest),
        _ => PendingVerdict::Refuse,
    }
}

/// Which option a slot refusal names.
#[derive(Debug, PartialEq, Eq)]
pub enum SlotCap {
    PerUid(usize),
    PerPid(usize),
}

impl SlotCap {
    /// The refusal a subscriber reads (TOO_MANY): the cap and the option that sets it.
    pub fn message(&self, uid: u32, pid: u32) -> String {
        match self {
            SlotCap::PerUid(n) => format!(
                "uid {uid} already holds {n} subscriber slots, the publisher's cap per uid \
                 (PublisherOptions::max_subscribers_per_uid, C max_subscribers_per_uid, \
                 FFmpeg -max_subscribers_per_uid)"
            ),
            SlotCap::PerPid(n) => format!(
                "process {pid} already holds {n} subscriber slots, the publisher's cap per \
                 process (PublisherOptions::max_subscribers_per_pid, C \
                 max_subscribers_per_pid, FFmpeg -max_subscribers_per_pid)"
            ),
        }
    }
}

/// The slot cap that (`uid`, `pid`) has reached, if any. Every bit a uid or process holds
/// counts (also one given up on and still quarantined: it is not free for others either).
/// `exempt` peers (root, the publisher's own uid) are not capped: they could stop the
/// publisher anyway.
pub fn slot_cap_reached(
    table: &Table,
    uid: u32,
    pid: u32,
    exempt: bool,
    per_uid: usize,
    per_pid: usize,
) -> Option<SlotCap> {
    if exempt {
        return None;
    }
    let of_uid = table.iter().filter(|(_, e)| e.uid == uid).count();
    if of_uid >= per_uid {
        return Some(SlotCap::PerUid(of_uid));
    }
    let of_pid = table.iter().filter(|(_, e)| e.pid == pid).count();
    if pid != 0 && of_pid >= per_pid {
        return Some(SlotCap::PerPid(of_pid));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pending_list_gives_a_newcomer_the_oldest_place_of_the_biggest_holder() {
        // Four uids at their cap of 16, four processes each.
        let pending: Vec<(u32, u32)> = (0..MAX_PENDING)
            .map(|i| (1000 + (i % 4) as u32, 10 + (i % 16) as u32))
            .collect();
        assert_eq!(pending_verdict(&pending, 5, 99), PendingVerdict::Evict(0));
        // The holders themselves cannot take places back from each other.
        assert_eq!(
            pending_verdict(&pending[1..], 1000, 98),
            PendingVerdict::Admit
        );
        let mut after = pending[1..].to_vec();
        after.push((5, 99));
        assert_eq!(pending_verdict(&after, 1000, 98), PendingVerdict::Refuse);
        // Caps per uid and per process still hold below the global one.
        assert_eq!(pending_verdict(&after, 1001, 97), PendingVerdict::Refuse);
        assert_eq!(
            pending_verdict(&[(7, 3); 4], 8, 3),
            PendingVerdict::Refuse,
            "a fifth handshake of one process"
        );
        assert_eq!(pending_verdict(&[(7, 0); 4], 7, 0), PendingVerdict::Admit);
    }

    #[test]
    fn sixty_four_distinct_uids_are_not_evicted_by_a_sixty_fifth() {
        let pending: Vec<(u32, u32)> = (0..MAX_PENDING as u32).map(|u| (u, 100 + u)).collect();
        assert_eq!(pending_verdict(&pending, 500, 9), PendingVerdict::Refuse);
        let mut two_each: Vec<(u32, u32)> = (0..32u32).map(|u| (u, 100 + u)).collect();
        two_each.extend((0..32u32).map(|u| (u, 200 + u)));
        assert_eq!(pending_verdict(&two_each, 500, 9), PendingVerdict::Evict(0));
        assert_eq!(pending_verdict(&two_each, 3, 9), PendingVerdict::Refuse);
    }

    #[test]
    fn the_place_given_up_is_the_biggest_holders_also_when_another_uid_is_older() {
        // The oldest handshake is of a uid holding one place, the next ones of a uid holding
        // 15; the biggest holders (16 each) come after them: the first of those gives up
        // its oldest place, not the owner of the oldest handshake or a smaller holder.
        let mut pending = vec![(1u32, 1u32)];
        for (uid, n) in [(2u32, 15u32), (3, 16), (4, 16), (5, 16)] {
            pending.extend((0..n).map(|i| (uid, 100 * uid + i)));
        }
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(pending_verdict(&pending, 9, 9), PendingVerdict::Evict(16));
    }
}
