//! Reading a configuration file, bounded: a device (`/dev/zero`), a pipe that never ends or a
//! wrong multi-gigabyte file is refused after [`MAX_CONFIG_FILE_BYTES`] instead of read until
//! the machine runs out of memory.

use std::io::Read as _;
use std::path::Path;

/// The longest configuration file read: a partition's configuration is a few KiB (the
/// commented default about 15 KiB), so 1 MiB leaves room for any real one.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

/// Why a configuration file could not be read (before its TOML is looked at).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file cannot be opened or read.
    #[error("cannot read configuration {path}: {source}")]
    Io {
        /// The file as given.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The file goes on past [`MAX_CONFIG_FILE_BYTES`].
    #[error(
        "configuration {path} is longer than {limit} bytes (a partition configuration is a few \
         KiB): is it the right file? (`rodeo config default` prints one)"
    )]
    TooLong {
        /// The file as given.
        path: String,
        /// [`MAX_CONFIG_FILE_BYTES`].
        limit: u64,
    },
    /// The file is not UTF-8 text.
    #[error("configuration {path} is not UTF-8 text (byte {at} is not): is it the right file?")]
    NotText {
        /// The file as given.
        path: String,
        /// The offset of the first byte that is not UTF-8.
        at: usize,
    },
}

/// The text of the configuration file `path`, at most [`MAX_CONFIG_FILE_BYTES`] read.
pub fn read_config_file(path: &Path) -> Result<String, ConfigFileError> {
    read_bounded(path, MAX_CONFIG_FILE_BYTES)
}

fn read_bounded(path: &Path, limit: u64) -> Result<String, ConfigFileError> {
    let name = || path.display().to_string();
    let io = |source| ConfigFileError::Io {
        path: name(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ConfigFileError::TooLong {
            path: name(),
            limit,
        });
    }
    String::from_utf8(bytes).map_err(|e| ConfigFileError::NotText {
        path: name(),
        at: e.utf8_error().valid_up_to(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endless device is refused after the limit, not read on: the test would run out of
    /// memory (or time) otherwise.
    #[test]
    fn an_endless_device_is_refused() {
        let e = read_config_file(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(e, ConfigFileError::TooLong { .. }), "{e}");
        assert!(e.to_string().contains("/dev/zero"), "{e}");
    }

    #[test]
    fn text_up_to_the_limit_is_read_and_bytes_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, "[ros]\nnodes = 2\n").unwrap();
        assert_eq!(read_bounded(&p, 16).unwrap(), "[ros]\nnodes = 2\n");
        assert!(matches!(
            read_bounded(&p, 15),
            Err(ConfigFileError::TooLong { limit: 15, .. })
        ));
        std::fs::write(&p, b"[ros]\n\xff\n").unwrap();
        assert!(matches!(
            read_bounded(&p, 16),
            Err(ConfigFileError::NotText { at: 6, .. })
        ));
        let missing = dir.path().join("none.toml");
        let e = read_config_file(&missing).unwrap_err();
        assert!(matches!(e, ConfigFileError::Io { .. }), "{e}");
        assert!(e.to_string().contains("none.toml"), "{e}");
    }
}
