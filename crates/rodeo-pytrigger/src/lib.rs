//! Trigger algorithms written in Python: a callable, run by a DCM through the
//! [`TriggerAlgorithm`] trait.
//!
//! **Must not depend on** the control, run or studies crates or the binary: it is a trigger
//! algorithm, handed to the DCMs by whoever builds the partition (`rodeo run --trigger`).
//!
//! ```python
//! # mytrigger.py
//! import numpy as np
//!
//! def decide(event):
//!     """Accept events whose first RoI ROB has a large first data word."""
//!     words = np.frombuffer(event.robs[event.rois[0]], dtype="<u4")
//!     return bool(words[-4] & 1)
//! ```
//!
//! `rodeo run --trigger mytrigger.py:decide` (a binary built with `--features python`) loads the
//! callable once per DCM and calls it for every event with a [`PyEvent`]: `global_id`, `l1id`,
//! `bcid`, `trigger_type`, `rois` (the RoI ROB ids) and `robs` (a dict from ROB source id to the
//! ROB fragment's bytes, little-endian 32-bit words, for the ROBs fetched so far).
//!
//! # What the callable returns
//!
//! | return value                 | verdict                                      |
//! |------------------------------|----------------------------------------------|
//! | `True`                       | accept into stream 0                         |
//! | `False` or `None`            | reject                                       |
//! | an `int` n (not a bool)      | accept into stream n                         |
//! | a list or tuple of ints      | fetch these ROBs and call again              |
//!
//! # Errors
//!
//! A callable that raises, or returns anything else, does not stop the run and loses no event:
//! the event is accepted into stream 0 (the debug-stream policy of the online farms: an event
//! the algorithm could not judge is kept for inspection), the error is counted in
//! [`PyTriggerStats::errors`] and the first few are printed with their traceback.
//!
//! # Threads and the GIL
//!
//! Each DCM thread holds its own [`PyTrigger`]; a call takes the GIL for its duration, so
//! Python algorithms of several DCMs run one at a time (CPython's rule), while the DCMs'
//! Rust work (requests, building, sending) goes on in parallel. The interpreter is started on
//! first use and lives until the process ends.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyTuple};
use rodeo_dataflow::trigger::{EventInfo, Outcome, TriggerAlgorithm, Verdict};
use rodeo_format::checksum::words_as_bytes;
use rodeo_format::fragment::RobFragment;

/// Errors printed with their traceback before the rest are only counted.
const PRINTED_ERRORS: u64 = 5;

/// Why a Python trigger could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The specification is not `FILE.py:FUNCTION` or `MODULE:FUNCTION`.
    #[error(
        "trigger {spec:?}: expected FILE.py:FUNCTION or MODULE:FUNCTION (e.g. mytrigger.py:decide)"
    )]
    Spec {
        /// The specification given.
        spec: String,
    },
    /// Python raised while importing the module or looking up the callable.
    #[error("trigger {spec:?}: {message}")]
    Python {
        /// The specification given.
        spec: String,
        /// Python's exception, with its traceback when there is one.
        message: String,
    },
}

/// Counters of a Python trigger (shared by the [`PyTrigger`]s made from one loader).
#[derive(Debug, Default)]
pub struct PyTriggerStats {
    /// Calls of the callable.
    pub calls: AtomicU64,
    /// Events accepted.
    pub accepts: AtomicU64,
    /// Events rejected.
    pub rejects: AtomicU64,
    /// Calls that asked for more ROBs.
    pub more_robs: AtomicU64,
    /// Calls that raised or returned something unusable (the event was accepted, stream 0).
    pub errors: AtomicU64,
}

/// The event as the Python callable sees it.
#[pyclass(module = "rodeo.trigger", name = "Event", frozen)]
pub struct PyEvent {
    /// Global event id.
    #[pyo3(get)]
    global_id: u64,
    /// Extended L1ID.
    #[pyo3(get)]
    l1id: u32,
    /// Bunch-crossing id.
    #[pyo3(get)]
    bcid: u32,
    /// L1 trigger type.
    #[pyo3(get)]
    trigger_type: u32,
    /// The RoI ROB ids.
    #[pyo3(get)]
    rois: Vec<u32>,
    /// ROB source id -> the ROB fragment's bytes.
    #[pyo3(get)]
    robs: Py<PyDict>,
}

#[pymethods]
impl PyEvent {
    fn __repr__(&self) -> String {
        format!(
            "<rodeo.trigger.Event global_id={} l1id={:#x} rois={:?}>",
            self.global_id, self.l1id, self.rois
        )
    }
}

/// A loaded Python callable; [`PyTriggerLoader::make`] gives one [`PyTrigger`] per DCM.
#[derive(Debug, Clone)]
pub struct PyTriggerLoader {
    spec: String,
    callable: Arc<Py<PyAny>>,
    stats: Arc<PyTriggerStats>,
}

impl PyTriggerLoader {
    /// Loads `spec`: `path/to/file.py:function` (the file is run as a module) or
    /// `package.module:function` (imported from `sys.path`, which includes the current
    /// directory).
    pub fn load(spec: &str) -> Result<PyTriggerLoader, LoadError> {
        let (target, func) = spec
            .rsplit_once(':')
            .filter(|(t, f)| !t.is_empty() && !f.is_empty())
            .ok_or_else(|| LoadError::Spec {
                spec: spec.to_string(),
            })?;
        let callable = Python::attach(|py| -> PyResult<Py<PyAny>> {
            let module = if target.ends_with(".py") {
                load_file(py, Path::new(target))?
            } else {
                let sys = py.import("sys")?;
                let path = sys.getattr("path")?;
                path.call_method1("insert", (0, "."))?;
                py.import(target)?.into_any()
            };
            let f = module.getattr(func)?;
            if !f.is_callable() {
                return Err(PyValueError::new_err(format!(
                    "{func} in {target} is not callable"
                )));
            }
            Ok(f.unbind())
        })
        .map_err(|e| LoadError::Python {
            spec: spec.to_string(),
            message: describe(&e),
        })?;
        Ok(PyTriggerLoader {
            spec: spec.to_string(),
            callable: Arc::new(callable),
            stats: Arc::default(),
        })
    }

    /// A trigger algorithm calling this callable (one per DCM).
    pub fn make(&self) -> PyTrigger {
        PyTrigger {
            loader: self.clone(),
        }
    }

    /// The counters, shared by every [`PyTrigger`] made from this loader.
    pub fn stats(&self) -> &Arc<PyTriggerStats> {
        &self.stats
    }

    /// The specification it was loaded from.
    pub fn spec(&self) -> &str {
        &self.spec
    }
}

fn load_file<'py>(py: Python<'py>, path: &Path) -> PyResult<Bound<'py, PyAny>> {
    let util = py.import("importlib.util")?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("rodeo_trigger")
        .to_string();
    let spec = util.call_method1("spec_from_file_location", (name.as_str(), path))?;
    if spec.is_none() {
        return Err(PyValueError::new_err(format!(
            "cannot load {} as a Python module",
            path.display()
        )));
    }
    let module = util.call_method1("module_from_spec", (&spec,))?;
    // Registered before running it, as `import` does, so the module can import itself.
    py.import("sys")?
        .getattr("modules")?
        .set_item(name.as_str(), &module)?;
    spec.getattr("loader")?
        .call_method1("exec_module", (&module,))?;
    Ok(module)
}

/// The exception's text with its traceback.
fn describe(e: &PyErr) -> String {
    Python::attach(|py| {
        let tb = e
            .traceback(py)
            .and_then(|tb| tb.format().ok())
            .unwrap_or_default();
        format!("{tb}{e}")
    })
}

/// A [`TriggerAlgorithm`] calling a Python callable; see the module docs.
#[derive(Debug)]
pub struct PyTrigger {
    loader: PyTriggerLoader,
}

impl PyTrigger {
    fn call(&self, event: &EventInfo<'_>, robs: &[RobFragment<'_>]) -> PyResult<Verdict> {
        Python::attach(|py| {
            let dict = PyDict::new(py);
            for rob in robs {
                let bytes = PyBytes::new(py, words_as_bytes(rob.words()));
                dict.set_item(rob.source_id().0, bytes)?;
            }
            let ev = Py::new(
                py,
                PyEvent {
                    global_id: event.global_id,
                    l1id: event.l1id,
                    bcid: event.bcid,
                    trigger_type: event.trigger_type,
                    rois: event.rois.to_vec(),
                    robs: dict.unbind(),
                },
            )?;
            let answer = self.loader.callable.bind(py).call1((ev,))?;
            verdict_of(&answer)
        })
    }
}

/// Converts the callable's return value (see the module docs).
fn verdict_of(answer: &Bound<'_, PyAny>) -> PyResult<Verdict> {
    if answer.is_none() {
        return Ok(Verdict::Reject);
    }
    if let Ok(b) = answer.cast::<PyBool>() {
        return Ok(if b.is_true() {
            Verdict::Accept { stream: 0 }
        } else {
            Verdict::Reject
        });
    }
    if let Ok(n) = answer.extract::<u32>() {
        return Ok(Verdict::Accept { stream: n });
    }
    if answer.cast::<PyList>().is_ok() || answer.cast::<PyTuple>().is_ok() {
        let ids: Vec<u32> = answer.extract()?;
        return Ok(Verdict::NeedRobs(ids));
    }
    Err(PyValueError::new_err(format!(
        "the trigger returned {}: expected a bool, None, a stream number or a list of ROB ids",
        answer.repr().map(|r| r.to_string()).unwrap_or_default()
    )))
}

impl TriggerAlgorithm for PyTrigger {
    fn decide(&mut self, event: &EventInfo<'_>, robs: &[RobFragment<'_>]) -> Outcome {
        let stats = &self.loader.stats;
        stats.calls.fetch_add(1, Ordering::Relaxed);
        let verdict = match self.call(event, robs) {
            Ok(v) => v,
            Err(e) => {
                let n = stats.errors.fetch_add(1, Ordering::Relaxed) + 1;
                if n <= PRINTED_ERRORS {
                    eprintln!(
                        "python trigger {} failed on global id {} (event kept, stream 0): {}",
                        self.loader.spec,
                        event.global_id,
                        describe(&e)
                    );
                    if n == PRINTED_ERRORS {
                        eprintln!("python trigger: further errors are only counted");
                    }
                }
                Verdict::Accept { stream: 0 }
            }
        };
        match &verdict {
            Verdict::Accept { .. } => stats.accepts.fetch_add(1, Ordering::Relaxed),
            Verdict::Reject => stats.rejects.fetch_add(1, Ordering::Relaxed),
            Verdict::NeedRobs(_) => stats.more_robs.fetch_add(1, Ordering::Relaxed),
        };
        Outcome {
            verdict,
            hold: Duration::ZERO,
        }
    }

    fn name(&self) -> &str {
        "python"
    }
}

/// Runs `code` as a module named `name` and returns it (for tests and inline triggers).
pub fn load_source(name: &str, code: &str, func: &str) -> Result<PyTriggerLoader, LoadError> {
    let spec = format!("<{name}>:{func}");
    let err = |message: String| LoadError::Python {
        spec: spec.clone(),
        message,
    };
    let code_c = CString::new(code).map_err(|e| err(e.to_string()))?;
    let file_c = CString::new(format!("{name}.py")).map_err(|e| err(e.to_string()))?;
    let name_c = CString::new(name).map_err(|e| err(e.to_string()))?;
    let callable = Python::attach(|py| -> PyResult<Py<PyAny>> {
        let m = PyModule::from_code(py, &code_c, &file_c, &name_c)?;
        Ok(m.getattr(func)?.unbind())
    })
    .map_err(|e| err(describe(&e)))?;
    Ok(PyTriggerLoader {
        spec,
        callable: Arc::new(callable),
        stats: Arc::default(),
    })
}
