//! Writing: `Writer`, rodeo's raw-file writer as a context manager.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use rodeo_files::rawfile::{RawFileConfig, RawFileError as RustRawFileError, RawFileWriter};

use crate::errors::*;
use crate::event::*;

/// Writes events into raw-data files (rotation by size and count, `.writing` names renamed on
/// a clean close, fsync). A context manager: leaving the `with` block closes the last file.
#[pyclass(module = "rodeo")]
pub struct Writer {
    pub(crate) writer: Option<RawFileWriter>,
    pub(crate) files: Vec<String>,
}

#[pymethods]
impl Writer {
    /// Opens the first file in `directory`, which is created (with its parents) if missing.
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
        std::fs::create_dir_all(&directory).map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!(
                "rodeo.Writer: cannot create the directory {}: {e}",
                directory.display()
            ))
        })?;
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
