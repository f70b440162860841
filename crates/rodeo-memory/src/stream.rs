//! Streaming (non-temporal) copies into memory that is mostly never read again: the store pages
//! the core thread copies the DMA input's fragments into (most are cleared unread). A plain
//! copy into such cold lines first reads each line into this core's cache (a read for
//! ownership) and stalls once the store buffer fills with misses; streaming stores write whole
//! lines through the write-combining buffers without reading them, and leave this core's cache
//! to its own data. The SW ROD sink's copy into lent store pages measured faster with plain
//! stores (docs/architecture.md, "The copies of an event byte on the SW ROD path").
//!
//! Streaming stores are weakly ordered: after a run of [`copy_words`] calls and before any
//! other access to the written words (Rust's contract for the intrinsics asks it also of the
//! writing thread's own later reads and writes), and so before they are handed to another
//! thread, call [`fence`] (the hand-over's release ordering does not cover them). On targets
//! without streaming stores both are plain: a `copy_from_slice` and a no-op.

/// Copies `src` into `dst` (the same length) with streaming stores where the target has
/// them. Panics if the lengths differ, as `copy_from_slice` does.
///
/// # Safety
///
/// The caller calls [`fence`] on this thread after the copy and before any other access to
/// `dst`'s words (its own reads and writes included) and before `dst` can reach another
/// thread: the module docs. Unsafe because a safe caller could otherwise read the words
/// back, or hand them over, before the weakly ordered stores are ordered.
#[inline]
pub unsafe fn copy_words(dst: &mut [u32], src: &[u32]) {
    assert_eq!(dst.len(), src.len(), "streaming copy of unequal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the lengths are equal (asserted above) and both slices are valid for their
        // lengths; `stream_x86` writes exactly `dst` and reads exactly `src`; the ordering of
        // the streamed stores is the caller's contract.
        unsafe { stream_x86(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Orders every streaming store of this thread before the stores that follow (x86 `sfence`):
/// call it before handing streamed words to another thread.
#[inline]
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and is part of SSE, which every x86_64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Streams `n` words from `src` to `dst`: single words (`movnti`) up to a 16-byte boundary of
/// `dst`, then 16-byte stores (`movntdq`, unaligned loads), then single words again.
///
/// # Safety
///
/// `src` must be valid for reading and `dst` for writing `n` words, both 4-byte aligned, and
/// the two must not overlap.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn stream_x86(dst: *mut u32, src: *const u32, n: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128, _mm_stream_si32};
    let mut i = 0;
    // Words up to the first 16-byte boundary of `dst` (at most 3).
    let lead = ((16 - (dst as usize % 16)) % 16 / 4).min(n);
    while i < lead {
        // SAFETY: i < n: inside both slices (the caller's contract).
        unsafe { _mm_stream_si32(dst.add(i).cast::<i32>(), src.add(i).read() as i32) };
        i += 1;
    }
    while i + 4 <= n {
        // SAFETY: words i..i + 4 are inside both slices; `dst + i` is 16-byte aligned (the
        // lead brought it there and each step adds 16 bytes); the load is unaligned.
        unsafe {
            let v = _mm_loadu_si128(src.add(i).cast::<__m128i>());
            _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
        }
        i += 4;
    }
    while i < n {
        // SAFETY: i < n, as above.
        unsafe { _mm_stream_si32(dst.add(i).cast::<i32>(), src.add(i).read() as i32) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every alignment of source and destination and every length up to a few lines copies
    /// exactly the source words and touches nothing around them.
    #[test]
    fn copies_match_at_every_alignment_and_length() {
        let src: Vec<u32> = (0..200u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        for s_off in 0..4 {
            for d_off in 0..4 {
                for n in 0..70 {
                    let mut dst = vec![0xDEAD_BEEFu32; 80];
                    // SAFETY: fenced right after, before the words are read back.
                    unsafe { copy_words(&mut dst[d_off..d_off + n], &src[s_off..s_off + n]) };
                    fence();
                    assert_eq!(&dst[d_off..d_off + n], &src[s_off..s_off + n]);
                    assert!(dst[..d_off].iter().all(|&w| w == 0xDEAD_BEEF));
                    assert!(dst[d_off + n..].iter().all(|&w| w == 0xDEAD_BEEF));
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "unequal lengths")]
    fn unequal_lengths_panic() {
        // SAFETY: the copy panics before it writes anything.
        unsafe { copy_words(&mut [0; 3], &[1, 2]) };
    }
}
