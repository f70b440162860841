//! Fuzz target: the run-control HTTP request parser on arbitrary bytes, delivered in pieces of
//! every size (a slow client), then the command-body parser. Errors are typed; nothing may panic.
#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use rodeo_run::http::read_request;

/// A reader that hands out at most `step` bytes per read.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.data.len().min(buf.len()).min(self.step);
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let mut r = Trickle {
        data: rest,
        step: usize::from(step).max(1),
    };
    if let Ok(req) = read_request(&mut r) {
        let _ = req.header("authorization");
        let _ = req.header("content-length");
        assert!(!req.method.is_empty());
    }
});
