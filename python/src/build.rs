//! Building fragments from Python: ROBs, full events, synthetic events and their counter
//! payloads.

use numpy::PyArray1;
use pyo3::prelude::*;

use rodeo_format::fragment::{
    EventBuilder, RobBuilder, RobFragment, RobPayload, RodBuilder, SourceId, StatusPosition,
    StreamTag,
};
use rodeo_format::synth::{self, EventSynth, SynthConfig};

use crate::errors::*;
use crate::event::*;
use crate::words::*;

/// Builds one ROB fragment wrapping one ROD fragment around `data` (uint32 array or bytes);
/// returns its words as a uint32 array. Uses rodeo-format's builders.
#[pyfunction]
#[pyo3(signature = (source_id, data, *, run_number=0, l1id=0, bcid=0, trigger_type=0,
    detector_event_type=0, minor_version=0, status=None, rod_status=None, status_after_data=true,
    checksum="adler32"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_rob<'py>(
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
pub(crate) fn build_event<'py>(
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
pub(crate) fn synth_event<'py>(
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
pub(crate) fn counter_word(source_id: u32, l1id: u32, i: u32) -> u32 {
    synth::counter_word(source_id, l1id, i)
}

/// Index of the first word of `data` that is not the counter payload of (`source_id`,
/// `l1id`), or None if every word is right.
#[pyfunction]
pub(crate) fn check_counter(
    data: &Bound<'_, PyAny>,
    source_id: u32,
    l1id: u32,
) -> PyResult<Option<usize>> {
    let words = extract_words(data)?;
    Ok(synth::check_counter(words.as_slice()?, source_id, l1id))
}
