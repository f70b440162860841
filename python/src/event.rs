//! `Event` and `Rob`: a full event of any eformat version (its words a read-only NumPy array,
//! its header fields parsed once) and its ROB fragments (views of the event's array); and the
//! words Python gives (arrays, bytes, an `Event` or a `Rob`).

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyList};

use rodeo_files::datafile::{FileEvent, RobRef};
use rodeo_format::checksum::ChecksumType;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::{FragmentError, FullEvent, RobFragment, SourceId};

use crate::errors::*;
use crate::words::*;

/// Header fields of a full event, parsed once.
pub(crate) struct Header {
    pub(crate) source_id: u32,
    pub(crate) global_id: u64,
    pub(crate) extended_l1id: u32,
    pub(crate) bcid: u32,
    pub(crate) run_number: u32,
    pub(crate) run_type: u32,
    pub(crate) lumi_block: u32,
    pub(crate) l1_trigger_type: u32,
    pub(crate) bc_time: (u32, u32),
    pub(crate) status_words: Vec<u32>,
    pub(crate) checksum_type: ChecksumType,
    pub(crate) compression: u32,
    pub(crate) stream_tags: Vec<(String, String)>,
    /// (start, len) of L1, L2, EF info in the words.
    pub(crate) lists: [(usize, usize); 3],
}

pub(crate) fn parse_header(words: &[u32]) -> Result<Header, FragmentError> {
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
    pub(crate) words: Py<PyArray1<u32>>,
    pub(crate) header: Result<Header, FragmentError>,
    /// For an eformat 3/4 event read from a file: its identifiers and ROB ranges.
    pub(crate) legacy: Option<Legacy>,
    pub(crate) robs: PyOnceLock<Py<PyList>>,
    #[pyo3(get)]
    /// Index of the event in its file (0-based), or None for an event not read from a file.
    pub(crate) index: Option<u64>,
    #[pyo3(get)]
    /// Byte offset of the event record in its file, or None.
    pub(crate) offset: Option<u64>,
    #[pyo3(get)]
    /// The record flags (bit 0: compressed), 0 for an event not read from a file.
    pub(crate) flags: u32,
}

/// What the data-file reader found in an eformat 3/4 event.
pub(crate) struct Legacy {
    pub(crate) eformat: u32,
    pub(crate) run_number: u32,
    pub(crate) l1id: u32,
    pub(crate) global_id: Option<u64>,
    pub(crate) robs: Vec<RobRef>,
}

impl Event {
    /// An event from the data-file reader: eformat 5 events as [`Event::new`]; eformat 3/4
    /// events keep the reader's identifiers and ROB ranges (their headers are not eformat 5's).
    pub(crate) fn from_file_event(py: Python<'_>, e: FileEvent, flags: u32) -> PyResult<Event> {
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

    pub(crate) fn new(
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

    pub(crate) fn header(&self, py: Python<'_>) -> PyResult<&Header> {
        self.header.as_ref().map_err(|e| format_err(py, e))
    }

    pub(crate) fn make_robs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
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
    pub(crate) parent: Py<PyArray1<u32>>,
    /// (start, len) of the ROB and of the ROD data in `parent`.
    pub(crate) range: (usize, usize),
    pub(crate) data_range: (usize, usize),
    /// The views, made on first access (most loops touch only some of them).
    pub(crate) words: PyOnceLock<Py<PyArray1<u32>>>,
    pub(crate) data: PyOnceLock<Py<PyArray1<u32>>>,
    #[pyo3(get)]
    /// Source identifier.
    pub(crate) source_id: u32,
    #[pyo3(get)]
    /// All ROB status words.
    pub(crate) status_words: Vec<u32>,
    #[pyo3(get)]
    /// Extended L1ID of the ROD.
    pub(crate) extended_l1id: u32,
    #[pyo3(get)]
    /// Bunch-crossing id of the ROD.
    pub(crate) bcid: u16,
    #[pyo3(get)]
    /// Run number of the ROD.
    pub(crate) run_number: u32,
    #[pyo3(get)]
    /// L1 trigger type of the ROD.
    pub(crate) trigger_type: u8,
    #[pyo3(get)]
    /// ROD status words.
    pub(crate) rod_status_words: Vec<u32>,
    pub(crate) checksum: ChecksumType,
    /// Word offset of the ROB inside its event, if it came from one.
    #[pyo3(get)]
    pub(crate) offset: Option<usize>,
}

impl Rob {
    /// A `Rob` over `rob`, which lies inside `all` (the words of `arr`).
    pub(crate) fn new(
        arr: &Bound<'_, PyArray1<u32>>,
        all: &[u32],
        rob: &RobFragment<'_>,
    ) -> PyResult<Rob> {
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
    pub(crate) fn from_ref(arr: &Bound<'_, PyArray1<u32>>, all: &[u32], r: &RobRef) -> Rob {
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
    pub(crate) fn view_of(
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
    pub(crate) fn words(&self, py: Python<'_>) -> PyResult<Py<PyArray1<u32>>> {
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

/// Words given from Python: a uint32 NumPy array (borrowed, no copy) or bytes (copied, since
/// bytes need not be aligned for `u32`).
pub(crate) enum Words<'py> {
    Array(PyReadonlyArray1<'py, u32>),
    Owned(Vec<u32>),
}

impl Words<'_> {
    pub(crate) fn as_slice(&self) -> PyResult<&[u32]> {
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
pub(crate) fn extract_words<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Words<'py>> {
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
pub(crate) fn word_list(obj: Option<&Bound<'_, PyAny>>, default: &[u32]) -> PyResult<Vec<u32>> {
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
