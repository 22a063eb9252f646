//! Reading packets: [`Subscriber::next_packet`], the retired packet rings first, timestamps
//! kept increasing across a restarted publisher.

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::packet_ring::{PacketInfo, PacketReaderStats, PacketRingReader};
use crate::wire::{NO_PTS, PACKET_FLAG_DISCONTINUITY};

use super::continuity;
use super::end::EndReason;
use super::state::{Subscriber, WAIT_SLICE};

impl Subscriber {
    fn packet_reader(&mut self) -> Result<&mut PacketRingReader> {
        self.packets.as_mut().ok_or_else(|| {
            Error::new(
                ErrorCode::NotFound,
                "this subscriber did not ask for packets",
            )
        })
    }

    /// The packet ring's codec (`AV_CODEC_ID_*`).
    pub fn packet_codec_id(&self) -> Option<u32> {
        self.packets.as_ref().map(PacketRingReader::codec_id)
    }

    /// The packet ring's extradata (Annex B SPS/PPS/VPS, or the AV1 sequence header).
    pub fn packet_extradata(&mut self) -> Result<Vec<u8>> {
        self.check_here()?;
        self.packet_reader()?.extradata()
    }

    /// The packet reader's counters (None: no packets subscribed).
    pub fn packet_stats(&self) -> Option<PacketReaderStats> {
        self.packets.as_ref().map(PacketRingReader::stats)
    }

    /// The next packet into `out` (§10.7 with R8/R9/R29): the first one is a keyframe;
    /// after an overrun the reader re-anchors on the newest keyframe and flags the packet
    /// DISCONTINUITY. TIMEOUT, or DISCONNECTED at the end of the stream.
    pub fn next_packet(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<u8>,
    ) -> Result<PacketInfo> {
        self.next_packet_into(timeout, out)
    }

    /// `next_packet` copying the payload once, straight into the buffer `sink` hands out
    /// ([`PacketRingReader::next_packet_into`]).
    pub fn next_packet_into(
        &mut self,
        timeout: Option<Duration>,
        out: &mut dyn crate::packet_ring::PacketSink,
    ) -> Result<PacketInfo> {
        self.check_here()?;
        self.packet_reader()?;
        if let Some(e) = &self.packets_ended {
            return Err(e.clone());
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let got = self.read_packet(deadline, out);
        if let Err(e) = &got {
            if self.is_end(e) {
                self.packets_ended = Some(e.clone());
                self.mark_ended();
            }
        }
        got
    }

    fn read_packet(
        &mut self,
        deadline: Option<Instant>,
        out: &mut dyn crate::packet_ring::PacketSink,
    ) -> Result<PacketInfo> {
        loop {
            self.poll_connection();
            if self.new_ring {
                // Its socket is the old ring's: the new connection carries the liveness. The
                // old ring's frames stay for the frame reads.
                self.reopen_or_end(deadline)?;
            }
            if let Some(got) = self.next_retired_packet(&mut *out) {
                return got.map(|info| self.delivered_packet(info));
            }
            let closing = self.closing.clone();
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
                None => WAIT_SLICE,
            };
            // Once the connection is closing, only what is already published is read.
            let slice = if closing.is_some() {
                Duration::ZERO
            } else {
                slice
            };
            match self
                .packet_reader()?
                .next_packet_into(Some(slice), &mut *out)
            {
                Err(e) if e.code() == ErrorCode::Timeout => {
                    if closing.is_some() {
                        // Drained: a restarted publisher (`reconnect`), or the end.
                        self.reopen_or_end(deadline)?;
                        continue;
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                }
                // The packet ring's own end (its shutdown flag): as a closed connection.
                Err(e)
                    if e.code() == ErrorCode::Disconnected && self.options.reconnect.is_some() =>
                {
                    self.close(e, Some(EndReason::Shutdown));
                    self.reopen_or_end(deadline)?;
                }
                // Published after the end: not for this subscriber; drained.
                Ok(info) if self.packets_until.is_some_and(|until| info.seq > until) => {
                    self.reopen_or_end(deadline)?;
                }
                Ok(info) => return Ok(self.delivered_packet(info)),
                other => return other,
            }
        }
    }

    /// A packet on its way out: timestamps kept increasing across restarts, the first of a
    /// restarted publisher flagged DISCONTINUITY.
    fn delivered_packet(&mut self, mut info: PacketInfo) -> PacketInfo {
        let anchor = [info.dts_ns, info.pts_ns]
            .into_iter()
            .find(|t| *t != NO_PTS);
        let pts = Some(info.pts_ns).filter(|t| *t != NO_PTS);
        let shift = self.packet_times.shift_for_packet(anchor, pts);
        info.pts_ns = continuity::shifted(info.pts_ns, shift);
        info.dts_ns = continuity::shifted(info.dts_ns, shift);
        if std::mem::take(&mut self.packet_gap) {
            info.flags |= PACKET_FLAG_DISCONTINUITY;
        }
        info
    }
}
