//! Words between Python and Rust, the parts that know no fragment type: read-only NumPy
//! arrays owning Rust buffers and views of them, checksum names, decompressed words.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice};

use rodeo_format::checksum::ChecksumType;
use rodeo_format::compress::{decompress_event, CompressError};
use rodeo_format::fragment::FullEvent;

/// The plain form of `words` if it is a compressed event (a copy: decompression writes a new
/// buffer), else `words` itself.
pub(crate) fn plain_words(words: Vec<u32>) -> Result<Vec<u32>, CompressError> {
    match FullEvent::parse(&words) {
        Ok(e) if e.compression() != 0 => {
            let mut out = Vec::new();
            decompress_event(&words, &mut out)?;
            Ok(out)
        }
        _ => Ok(words),
    }
}

pub(crate) fn checksum_name(c: ChecksumType) -> &'static str {
    match c {
        ChecksumType::None => "none",
        ChecksumType::Crc16 => "crc16",
        ChecksumType::Adler32 => "adler32",
    }
}

pub(crate) fn parse_checksum(name: &str) -> PyResult<ChecksumType> {
    match name {
        "none" => Ok(ChecksumType::None),
        "crc16" => Ok(ChecksumType::Crc16),
        "adler32" => Ok(ChecksumType::Adler32),
        _ => Err(PyValueError::new_err(format!(
            "checksum must be 'none', 'crc16' or 'adler32', not {name:?}"
        ))),
    }
}

/// A read-only NumPy array owning `words` (moved, not copied).
pub(crate) fn frozen_array(py: Python<'_>, words: Vec<u32>) -> PyResult<Bound<'_, PyArray1<u32>>> {
    let arr = PyArray1::from_vec(py, words);
    let kwargs = PyDict::new(py);
    kwargs.set_item("write", false)?;
    arr.call_method("setflags", (), Some(&kwargs))?;
    Ok(arr)
}

/// A view `arr[start:start+len]` (shares memory with `arr`).
pub(crate) fn view<'py>(
    arr: &Bound<'py, PyArray1<u32>>,
    start: usize,
    len: usize,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let slice = PySlice::new(arr.py(), start as isize, (start + len) as isize, 1);
    Ok(arr.as_any().get_item(slice)?.cast_into::<PyArray1<u32>>()?)
}

/// Offset of `inner` inside `outer` in words (both from the same allocation).
pub(crate) fn offset_in(outer: &[u32], inner: &[u32]) -> usize {
    (inner.as_ptr() as usize - outer.as_ptr() as usize) / std::mem::size_of::<u32>()
}
