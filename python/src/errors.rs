//! rodeo's Python exceptions and the conversions of rodeo-format's errors into them.

use pyo3::exceptions::{PyException, PyOSError};
use pyo3::prelude::*;

use rodeo_files::datafile::DataFileError;
use rodeo_files::rawfile::RawFileError as RustRawFileError;
use rodeo_format::compress::CompressError;
use rodeo_format::fragment::FragmentError;

pyo3::create_exception!(rodeo, Error, PyException, "Base class of rodeo's errors.");
pyo3::create_exception!(
    rodeo,
    RawFileError,
    Error,
    "A raw-data file is damaged or incomplete: `offset` is the byte offset where reading \
     stopped, `events_recovered` how many valid events were returned before it."
);
pyo3::create_exception!(
    rodeo,
    FormatError,
    Error,
    "A fragment is malformed: `word_offset` is the offending word's offset in the fragment."
);

/// A Python exception for a raw-file error, with its offset and recovered-event count.
pub(crate) fn raw_file_err(py: Python<'_>, e: RustRawFileError) -> PyErr {
    if let RustRawFileError::Io { op, path, source } = &e {
        let args = (
            source.raw_os_error().unwrap_or(0),
            format!("{op}: {source}"),
            path.display().to_string(),
        );
        return PyOSError::new_err(args);
    }
    let err = RawFileError::new_err(e.to_string());
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail in practice; if it did,
    // the message still names the offset.
    let _ = value.setattr("offset", e.offset());
    let _ = value.setattr("events_recovered", e.events_recovered());
    err
}

/// A Python exception for an error of the data-file reader (either container), with its offset
/// and recovered-event count.
pub(crate) fn data_file_err(py: Python<'_>, e: DataFileError) -> PyErr {
    match e {
        DataFileError::Rodeo(e) => raw_file_err(py, e),
        DataFileError::Io { op, path, source }
        | DataFileError::EventStorage(rodeo_files::eventstorage::EsError::Io {
            op,
            path,
            source,
        }) => PyOSError::new_err((
            source.raw_os_error().unwrap_or(0),
            format!("{op}: {source}"),
            path.display().to_string(),
        )),
        other => {
            let err = RawFileError::new_err(other.to_string());
            let value = err.value(py);
            let _ = value.setattr("offset", other.offset());
            let _ = value.setattr("events_recovered", other.events_recovered());
            err
        }
    }
}

/// A Python exception for a fragment error, with the word offset.
pub(crate) fn format_err(py: Python<'_>, e: &FragmentError) -> PyErr {
    let err = FormatError::new_err(e.to_string());
    let _ = err
        .value(py)
        .setattr("word_offset", e.word().unwrap_or(e.offset()));
    err
}

/// A Python exception for an event that could not be decompressed.
pub(crate) fn compress_err(py: Python<'_>, e: &CompressError, offset: Option<u64>) -> PyErr {
    match e {
        CompressError::Fragment(f) => format_err(py, f),
        other => {
            let at = offset.map_or(String::new(), |o| format!(" (event record at byte {o})"));
            FormatError::new_err(format!("cannot decompress the event{at}: {other}"))
        }
    }
}
