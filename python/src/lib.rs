//! `rodeo._rodeo`: the native half of the `rodeo` Python package.
//!
//! Everything here is a thin layer over `rodeo-format`: the raw-file reader and writer, the
//! fragment views and builders, and the synthetic-event generator. No part of the format is
//! implemented twice; Python sees the Rust code's results and errors.
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

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyException, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PySlice};

use rodeo_format::checksum::ChecksumType;
use rodeo_format::compress::{decompress_event, CompressError};
use rodeo_format::datafile::{
    detect_container, Container, DataFileError, DataFileReader, FileEvent, FileInfo, RobRef,
};
use rodeo_format::fragment::{
    EventBuilder, FragmentError, FullEvent, RobBuilder, RobFragment, RobPayload, RodBuilder,
    SourceId, StatusPosition, StreamTag,
};
use rodeo_format::rawfile::{
    FileStart, RawFileConfig, RawFileError as RustRawFileError, RawFileReader, RawFileWriter,
};
use rodeo_format::synth::{self, EventSynth, SynthConfig};

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
fn raw_file_err(py: Python<'_>, e: RustRawFileError) -> PyErr {
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
fn data_file_err(py: Python<'_>, e: DataFileError) -> PyErr {
    match e {
        DataFileError::Rodeo(e) => raw_file_err(py, e),
        DataFileError::Io { op, path, source }
        | DataFileError::EventStorage(rodeo_format::eventstorage::EsError::Io {
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
fn format_err(py: Python<'_>, e: &FragmentError) -> PyErr {
    let err = FormatError::new_err(e.to_string());
    let _ = err
        .value(py)
        .setattr("word_offset", e.word().unwrap_or(e.offset()));
    err
}

/// A Python exception for an event that could not be decompressed.
fn compress_err(py: Python<'_>, e: &CompressError, offset: Option<u64>) -> PyErr {
    match e {
        CompressError::Fragment(f) => format_err(py, f),
        other => {
            let at = offset.map_or(String::new(), |o| format!(" (event record at byte {o})"));
            FormatError::new_err(format!("cannot decompress the event{at}: {other}"))
        }
    }
}

/// The plain form of `words` if it is a compressed event (a copy: decompression writes a new
/// buffer), else `words` itself.
fn plain_words(words: Vec<u32>) -> Result<Vec<u32>, CompressError> {
    match FullEvent::parse(&words) {
        Ok(e) if e.compression() != 0 => {
            let mut out = Vec::new();
            decompress_event(&words, &mut out)?;
            Ok(out)
        }
        _ => Ok(words),
    }
}

fn checksum_name(c: ChecksumType) -> &'static str {
    match c {
        ChecksumType::None => "none",
        ChecksumType::Crc16 => "crc16",
        ChecksumType::Adler32 => "adler32",
    }
}

fn parse_checksum(name: &str) -> PyResult<ChecksumType> {
    match name {
        "none" => Ok(ChecksumType::None),
        "crc16" => Ok(ChecksumType::Crc16),
        "adler32" => Ok(ChecksumType::Adler32),
        _ => Err(PyValueError::new_err(format!(
            "checksum must be 'none', 'crc16' or 'adler32', not {name:?}"
        ))),
    }
}

/// Words given from Python: a uint32 NumPy array (borrowed, no copy) or bytes (copied, since
/// bytes need not be aligned for `u32`).
enum Words<'py> {
    Array(PyReadonlyArray1<'py, u32>),
    Owned(Vec<u32>),
}

impl Words<'_> {
    fn as_slice(&self) -> PyResult<&[u32]> {
        match self {
            Words::Array(a) => a.as_slice().map_err(|_| {
                PyValueError::new_err("the array must be contiguous (use numpy.ascontiguousarray)")
            }),
            Words::Owned(v) => Ok(v),
        }
    }
}

/// Reads `obj` as fragment words: an `Event` or `Rob` (their words), a 1-D uint32 NumPy array,
/// or `bytes`/`bytearray` of little-endian words.
fn extract_words<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Words<'py>> {
    let py = obj.py();
    if let Ok(ev) = obj.cast::<Event>() {
        return Ok(Words::Array(ev.get().words.bind(py).readonly()));
    }
    if let Ok(rob) = obj.cast::<Rob>() {
        let words = rob.get().words(py)?;
        return Ok(Words::Array(words.into_bound(py).readonly()));
    }
    if let Ok(arr) = obj.extract::<PyReadonlyArray1<'py, u32>>() {
        return Ok(Words::Array(arr));
    }
    let bytes: Option<Vec<u8>> = if let Ok(b) = obj.cast::<PyBytes>() {
        Some(b.as_bytes().to_vec())
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        Some(b.to_vec())
    } else {
        None
    };
    if let Some(bytes) = bytes {
        if bytes.len() % 4 != 0 {
            return Err(PyValueError::new_err(format!(
                "{} bytes is not a whole number of 32-bit words",
                bytes.len()
            )));
        }
        let words = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        return Ok(Words::Owned(words));
    }
    Err(PyTypeError::new_err(format!(
        "expected a 1-D numpy uint32 array, bytes, an Event or a Rob, not {} \
         (convert arrays with .astype(numpy.uint32))",
        obj.get_type().name()?
    )))
}

/// An optional list of words (status words, trigger info), default `default`.
fn word_list(obj: Option<&Bound<'_, PyAny>>, default: &[u32]) -> PyResult<Vec<u32>> {
    match obj {
        None => Ok(default.to_vec()),
        Some(o) => match o.extract::<u32>() {
            Ok(w) => Ok(vec![w]),
            Err(_) => Ok(extract_words(o)
                .map(|w| w.as_slice().map(<[u32]>::to_vec))
                .unwrap_or_else(|_| o.extract::<Vec<u32>>())?),
        },
    }
}

/// A read-only NumPy array owning `words` (moved, not copied).
fn frozen_array(py: Python<'_>, words: Vec<u32>) -> PyResult<Bound<'_, PyArray1<u32>>> {
    let arr = PyArray1::from_vec(py, words);
    let kwargs = PyDict::new(py);
    kwargs.set_item("write", false)?;
    arr.call_method("setflags", (), Some(&kwargs))?;
    Ok(arr)
}

/// A view `arr[start:start+len]` (shares memory with `arr`).
fn view<'py>(
    arr: &Bound<'py, PyArray1<u32>>,
    start: usize,
    len: usize,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let slice = PySlice::new(arr.py(), start as isize, (start + len) as isize, 1);
    Ok(arr.as_any().get_item(slice)?.cast_into::<PyArray1<u32>>()?)
}

/// Offset of `inner` inside `outer` in words (both from the same allocation).
fn offset_in(outer: &[u32], inner: &[u32]) -> usize {
    (inner.as_ptr() as usize - outer.as_ptr() as usize) / std::mem::size_of::<u32>()
}

/// Header fields of a full event, parsed once.
struct Header {
    source_id: u32,
    global_id: u64,
    extended_l1id: u32,
    bcid: u32,
    run_number: u32,
    run_type: u32,
    lumi_block: u32,
    l1_trigger_type: u32,
    bc_time: (u32, u32),
    status_words: Vec<u32>,
    checksum_type: ChecksumType,
    compression: u32,
    stream_tags: Vec<(String, String)>,
    /// (start, len) of L1, L2, EF info in the words.
    lists: [(usize, usize); 3],
}

fn parse_header(words: &[u32]) -> Result<Header, FragmentError> {
    let e = FullEvent::parse(words)?;
    let mut stream_tags = Vec::new();
    for tag in e.stream_tags() {
        let tag = tag?;
        stream_tags.push((tag.name.to_owned(), tag.stream_type.to_owned()));
    }
    let range = |s: &[u32]| (offset_in(words, s), s.len());
    Ok(Header {
        source_id: e.source_id().word(),
        global_id: e.global_id(),
        extended_l1id: e.extended_l1id(),
        bcid: e.bcid(),
        run_number: e.run_number(),
        run_type: e.run_type(),
        lumi_block: e.lumi_block(),
        l1_trigger_type: e.l1_trigger_type(),
        bc_time: (e.bc_time_seconds(), e.bc_time_nanoseconds()),
        status_words: e.status_words().to_vec(),
        checksum_type: e.checksum_type(),
        compression: e.compression(),
        stream_tags,
        lists: [range(e.l1_info()), range(e.l2_info()), range(e.ef_info())],
    })
}

/// One full event: its words as a read-only NumPy array, its header fields, its ROBs.
///
/// Header attributes raise `FormatError` if the words are not a valid full event (the file
/// record was intact, but its fragment is not); `words` is always available.
#[pyclass(module = "rodeo", frozen)]
pub struct Event {
    words: Py<PyArray1<u32>>,
    header: Result<Header, FragmentError>,
    /// For an eformat 3/4 event read from a file: its identifiers and ROB ranges.
    legacy: Option<Legacy>,
    robs: PyOnceLock<Py<PyList>>,
    #[pyo3(get)]
    /// Index of the event in its file (0-based), or None for an event not read from a file.
    index: Option<u64>,
    #[pyo3(get)]
    /// Byte offset of the event record in its file, or None.
    offset: Option<u64>,
    #[pyo3(get)]
    /// The record flags (bit 0: compressed), 0 for an event not read from a file.
    flags: u32,
}

/// What the data-file reader found in an eformat 3/4 event.
struct Legacy {
    eformat: u32,
    run_number: u32,
    l1id: u32,
    global_id: Option<u64>,
    robs: Vec<RobRef>,
}

impl Event {
    /// An event from the data-file reader: eformat 5 events as [`Event::new`]; eformat 3/4
    /// events keep the reader's identifiers and ROB ranges (their headers are not eformat 5's).
    fn from_file_event(py: Python<'_>, e: FileEvent, flags: u32) -> PyResult<Event> {
        let legacy = (e.eformat != 5).then(|| Legacy {
            eformat: e.eformat,
            run_number: e.run_number,
            l1id: e.l1id,
            global_id: e.global_id,
            robs: e.robs.clone(),
        });
        let mut ev = Event::new(py, e.words, Some(e.index), Some(e.offset), flags)?;
        ev.legacy = legacy;
        Ok(ev)
    }

    fn new(
        py: Python<'_>,
        words: Vec<u32>,
        index: Option<u64>,
        offset: Option<u64>,
        flags: u32,
    ) -> PyResult<Event> {
        let header = parse_header(&words);
        Ok(Event {
            words: frozen_array(py, words)?.unbind(),
            header,
            legacy: None,
            robs: PyOnceLock::new(),
            index,
            offset,
            flags,
        })
    }

    fn header(&self, py: Python<'_>) -> PyResult<&Header> {
        self.header.as_ref().map_err(|e| format_err(py, e))
    }

    fn make_robs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        let arr = self.words.bind(py);
        let guard = arr.readonly();
        let words = guard
            .as_slice()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let list = PyList::empty(py);
        if let Some(l) = &self.legacy {
            for r in &l.robs {
                list.append(Rob::from_ref(arr, words, r))?;
            }
            return Ok(list.unbind());
        }
        let event = FullEvent::parse(words).map_err(|e| format_err(py, &e))?;
        for rob in event.robs() {
            let rob = rob.map_err(|e| format_err(py, &e))?;
            list.append(Rob::new(arr, words, &rob)?)?;
        }
        Ok(list.unbind())
    }
}

#[pymethods]
impl Event {
    /// Parses `words` (a uint32 array, bytes, or another Event/Rob's words) as a full event.
    /// The words are copied into a new read-only array.
    #[new]
    fn py_new(py: Python<'_>, words: &Bound<'_, PyAny>) -> PyResult<Event> {
        let owned = extract_words(words)?.as_slice()?.to_vec();
        Event::new(py, owned, None, None, 0)
    }

    /// The event's words (read-only uint32 array owning the Rust buffer).
    #[getter]
    fn words(&self, py: Python<'_>) -> Py<PyArray1<u32>> {
        self.words.clone_ref(py)
    }

    /// Whether the event as held here is compressed (its header's compression type is not 0):
    /// its `robs` are then not readable; `decompress()` gives the plain event.
    #[getter]
    fn compressed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.header(py)?.compression != 0)
    }

    /// The plain (uncompressed) event: a new `Event` with the same header, the ROBs restored
    /// and the checksum computed again; the event itself if it is not compressed. Raises
    /// `FormatError` if the compressed payload is damaged.
    fn decompress(slf: &Bound<'_, Self>) -> PyResult<Py<Event>> {
        let py = slf.py();
        let this = slf.get();
        if this.header(py)?.compression == 0 {
            return Ok(slf.clone().unbind());
        }
        let guard = this.words.bind(py).readonly();
        let words = guard
            .as_slice()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut out = Vec::new();
        decompress_event(words, &mut out).map_err(|e| compress_err(py, &e, this.offset))?;
        drop(guard);
        Py::new(
            py,
            Event::new(py, out, this.index, this.offset, this.flags)?,
        )
    }

    /// Source identifier of the event's writer.
    #[getter]
    fn source_id(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.source_id)
    }

    /// Global event id (for an eformat 3/4 event: its event number, when the layout has one).
    #[getter]
    fn global_id(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        if let Some(l) = &self.legacy {
            return Ok(l.global_id);
        }
        Ok(Some(self.header(py)?.global_id))
    }

    /// L1ID (bits 23..0 of the extended L1ID; an eformat 3/4 event's L1ID word as it is).
    #[getter]
    fn l1id(&self, py: Python<'_>) -> PyResult<u32> {
        if let Some(l) = &self.legacy {
            return Ok(l.l1id);
        }
        Ok(self.header(py)?.extended_l1id & 0x00FF_FFFF)
    }

    /// Extended L1ID (ECR counter in bits 31..24, L1ID in bits 23..0).
    #[getter]
    fn extended_l1id(&self, py: Python<'_>) -> PyResult<u32> {
        if let Some(l) = &self.legacy {
            return Ok(l.l1id);
        }
        Ok(self.header(py)?.extended_l1id)
    }

    /// eformat major version of the event: 5, or 3/4 for BESIII and older ATLAS files (whose
    /// events have `run_number`, `l1id`, `global_id` and `robs`, but not the eformat 5 header
    /// fields, which raise `FormatError`).
    #[getter]
    fn eformat(&self) -> u32 {
        self.legacy.as_ref().map_or(5, |l| l.eformat)
    }

    /// Bunch-crossing id.
    #[getter]
    fn bcid(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.bcid)
    }

    /// Run number.
    #[getter]
    fn run_number(&self, py: Python<'_>) -> PyResult<u32> {
        if let Some(l) = &self.legacy {
            return Ok(l.run_number);
        }
        Ok(self.header(py)?.run_number)
    }

    /// Run type.
    #[getter]
    fn run_type(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.run_type)
    }

    /// Luminosity block.
    #[getter]
    fn lumi_block(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.lumi_block)
    }

    /// L1 trigger type.
    #[getter]
    fn l1_trigger_type(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.l1_trigger_type)
    }

    /// Bunch-crossing time as (seconds, nanoseconds).
    #[getter]
    fn bc_time(&self, py: Python<'_>) -> PyResult<(u32, u32)> {
        Ok(self.header(py)?.bc_time)
    }

    /// The first status word (0 if there is none).
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.status_words.first().copied().unwrap_or(0))
    }

    /// All status words, as a list.
    #[getter]
    fn status_words(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        Ok(self.header(py)?.status_words.clone())
    }

    /// Checksum type: "none", "crc16" or "adler32".
    #[getter]
    fn checksum_type(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(checksum_name(self.header(py)?.checksum_type))
    }

    /// Compression type of the payload (0 none, 1 zstd).
    #[getter]
    fn compression(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.header(py)?.compression)
    }

    /// Stream tags, a list of (name, type) tuples.
    #[getter]
    fn stream_tags(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        Ok(self.header(py)?.stream_tags.clone())
    }

    /// L1 trigger-info words (a view of `words`).
    #[getter]
    fn l1_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let (s, n) = self.header(py)?.lists[0];
        view(self.words.bind(py), s, n)
    }

    /// L2 trigger-info words (a view of `words`).
    #[getter]
    fn l2_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let (s, n) = self.header(py)?.lists[1];
        view(self.words.bind(py), s, n)
    }

    /// Event-filter info words (a view of `words`).
    #[getter]
    fn ef_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let (s, n) = self.header(py)?.lists[2];
        view(self.words.bind(py), s, n)
    }

    /// The ROB fragments, a list of `Rob` (parsed on first access, then kept). Raises
    /// `FormatError` at the first malformed ROB.
    #[getter]
    fn robs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        if self.legacy.is_none() {
            self.header(py)?;
        }
        let list = self.robs.get_or_try_init(py, || self.make_robs(py))?;
        Ok(list.clone_ref(py))
    }

    /// Computes the event's payload checksum and compares it with the stored one; raises
    /// `FormatError` on a mismatch.
    fn verify_checksum(&self, py: Python<'_>) -> PyResult<()> {
        let guard = self.words.bind(py).readonly();
        let words = guard
            .as_slice()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        FullEvent::parse(words)
            .and_then(|e| e.verify_checksum())
            .map_err(|e| format_err(py, &e))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.words.bind(py).len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let n = self.words.bind(py).len();
        if let Some(l) = &self.legacy {
            return format!(
                "<rodeo.Event eformat={} l1id={:#010x} run={} robs={} words={n}>",
                l.eformat,
                l.l1id,
                l.run_number,
                l.robs.len()
            );
        }
        match &self.header {
            Ok(h) => format!(
                "<rodeo.Event global_id={} l1id={:#010x} bcid={} run={} words={n}>",
                h.global_id, h.extended_l1id, h.bcid, h.run_number
            ),
            Err(e) => format!("<rodeo.Event malformed ({e}) words={n}>"),
        }
    }
}

/// One ROB fragment of an event: header fields and views of the event's words.
#[pyclass(module = "rodeo", frozen)]
pub struct Rob {
    /// The array the ROB lies in (its event's words, or its own copy).
    parent: Py<PyArray1<u32>>,
    /// (start, len) of the ROB and of the ROD data in `parent`.
    range: (usize, usize),
    data_range: (usize, usize),
    /// The views, made on first access (most loops touch only some of them).
    words: PyOnceLock<Py<PyArray1<u32>>>,
    data: PyOnceLock<Py<PyArray1<u32>>>,
    #[pyo3(get)]
    /// Source identifier.
    source_id: u32,
    #[pyo3(get)]
    /// All ROB status words.
    status_words: Vec<u32>,
    #[pyo3(get)]
    /// Extended L1ID of the ROD.
    extended_l1id: u32,
    #[pyo3(get)]
    /// Bunch-crossing id of the ROD.
    bcid: u16,
    #[pyo3(get)]
    /// Run number of the ROD.
    run_number: u32,
    #[pyo3(get)]
    /// L1 trigger type of the ROD.
    trigger_type: u8,
    #[pyo3(get)]
    /// ROD status words.
    rod_status_words: Vec<u32>,
    checksum: ChecksumType,
    /// Word offset of the ROB inside its event, if it came from one.
    #[pyo3(get)]
    offset: Option<usize>,
}

impl Rob {
    /// A `Rob` over `rob`, which lies inside `all` (the words of `arr`).
    fn new(arr: &Bound<'_, PyArray1<u32>>, all: &[u32], rob: &RobFragment<'_>) -> PyResult<Rob> {
        let rod = rob.rod();
        let start = offset_in(all, rob.words());
        let data = rod.data();
        Ok(Rob {
            parent: arr.clone().unbind(),
            range: (start, rob.size_words()),
            data_range: (offset_in(all, data), data.len()),
            words: PyOnceLock::new(),
            data: PyOnceLock::new(),
            source_id: rob.source_id().word(),
            status_words: rob.status_words().to_vec(),
            extended_l1id: rod.extended_l1id(),
            bcid: rod.bcid(),
            run_number: rod.run_number(),
            trigger_type: rod.trigger_type(),
            rod_status_words: rod.status_words().to_vec(),
            checksum: rob.checksum_type(),
            offset: Some(start),
        })
    }
}

impl Rob {
    /// A `Rob` over an eformat 3/4 ROB found by the data-file reader in `all` (the words of
    /// `arr`): the ROB and ROD header fields read at their fixed offsets (identical in eformat
    /// 3, 4 and 5 ROD headers); no ROB checksum.
    fn from_ref(arr: &Bound<'_, PyArray1<u32>>, all: &[u32], r: &RobRef) -> Rob {
        let w = |i: usize| all.get(i).copied().unwrap_or(0);
        let span = |at: usize, n: usize| {
            at.checked_add(n)
                .and_then(|end| all.get(at..end))
                .unwrap_or(&[])
                .to_vec()
        };
        let nstatus = w(r.offset + 5) as usize;
        let rod = r.rod_offset;
        let rod_end = rod + r.rod_size;
        let rod_nstatus = w(rod_end.saturating_sub(3)) as usize;
        let status_first = w(rod_end.saturating_sub(1)) == 0;
        let rod_status_at = if status_first {
            rod + w(rod + 1) as usize
        } else {
            r.data_offset + r.data_len
        };
        Rob {
            parent: arr.clone().unbind(),
            range: (r.offset, r.size),
            data_range: (r.data_offset, r.data_len),
            words: PyOnceLock::new(),
            data: PyOnceLock::new(),
            source_id: r.source_id,
            status_words: span(r.offset + 6, nstatus),
            extended_l1id: w(rod + 5),
            bcid: (w(rod + 6) & 0xFFF) as u16,
            run_number: w(rod + 4),
            trigger_type: (w(rod + 7) & 0xFF) as u8,
            rod_status_words: span(rod_status_at, rod_nstatus),
            checksum: ChecksumType::None,
            offset: Some(r.offset),
        }
    }

    /// The view of `range` in the parent array, made once.
    fn view_of(
        &self,
        py: Python<'_>,
        cell: &PyOnceLock<Py<PyArray1<u32>>>,
        (start, len): (usize, usize),
    ) -> PyResult<Py<PyArray1<u32>>> {
        let v = cell.get_or_try_init(py, || {
            view(self.parent.bind(py), start, len).map(Bound::unbind)
        })?;
        Ok(v.clone_ref(py))
    }
}

#[pymethods]
impl Rob {
    /// Parses `words` (a uint32 array or bytes) as one ROB fragment (copied into a new array).
    #[new]
    fn py_new(py: Python<'_>, words: &Bound<'_, PyAny>) -> PyResult<Rob> {
        let owned = extract_words(words)?.as_slice()?.to_vec();
        let arr = frozen_array(py, owned)?;
        let guard = arr.readonly();
        let all = guard
            .as_slice()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let rob = RobFragment::parse(all).map_err(|e| format_err(py, &e))?;
        let mut r = Rob::new(&arr, all, &rob)?;
        r.offset = None;
        Ok(r)
    }

    /// The ROB fragment's words (a view of the event's words).
    #[getter]
    fn words(&self, py: Python<'_>) -> PyResult<Py<PyArray1<u32>>> {
        self.view_of(py, &self.words, self.range)
    }

    /// The ROD's data words (a view of the event's words).
    #[getter]
    fn data(&self, py: Python<'_>) -> PyResult<Py<PyArray1<u32>>> {
        self.view_of(py, &self.data, self.data_range)
    }

    /// The first ROB status word (0 if there is none).
    #[getter]
    fn status(&self) -> u32 {
        self.status_words.first().copied().unwrap_or(0)
    }

    /// L1ID of the ROD (bits 23..0).
    #[getter]
    fn l1id(&self) -> u32 {
        self.extended_l1id & 0x00FF_FFFF
    }

    /// Sub-detector id (bits 23..16 of the source id).
    #[getter]
    fn subdetector(&self) -> u8 {
        SourceId(self.source_id).subdetector().0
    }

    /// Module id (bits 15..0 of the source id).
    #[getter]
    fn module(&self) -> u16 {
        SourceId(self.source_id).module()
    }

    /// Checksum type: "none", "crc16" or "adler32".
    #[getter]
    fn checksum_type(&self) -> &'static str {
        checksum_name(self.checksum)
    }

    /// Computes the ROB's checksum and compares it with the stored one; raises `FormatError` on
    /// a mismatch.
    fn verify_checksum(&self, py: Python<'_>) -> PyResult<()> {
        let guard = self.parent.bind(py).readonly();
        let all = guard
            .as_slice()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let (start, len) = self.range;
        let words = all.get(start..start + len).unwrap_or_default();
        RobFragment::parse(words)
            .and_then(|r| r.verify_checksum())
            .map_err(|e| format_err(py, &e))
    }

    fn __len__(&self) -> usize {
        self.range.1
    }

    fn __repr__(&self) -> String {
        format!(
            "<rodeo.Rob source_id={:#010x} status={:#010x} words={} data={}>",
            self.source_id,
            self.status(),
            self.range.1,
            self.data_range.1
        )
    }
}

fn start_dict<'py>(py: Python<'py>, s: &FileStart) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", s.version)?;
    d.set_item("sequence", s.sequence)?;
    d.set_item("creation_time_ns", s.creation_time_ns)?;
    d.set_item("run", s.run)?;
    d.set_item("lumiblock", s.lumiblock)?;
    d.set_item("app_name", &s.app_name)?;
    d.set_item("stream_name", &s.stream_name)?;
    Ok(d)
}

/// The reader behind a [`RawFile`]: rodeo's own, or the data-file reader for EventStorage.
enum Reader {
    Rodeo(Box<RawFileReader>),
    EventStorage(Box<DataFileReader>),
}

/// An open raw-data file, rodeo's container or EventStorage (v2-v6, eformat 3-5), chosen by
/// its first record: a context manager and an iterator of `Event`s.
///
/// Iteration yields every valid event in order; at the first problem (truncation, a bad
/// checksum, no end record, ...) it raises `RawFileError` naming the byte offset, after the
/// events before it were yielded.
#[pyclass(module = "rodeo")]
pub struct RawFile {
    reader: Option<Reader>,
    /// Decompress compressed events as they are read.
    decompress: bool,
    path: String,
    info: FileInfo,
    /// Summary once the end record was read: events, event bytes, adler (rodeo), file bytes.
    done: Option<(u64, u64, Option<u32>, u64)>,
    events: u64,
}

impl RawFile {
    fn reader(&mut self) -> PyResult<&mut Reader> {
        self.reader
            .as_mut()
            .ok_or_else(|| PyValueError::new_err(format!("{} is closed", self.path)))
    }
}

#[pymethods]
impl RawFile {
    /// Opens `path` and validates its first records. With `decompress` (the default),
    /// compressed events (zstd in rodeo files; zlib in EventStorage files, always restored)
    /// are yielded in their plain form; without it, rodeo's zstd events come as stored (see
    /// `Event.decompress()`).
    #[new]
    #[pyo3(signature = (path, *, decompress=true))]
    fn py_new(py: Python<'_>, path: std::path::PathBuf, decompress: bool) -> PyResult<RawFile> {
        let container = py
            .detach(|| detect_container(&path))
            .map_err(|e| data_file_err(py, e))?;
        let (reader, info) = match container {
            Container::Rodeo => {
                let r = py
                    .detach(|| RawFileReader::open(&path))
                    .map_err(|e| raw_file_err(py, e))?;
                let s = r.start().clone();
                let info = FileInfo {
                    container,
                    version: s.version,
                    run_number: s.run,
                    lumiblock: Some(s.lumiblock),
                    file_number: s.sequence,
                    app_name: s.app_name.clone(),
                    stream: s.stream_name.clone(),
                    compression: "none".into(),
                    eventstorage: None,
                    rodeo: Some(s),
                };
                (Reader::Rodeo(Box::new(r)), info)
            }
            Container::EventStorage => {
                let r = py
                    .detach(|| DataFileReader::open_with(&path, decompress))
                    .map_err(|e| data_file_err(py, e))?;
                let info = r.info().clone();
                (Reader::EventStorage(Box::new(r)), info)
            }
        };
        Ok(RawFile {
            info,
            reader: Some(reader),
            decompress,
            path: path.display().to_string(),
            done: None,
            events: 0,
        })
    }

    /// The file's path.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The container: `"rodeo"` or `"eventstorage"`.
    #[getter]
    fn container(&self) -> &'static str {
        self.info.container.name()
    }

    /// The container's format version (rodeo 1; EventStorage 2 to 6).
    #[getter]
    fn format_version(&self) -> u32 {
        self.info.version
    }

    /// Run number (rodeo start record; EventStorage run parameters).
    #[getter]
    fn run(&self) -> u32 {
        self.info.run_number
    }

    /// Stream name (EventStorage: the `Stream=` free string, else the file-name core).
    #[getter]
    fn stream(&self) -> &str {
        &self.info.stream
    }

    /// Name of the application that wrote the file.
    #[getter]
    fn app_name(&self) -> &str {
        &self.info.app_name
    }

    /// File sequence number (EventStorage: the file number).
    #[getter]
    fn sequence(&self) -> u32 {
        self.info.file_number
    }

    /// Luminosity block (EventStorage: the `LumiBlock=` free string; None if absent).
    #[getter]
    fn lumiblock(&self) -> Option<u32> {
        self.info.lumiblock
    }

    /// The file's first records as a dict: rodeo's start record, or EventStorage's file start,
    /// file name strings, free strings and run parameters.
    #[getter]
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(s) = &self.info.rodeo {
            return start_dict(py, s);
        }
        let d = PyDict::new(py);
        if let Some(es) = &self.info.eventstorage {
            d.set_item("version", es.version)?;
            d.set_item("file_number", es.file_number)?;
            d.set_item("date", es.date)?;
            d.set_item("time", es.time)?;
            d.set_item("app_name", &es.app_name)?;
            d.set_item("file_name_core", &es.file_name_core)?;
            d.set_item("free_strings", es.free_strings.clone())?;
            d.set_item("run", es.run.run_number)?;
            d.set_item("max_events", es.run.max_events)?;
            d.set_item("rec_enable", es.run.rec_enable)?;
            d.set_item("trigger_type", es.run.trigger_type)?;
            d.set_item("detector_mask", es.run.detector_mask)?;
            d.set_item("beam_type", es.run.beam_type)?;
            d.set_item("beam_energy", es.run.beam_energy)?;
            d.set_item("compression", es.compression())?;
        }
        Ok(d)
    }

    /// Once the end record has been read and validated: a dict with `events`, `event_bytes`
    /// and `adler32` (rodeo files: the end record's; 0 and absent for EventStorage files) and
    /// `file_bytes`; None before.
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some((events, event_bytes, adler, file_bytes)) = self.done else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("events", events)?;
        d.set_item("event_bytes", event_bytes)?;
        if let Some(adler) = adler {
            d.set_item("adler32", adler)?;
        }
        d.set_item("file_bytes", file_bytes)?;
        Ok(Some(d))
    }

    /// Closes the file (iteration then raises ValueError).
    fn close(&mut self) {
        self.reader = None;
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &mut self,
        _ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Event>> {
        let decompress = self.decompress;
        let mut done = None;
        let result = match self.reader()? {
            Reader::Rodeo(reader) => match py.detach(|| reader.next()) {
                Some(Ok(ev)) => {
                    let words = if decompress {
                        py.detach(|| plain_words(ev.words))
                            .map_err(|e| compress_err(py, &e, Some(ev.offset)))?
                    } else {
                        ev.words
                    };
                    Event::new(py, words, Some(ev.index), Some(ev.offset), ev.flags).map(Some)
                }
                Some(Err(e)) => Err(raw_file_err(py, e)),
                None => {
                    if let Some(s) = reader.summary() {
                        done = Some((s.events, s.event_bytes, Some(s.adler), s.file_bytes));
                    }
                    Ok(None)
                }
            },
            Reader::EventStorage(reader) => match py.detach(|| reader.next()) {
                Some(Ok(ev)) => {
                    let flags = u32::from(ev.stored_compressed);
                    Event::from_file_event(py, ev, flags).map(Some)
                }
                Some(Err(e)) => Err(data_file_err(py, e)),
                None => {
                    if reader.complete() {
                        done = Some((0, 0, None, reader.file_len()));
                    }
                    Ok(None)
                }
            },
        };
        if let Some(mut d) = done {
            if d.2.is_none() {
                d.0 = self.events;
            }
            self.done = Some(d);
        }
        if let Ok(Some(_)) = &result {
            self.events += 1;
        }
        result
    }

    fn __repr__(&self) -> String {
        format!(
            "<rodeo.RawFile {:?} {} v{} run={} stream={:?}{}>",
            self.path,
            self.info.container.name(),
            self.info.version,
            self.info.run_number,
            self.info.stream,
            if self.reader.is_some() { "" } else { " closed" }
        )
    }
}

/// Opens a raw-data file for reading: `with rodeo.open(path) as f: for event in f: ...`.
/// Compressed events are yielded decompressed unless `decompress=False`.
#[pyfunction]
#[pyo3(signature = (path, *, decompress=true))]
fn open(py: Python<'_>, path: std::path::PathBuf, decompress: bool) -> PyResult<RawFile> {
    RawFile::py_new(py, path, decompress)
}

/// Reads and validates a whole file (structure, every record checksum, the end record);
/// returns its summary dict or raises `RawFileError`.
#[pyfunction]
fn verify<'py>(py: Python<'py>, path: std::path::PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let s = py
        .detach(|| rodeo_format::rawfile::verify_file(&path))
        .map_err(|e| raw_file_err(py, e))?;
    let d = PyDict::new(py);
    d.set_item("path", s.path.display().to_string())?;
    d.set_item("start", start_dict(py, &s.start)?)?;
    d.set_item("events", s.events)?;
    d.set_item("event_bytes", s.event_bytes)?;
    d.set_item("adler32", s.adler)?;
    d.set_item("file_bytes", s.file_bytes)?;
    Ok(d)
}

/// Writes events into raw-data files (rotation by size and count, `.writing` names renamed on
/// a clean close, fsync). A context manager: leaving the `with` block closes the last file.
#[pyclass(module = "rodeo")]
pub struct Writer {
    writer: Option<RawFileWriter>,
    files: Vec<String>,
}

#[pymethods]
impl Writer {
    /// Opens the first file in `directory` (which must exist).
    #[new]
    #[pyo3(signature = (directory, *, run=1, stream="physics_Main", app="rodeo-py", lumiblock=0,
        max_file_bytes=None, max_events_per_file=None, first_sequence=1, fsync=true,
        free_disk_margin_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        directory: std::path::PathBuf,
        run: u32,
        stream: &str,
        app: &str,
        lumiblock: u32,
        max_file_bytes: Option<u64>,
        max_events_per_file: Option<u64>,
        first_sequence: u32,
        fsync: bool,
        free_disk_margin_bytes: Option<u64>,
    ) -> PyResult<Writer> {
        let mut cfg = RawFileConfig::new(directory, run, app, stream);
        cfg.lumiblock = lumiblock;
        cfg.first_sequence = first_sequence;
        cfg.fsync_on_close = fsync;
        if let Some(m) = max_file_bytes {
            cfg.max_file_bytes = m;
        }
        if let Some(m) = max_events_per_file {
            cfg.max_events_per_file = m;
        }
        if let Some(m) = free_disk_margin_bytes {
            cfg.free_disk_margin_bytes = m;
        }
        let writer = match RawFileWriter::create(cfg) {
            Ok(w) => w,
            Err(RustRawFileError::Config { reason }) => return Err(PyValueError::new_err(reason)),
            Err(e) => return Err(raw_file_err(py, e)),
        };
        Ok(Writer {
            writer: Some(writer),
            files: Vec::new(),
        })
    }

    /// Writes one event record. `event` is a 1-D uint32 NumPy array (not copied), bytes of
    /// little-endian words, or an `Event`. The words are written as given (use `Event(words)`
    /// first to check them). Returns (file sequence, byte offset, index in the file).
    #[pyo3(signature = (event, flags=0))]
    fn write(
        &mut self,
        py: Python<'_>,
        event: &Bound<'_, PyAny>,
        flags: u32,
    ) -> PyResult<(u32, u64, u64)> {
        let words = extract_words(event)?;
        let slice = words.as_slice()?;
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the writer is closed"))?;
        let loc = writer
            .write_event(slice, flags)
            .map_err(|e| raw_file_err(py, e))?;
        Ok((loc.sequence, loc.offset, loc.index))
    }

    /// Closes the last file (end record, fsync, rename); returns the paths of every file
    /// written. Calling it again returns the same list.
    fn close(&mut self, py: Python<'_>) -> PyResult<Vec<String>> {
        if let Some(w) = self.writer.take() {
            let closed = py.detach(|| w.finish()).map_err(|e| raw_file_err(py, e))?;
            self.files = closed
                .iter()
                .map(|f| f.path.display().to_string())
                .collect();
        }
        Ok(self.files.clone())
    }

    /// Paths of the files closed so far.
    #[getter]
    fn files(&self) -> Vec<String> {
        match &self.writer {
            Some(w) => w
                .closed_files()
                .iter()
                .map(|f| f.path.display().to_string())
                .collect(),
            None => self.files.clone(),
        }
    }

    /// The `.writing` path of the open file, if any.
    #[getter]
    fn current_path(&self) -> Option<String> {
        self.writer
            .as_ref()
            .and_then(|w| w.current_path())
            .map(|p| p.display().to_string())
    }

    /// Writer statistics as a dict (events, event_bytes, bytes, files_opened, files_closed,
    /// rotations_by_size, rotations_by_count).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(w) = &self.writer else {
            return Ok(None);
        };
        let s = w.stats();
        let d = PyDict::new(py);
        for (k, v) in [
            ("events", s.events),
            ("event_bytes", s.event_bytes),
            ("bytes", s.bytes),
            ("files_opened", s.files_opened),
            ("files_closed", s.files_closed),
            ("rotations_by_size", s.rotations_by_size),
            ("rotations_by_count", s.rotations_by_count),
        ] {
            d.set_item(k, v)?;
        }
        Ok(Some(d))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &mut self,
        py: Python<'_>,
        _ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

/// Builds one ROB fragment wrapping one ROD fragment around `data` (uint32 array or bytes);
/// returns its words as a uint32 array. Uses rodeo-format's builders.
#[pyfunction]
#[pyo3(signature = (source_id, data, *, run_number=0, l1id=0, bcid=0, trigger_type=0,
    detector_event_type=0, minor_version=0, status=None, rod_status=None, status_after_data=true,
    checksum="adler32"))]
#[allow(clippy::too_many_arguments)]
fn build_rob<'py>(
    py: Python<'py>,
    source_id: u32,
    data: &Bound<'py, PyAny>,
    run_number: u32,
    l1id: u32,
    bcid: u16,
    trigger_type: u8,
    detector_event_type: u32,
    minor_version: u16,
    status: Option<&Bound<'py, PyAny>>,
    rod_status: Option<&Bound<'py, PyAny>>,
    status_after_data: bool,
    checksum: &str,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let data = extract_words(data)?;
    let pieces = [data.as_slice()?];
    let status = word_list(status, &[0])?;
    let rod_status = word_list(rod_status, &[0])?;
    let rod = RodBuilder {
        source_id: SourceId(source_id),
        minor_version,
        run_number,
        extended_l1id: l1id,
        bcid,
        trigger_type,
        detector_event_type,
        status: &rod_status,
        status_position: if status_after_data {
            StatusPosition::AfterData
        } else {
            StatusPosition::BeforeData
        },
        data: &pieces,
    };
    let mut out = Vec::new();
    RobBuilder {
        source_id: SourceId(source_id),
        status: &status,
        checksum: parse_checksum(checksum)?,
        payload: RobPayload::Rod(rod),
    }
    .write_vec(&mut out)
    .map_err(|e| format_err(py, &e))?;
    Ok(PyArray1::from_vec(py, out))
}

/// Builds a full event from ROB fragments (uint32 arrays, bytes or `Rob`s, written back to
/// back without an intermediate copy); returns its words as a uint32 array. Each ROB is
/// validated first unless `validate=False`. `l1id` defaults to the low 32 bits of `global_id`.
#[pyfunction]
#[pyo3(signature = (robs, *, global_id, run_number=0, l1id=None, bcid=0, lumi_block=0, run_type=0,
    l1_trigger_type=0, stream_tags=None, status=None, checksum="adler32", source_id=0x007C_0000,
    bc_time=(0, 0), l1_info=None, l2_info=None, ef_info=None, validate=true))]
#[allow(clippy::too_many_arguments)]
fn build_event<'py>(
    py: Python<'py>,
    robs: &Bound<'py, PyAny>,
    global_id: u64,
    run_number: u32,
    l1id: Option<u32>,
    bcid: u32,
    lumi_block: u32,
    run_type: u32,
    l1_trigger_type: u32,
    stream_tags: Option<Vec<(String, String)>>,
    status: Option<&Bound<'py, PyAny>>,
    checksum: &str,
    source_id: u32,
    bc_time: (u32, u32),
    l1_info: Option<&Bound<'py, PyAny>>,
    l2_info: Option<&Bound<'py, PyAny>>,
    ef_info: Option<&Bound<'py, PyAny>>,
    validate: bool,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let mut held = Vec::new();
    for item in robs.try_iter()? {
        held.push(extract_words(&item?)?);
    }
    let mut pieces = Vec::with_capacity(held.len());
    for (i, w) in held.iter().enumerate() {
        let s = w.as_slice()?;
        if validate {
            match RobFragment::parse(s) {
                Ok(r) if r.size_words() == s.len() => {}
                Ok(r) => {
                    return Err(FormatError::new_err(format!(
                        "ROB {i}: {} words given, the fragment says {}",
                        s.len(),
                        r.size_words()
                    )))
                }
                Err(e) => {
                    let err = format_err(py, &e);
                    return Err(FormatError::new_err(format!("ROB {i}: {}", err.value(py))));
                }
            }
        }
        pieces.push(s);
    }
    let tags_owned = stream_tags.unwrap_or_default();
    let tags: Vec<StreamTag<'_>> = tags_owned
        .iter()
        .map(|(name, stream_type)| StreamTag { name, stream_type })
        .collect();
    let status = word_list(status, &[0])?;
    let (l1, l2, ef) = (
        word_list(l1_info, &[])?,
        word_list(l2_info, &[])?,
        word_list(ef_info, &[])?,
    );
    let mut out = Vec::new();
    EventBuilder {
        source_id: SourceId(source_id),
        status: &status,
        checksum: parse_checksum(checksum)?,
        bc_time_seconds: bc_time.0,
        bc_time_nanoseconds: bc_time.1,
        global_id,
        run_type,
        run_number,
        lumi_block,
        extended_l1id: l1id.unwrap_or(global_id as u32),
        bcid,
        l1_trigger_type,
        l1_info: &l1,
        l2_info: &l2,
        ef_info: &ef,
        stream_tags: &tags,
        robs: &pieces,
        ..EventBuilder::default()
    }
    .write_vec(&mut out)
    .map_err(|e| format_err(py, &e))?;
    Ok(PyArray1::from_vec(py, out))
}

/// The synthetic event `global_id` exactly as `rodeo gen events` makes it (same ROB mix,
/// counter payloads, sizes), as a uint32 array.
#[pyfunction]
#[pyo3(signature = (global_id, *, robs=16, checksum="adler32", run_number=1,
    stream=("physics_Main".to_owned(), "physics".to_owned()), size_scale=1.0))]
fn synth_event<'py>(
    py: Python<'py>,
    global_id: u64,
    robs: usize,
    checksum: &str,
    run_number: u32,
    stream: (String, String),
    size_scale: f64,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let mut s = EventSynth::new(SynthConfig {
        robs,
        checksum: parse_checksum(checksum)?,
        run_number,
        size_scale,
        stream,
    });
    let mut out = Vec::new();
    s.event(global_id, &mut out)
        .map_err(|e| format_err(py, &e))?;
    Ok(PyArray1::from_vec(py, out))
}

/// Word `i` of the counter payload of (`source_id`, `l1id`) (the synthetic data's pattern).
#[pyfunction]
fn counter_word(source_id: u32, l1id: u32, i: u32) -> u32 {
    synth::counter_word(source_id, l1id, i)
}

/// Index of the first word of `data` that is not the counter payload of (`source_id`,
/// `l1id`), or None if every word is right.
#[pyfunction]
fn check_counter(data: &Bound<'_, PyAny>, source_id: u32, l1id: u32) -> PyResult<Option<usize>> {
    let words = extract_words(data)?;
    Ok(synth::check_counter(words.as_slice()?, source_id, l1id))
}

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
    m.add("FORMAT_VERSION", rodeo_format::rawfile::FORMAT_VERSION)?;
    Ok(())
}
