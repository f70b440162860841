//! `rodeo._rodeo`: the native half of the `rodeo` Python package.
//!
//! Everything here is a thin layer over `rodeo-format`: the raw-file reader and writer, the
//! fragment views and builders, and the synthetic-event generator. No part of the format is
//! implemented twice; Python sees the Rust code's results and errors.
//!
//! # Modules
//!
//! `event` (`Event`, `Rob`, and the words Python gives), `reader` (`RawFile`, `open`,
//! `verify`), `writer` (`Writer`), `build` (fragment builders, synthetic events), `errors`
//! (the exceptions), `words` (NumPy arrays and views, checksum names).
//!
//! # Ownership of event words
//!
//! [`RawFile`] iterates `RawFileReader`, whose iterator moves each event's `Vec<u32>` out of
//! the reader without copying; the `Vec` is then handed to NumPy with `PyArray1::from_vec`,
//! which keeps the Rust allocation alive inside the array (again no copy). The array is marked
//! read-only, because the header fields of an [`Event`] are parsed once, when it is made, and
//! must keep agreeing with its words. Every other array an event hands out (`Rob.words`,
//! `Rob.data`, status words, trigger info) is a NumPy view of that one array: slicing, never
//! copying.
//!
//! # Threads
//!
//! The reader releases the GIL while it reads and checks the next record (the words it reads
//! are its own until they are handed to NumPy), so other Python threads run meanwhile. Writing
//! and building keep the GIL: they read arrays that Python code could otherwise change under
//! them.
//!
//! # Errors
//!
//! Reader errors become `rodeo.RawFileError` with the byte offset (`offset`) and the number of
//! events recovered before it (`events_recovered`); I/O errors become `OSError` (with `errno`
//! and the file name, so a missing file is `FileNotFoundError`); malformed fragments become
//! `rodeo.FormatError` with the word offset (`word_offset`).

mod build;
mod errors;
mod event;
mod reader;
mod words;
mod writer;

use pyo3::prelude::*;

use crate::build::*;
use crate::errors::*;
use crate::event::*;
use crate::reader::*;
use crate::writer::*;

/// rodeo's native module: raw-data files, fragments, builders (see the `rodeo` package).
#[pymodule]
fn _rodeo(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("RawFileError", py.get_type::<RawFileError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add_class::<Event>()?;
    m.add_class::<Rob>()?;
    m.add_class::<RawFile>()?;
    m.add_class::<Writer>()?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(build_rob, m)?)?;
    m.add_function(wrap_pyfunction!(build_event, m)?)?;
    m.add_function(wrap_pyfunction!(synth_event, m)?)?;
    m.add_function(wrap_pyfunction!(counter_word, m)?)?;
    m.add_function(wrap_pyfunction!(check_counter, m)?)?;
    m.add("FORMAT_VERSION", rodeo_files::rawfile::FORMAT_VERSION)?;
    Ok(())
}
