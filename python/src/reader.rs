//! Reading: `RawFile` (either container, chosen by the first record), `open` and `verify`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use rodeo_files::datafile::{detect_container, Container, DataFileReader, FileInfo};
use rodeo_files::rawfile::{FileStart, RawFileReader};

use crate::errors::*;
use crate::event::*;
use crate::words::*;

pub(crate) fn start_dict<'py>(py: Python<'py>, s: &FileStart) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", s.version)?;
    d.set_item("sequence", s.sequence)?;
    d.set_item("creation_time_ns", s.creation_time_ns)?;
    d.set_item("run", s.run)?;
    d.set_item("lumiblock", s.lumiblock)?;
    d.set_item("app_name", &s.app_name)?;
    d.set_item("stream_name", &s.stream_name)?;
    // Format version 2 and later: the record's own Adler-32 was checked when the file opened.
    d.set_item("checksummed", s.checksummed())?;
    Ok(d)
}

/// The reader behind a [`RawFile`]: rodeo's own, or the data-file reader for EventStorage.
pub(crate) enum Reader {
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
    pub(crate) reader: Option<Reader>,
    /// Decompress compressed events as they are read.
    pub(crate) decompress: bool,
    pub(crate) path: String,
    pub(crate) info: FileInfo,
    /// Summary once the end record was read: events, event bytes, adler (rodeo), file bytes.
    pub(crate) done: Option<(u64, u64, Option<u32>, u64)>,
    pub(crate) events: u64,
}

impl RawFile {
    pub(crate) fn reader(&mut self) -> PyResult<&mut Reader> {
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
pub(crate) fn open(
    py: Python<'_>,
    path: std::path::PathBuf,
    decompress: bool,
) -> PyResult<RawFile> {
    RawFile::py_new(py, path, decompress)
}

/// Reads and validates a whole file (structure, every record checksum, the end record);
/// returns its summary dict or raises `RawFileError`.
#[pyfunction]
pub(crate) fn verify<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
) -> PyResult<Bound<'py, PyDict>> {
    let s = py
        .detach(|| rodeo_files::rawfile::verify_file(&path))
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
