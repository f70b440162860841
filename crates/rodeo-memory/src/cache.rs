//! Hints to the CPU's caches: [`prefetch`] one line, [`prefetch_bytes`] a buffer's lines. A
//! hint never faults, never reads or writes memory and changes no result; it only lets a later
//! access find its line already fetched (from memory, or from the core that last wrote it).

/// Asks the CPU to bring the cache line holding `p` into its caches, for reading or writing
/// soon. Any address is allowed (also one past a buffer or dangling): nothing is accessed.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it never faults and has no effect on memory or on program
    // state, whatever the address; SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] of every 64-byte line of `bytes`, four lines per step.
#[inline(always)]
pub fn prefetch_bytes(bytes: &[u8]) {
    let p = bytes.as_ptr();
    let n = bytes.len();
    let mut off = 0;
    while off + 256 <= n {
        prefetch(p.wrapping_add(off));
        prefetch(p.wrapping_add(off + 64));
        prefetch(p.wrapping_add(off + 128));
        prefetch(p.wrapping_add(off + 192));
        off += 256;
    }
    while off < n {
        prefetch(p.wrapping_add(off));
        off += 64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefetch changes nothing, whatever it is given: a live buffer's lines, an empty
    /// slice, an address past the end, a dangling or null pointer.
    #[test]
    fn prefetches_change_nothing_and_never_fault() {
        let buf: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        prefetch_bytes(&buf);
        prefetch_bytes(&buf[..3]);
        prefetch_bytes(&[]);
        prefetch(buf.as_ptr().wrapping_add(1 << 20));
        prefetch(std::ptr::null::<u64>());
        prefetch(std::ptr::NonNull::<u32>::dangling().as_ptr().cast_const());
        assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
