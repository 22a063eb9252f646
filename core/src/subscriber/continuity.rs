//! Timestamps that keep increasing across a publisher restart (`reconnect`). A
//! restarted publisher starts its own clock again (FFmpeg: pts from 0), but a recorder that
//! muxes what it reads needs monotonic timestamps. After a restart the first timestamp is
//! moved, when it would not be later than the last one delivered, to the last one plus the
//! last step seen; every later timestamp of that publisher moves by the same amount.

/// One timeline (frames, or packets) of a subscriber.
#[derive(Debug, Clone, Default)]
pub(crate) struct Continuity {
    /// Added to every timestamp of the current publisher.
    shift: i64,
    /// The last timestamp delivered (after the shift) and the step before it.
    last: Option<i64>,
    step: i64,
    /// The latest presentation time delivered (after the shift), for packets whose pts runs
    /// ahead of their dts (B-frames): a restart must not present anything before it either.
    max_pts: Option<i64>,
    /// A restart happened: the next timestamp decides the new shift.
    pending: bool,
}

/// Step assumed when none was seen yet (1 ms: below any real frame interval).
const DEFAULT_STEP: i64 = 1_000_000;

impl Continuity {
    /// The publisher was replaced by a new one: re-anchor on its next timestamp.
    pub fn restarted(&mut self) {
        self.pending = true;
    }

    /// The shift for the next item, whose anchor timestamp (frames: pts) is `anchor` (None:
    /// the item has none, it keeps the current shift).
    pub fn shift_for(&mut self, anchor: Option<i64>) -> i64 {
        self.shift_for_packet(anchor, anchor)
    }

    /// The shift for an item with decoding time `anchor` (packets: dts, else pts) and
    /// presentation time `pts`: after a restart both land after everything delivered before.
    pub fn shift_for_packet(&mut self, anchor: Option<i64>, pts: Option<i64>) -> i64 {
        let Some(t) = anchor else {
            return self.shift;
        };
        if self.pending {
            self.pending = false;
            if let Some(last) = self.last {
                let step = if self.step > 0 {
                    self.step
                } else {
                    DEFAULT_STEP
                };
                let mut need = last.saturating_add(step).saturating_sub(t);
                if let (Some(max), Some(p)) = (self.max_pts, pts) {
                    need = need.max(max.saturating_add(step).saturating_sub(p));
                }
                self.shift = self.shift.max(need);
            }
        }
        let out = t.saturating_add(self.shift);
        if let Some(last) = self.last {
            if out > last {
                self.step = out - last;
            }
        }
        self.last = Some(out);
        if let Some(p) = pts {
            let p = p.saturating_add(self.shift);
            self.max_pts = Some(self.max_pts.map_or(p, |m| m.max(p)));
        }
        self.shift
    }
}

/// `ts + shift`, leaving "no timestamp" (`NO_PTS`) alone.
pub(crate) fn shifted(ts: i64, shift: i64) -> i64 {
    if ts == crate::wire::NO_PTS {
        ts
    } else {
        ts.saturating_add(shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_clock_continues_after_the_last_timestamp() {
        let mut c = Continuity::default();
        let mut out = Vec::new();
        for t in [0, 40, 80, 120] {
            out.push(t + c.shift_for(Some(t)));
        }
        // The new publisher starts again at 0.
        c.restarted();
        for t in [0, 40, 80] {
            out.push(t + c.shift_for(Some(t)));
        }
        assert_eq!(out, [0, 40, 80, 120, 160, 200, 240]);
        // The second publisher's timestamps moved by 160 (120 + one step - 0).
        // A second restart, with a clock that is already ahead: the shift stays.
        c.restarted();
        let ahead = 10_000;
        assert_eq!(ahead + c.shift_for(Some(ahead)), ahead + 160);
        // Items without a timestamp keep the shift.
        assert_eq!(c.shift_for(None), 160);
    }

    /// B-frames: pts runs ahead of dts. After a restart the first keyframe's pts must land
    /// after the latest pts delivered, not only its dts after the last dts (found by the
    /// Matroska recording of the reconnect test: a repeated pts).
    #[test]
    fn reordered_packets_do_not_present_before_the_restart() {
        let mut c = Continuity::default();
        // A pts far ahead of its dts (200 at dts 0), then dts 40.
        c.shift_for_packet(Some(0), Some(200));
        c.shift_for_packet(Some(40), Some(40));
        c.restarted();
        // The new publisher's keyframe: dts 0, pts 0. Its dts alone would need 80; its pts
        // must come after 200 (+ a step of 40).
        let shift = c.shift_for_packet(Some(0), Some(0));
        assert_eq!(shift, 240);
        // Without reordering the dts decides, as before.
        let mut c = Continuity::default();
        c.shift_for_packet(Some(0), Some(0));
        c.shift_for_packet(Some(40), Some(40));
        c.restarted();
        assert_eq!(c.shift_for_packet(Some(0), Some(0)), 80);
    }

    #[test]
    fn no_history_means_no_shift_and_no_pts_stays_none() {
        let mut c = Continuity::default();
        c.restarted();
        assert_eq!(c.shift_for(Some(5)), 0);
        assert_eq!(shifted(crate::wire::NO_PTS, 99), crate::wire::NO_PTS);
        assert_eq!(shifted(1, 99), 100);
    }
}
