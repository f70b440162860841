//! Checks on this host of where a run's files go: `run.output` and every `logger.directories`
//! entry must be a directory this process may write in, or a path whose nearest existing parent
//! is one. One check ([`check_writable_dir`]) serves both; they differ in the error, which
//! names the field (and the entry).

use std::path::Path;

use super::error::ConfigError;
use super::PartitionConfig;

impl PartitionConfig {
    /// Checks on this host that `run.output` can take the run's files: an existing path must be
    /// a directory this process may write in; a path that does not exist yet needs its nearest
    /// existing parent to be one (the run creates the rest). Writability is tried, not guessed
    /// from mode bits: a probe file is created and removed.
    pub fn check_output(&self) -> Result<(), ConfigError> {
        check_writable_dir(Path::new(&self.run.output))
            .map_err(|(path, reason)| ConfigError::Output { path, reason })
    }

    /// Checks on this host that every `logger.directories` entry can take files, as
    /// [`PartitionConfig::check_output`] does for `run.output` (exists and writable, or
    /// creatable); the error names the entry.
    pub fn check_directories(&self) -> Result<(), ConfigError> {
        for entry in &self.logger.directories {
            check_writable_dir(Path::new(entry)).map_err(|(path, reason)| {
                ConfigError::Directory {
                    entry: entry.clone(),
                    path,
                    reason,
                }
            })?;
        }
        Ok(())
    }
}

/// Whether `out` can take files: an existing directory this process may write in, or a path
/// whose nearest existing parent is one (made when used). `Err((path checked, what is wrong))`.
fn check_writable_dir(out: &Path) -> Result<(), (String, String)> {
    let mut at = out;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return probe_writable(at),
            Ok(_) => {
                return Err((
                    at.display().to_string(),
                    if at == out {
                        "exists and is not a directory".into()
                    } else {
                        "a parent of the output path is not a directory".into()
                    },
                ))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                at = match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
            }
            Err(e) => return Err((at.display().to_string(), format!("cannot be read: {e}"))),
        }
    }
}

/// Creates and removes a probe file in `dir`: can this process write there?
/// `Err((dir, what is wrong))`.
fn probe_writable(dir: &Path) -> Result<(), (String, String)> {
    let probe = dir.join(format!(".rodeo-write-check-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err((
            dir.display().to_string(),
            format!("is a directory this process cannot write in: {e}"),
        )),
    }
}
