//! Page-aligned memory for direct I/O: the buffers the raw-file writer fills and its writer
//! thread writes (`direct`, `write_queue`), and the blocks the reader reads into (`direct_in`).

/// Alignment of direct writes: memory address, file offset and length (the page size, a
/// multiple of every device's logical block size).
pub const ALIGN: usize = 4096;

/// Page-aligned memory: `storage` has `ALIGN` bytes more than the capacity, `start` is the
/// offset of its first aligned byte.
#[derive(Debug)]
pub(super) struct Block {
    /// The memory, `ALIGN` bytes longer than the capacity.
    pub(super) storage: Vec<u8>,
    /// Offset of the first aligned byte in `storage`.
    pub(super) start: usize,
}

impl Block {
    /// `cap` bytes of zeroed, page-aligned memory.
    pub(super) fn new(cap: usize) -> Block {
        let storage = vec![0u8; cap + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        Block { storage, start }
    }

    /// The first `n` aligned bytes.
    pub(super) fn bytes(&self, n: usize) -> &[u8] {
        &self.storage[self.start..self.start + n]
    }

    /// The first `n` aligned bytes, to fill.
    pub(super) fn bytes_mut(&mut self, n: usize) -> &mut [u8] {
        &mut self.storage[self.start..self.start + n]
    }
}
