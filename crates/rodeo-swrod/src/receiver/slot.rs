//! A window slot of the aggregation: [`HotSlot`], what every packet touches (32 bytes, two
//! per cache line), and [`ColdSlot`], the block it owns and the rarely touched fields; and
//! [`copy_bytes`], the fixed-size packet copy behind [`HotSlot::put`].

use rodeo_format::fragment::Status;
use rodeo_memory::Chunk;

use super::PACKET_HEADER_BYTES;

/// Copies `n` bytes with fixed-size moves: two overlapping moves of the largest power of two
/// not above `n` (up to 64), both loads before both stores, so the overlap is exact; a
/// `memcpy` call for longer or tiny packets.
///
/// # Safety
///
/// `src` is valid for reading and `dst` for writing `n` bytes, and the ranges do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    #[inline(always)]
    unsafe fn two<const N: usize>(dst: *mut u8, src: *const u8, n: usize) {
        // SAFETY: N <= n, so both N-byte ranges lie inside the caller's n bytes.
        unsafe {
            let a = src.cast::<[u8; N]>().read_unaligned();
            let b = src.add(n - N).cast::<[u8; N]>().read_unaligned();
            dst.cast::<[u8; N]>().write_unaligned(a);
            dst.add(n - N).cast::<[u8; N]>().write_unaligned(b);
        }
    }
    // SAFETY: each arm's size is at most n; the caller guarantees the rest.
    unsafe {
        match n {
            33..=64 => two::<32>(dst, src, n),
            65..=128 => two::<64>(dst, src, n),
            16..=32 => two::<16>(dst, src, n),
            8..=15 => two::<8>(dst, src, n),
            4..=7 => two::<4>(dst, src, n),
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// What every packet of a window slot touches (see the parent module's docs): 32 bytes.
#[repr(C, align(32))]
pub(super) struct HotSlot {
    /// Where the next packet goes in the slot's block; null while the slot is closed.
    pub(super) wp: *mut u8,
    /// Arrival bits of local E-links below 63; bit 63 ([`HI_MARK`](super::HI_MARK)) once any
    /// other arrived.
    pub(super) bits: u64,
    /// Bytes left for packets before the block's trailer reserve; 0 while closed, so that the
    /// first packet of an event always takes the slow path, which opens the slot.
    pub(super) room: u32,
    /// Packets whose BCID differs from the first one's.
    pub(super) mismatches: u32,
    /// BCID of the slot's first packet.
    pub(super) bcid: u16,
    /// The last local E-link from 63 on that was placed (0: none yet).
    pub(super) last_hi: u16,
    /// A packet arrived after one of a higher local E-link.
    pub(super) unordered: bool,
    /// The slot holds an event (opened by its first packet, closed when finalized).
    pub(super) open: bool,
}

impl HotSlot {
    /// A closed slot: no block, no room, so the next packet opens it.
    pub(super) const CLOSED: HotSlot = HotSlot {
        wp: std::ptr::null_mut(),
        bits: 0,
        room: 0,
        mismatches: 0,
        bcid: 0,
        last_hi: 0,
        unordered: false,
        open: false,
    };

    /// Copies one packet behind its packet header at the write position and advances it.
    ///
    /// # Safety
    ///
    /// The slot is open and `need = 8 + data.len()` rounded up to 4 is at most `room`.
    #[inline(always)]
    pub(super) unsafe fn put(&mut self, need: usize, flags: u16, elink: u16, data: &[u8]) {
        let wp = self.wp;
        let padded = need - PACKET_HEADER_BYTES;
        // SAFETY: an open slot's `wp .. wp + room` lies inside its block (open_slot sets both
        // from the block, every write advances both by the same amount), and the caller checked
        // `need <= room`. The block is 8-byte aligned and every `need` a multiple of 4, so `wp`
        // is 4-byte aligned. The zero word (padding of the last data word; the E-link word, when
        // the packet is empty) is written first, then overwritten where data and header go.
        unsafe {
            wp.add(4 + padded).cast::<u32>().write(0);
            wp.cast::<u32>().write(need as u32 | u32::from(flags) << 16);
            wp.add(4).cast::<u32>().write(u32::from(elink));
            copy_bytes(wp.add(PACKET_HEADER_BYTES), data.as_ptr(), data.len());
            self.wp = wp.add(need);
        }
        self.room -= need as u32;
    }
}

/// The rest of a window slot: the block it owns and the rarely touched fields.
pub(super) struct ColdSlot<'p> {
    pub(super) chunk: Option<Chunk<'p>>,
    pub(super) status: Status,
    /// Of the E-links arrived (the slot's arrival bits), those whose packet did not fit.
    pub(super) dropped: u32,
    pub(super) opened_at: u64,
}

impl ColdSlot<'_> {
    /// A closed slot's rest: no block.
    pub(super) fn closed() -> Self {
        ColdSlot {
            chunk: None,
            status: Status::OK,
            dropped: 0,
            opened_at: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_bytes;

    /// Every length up to past the inline arms, at aligned and unaligned sources and
    /// destinations: exactly the `n` bytes are copied, and nothing on either side is touched.
    #[test]
    fn copy_bytes_copies_exactly_n_bytes_at_any_length_and_alignment() {
        let src: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        for n in 0..=300 {
            for (so, d_off) in [(0, 0), (1, 3), (3, 1), (4, 8)] {
                let mut dst = vec![0xAAu8; 320];
                // SAFETY: `so + n <= 304 <= 400` bytes of `src` and `d_off + n <= 308 <= 320`
                // of `dst` are in bounds, and the two vectors do not overlap.
                unsafe { copy_bytes(dst.as_mut_ptr().add(d_off), src.as_ptr().add(so), n) };
                assert_eq!(&dst[d_off..d_off + n], &src[so..so + n], "n {n}");
                assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "n {n}: before");
                assert!(dst[d_off + n..].iter().all(|&b| b == 0xAA), "n {n}: after");
            }
        }
    }
}
