//! [`ConfigError`]: what went wrong with a partition configuration, naming the field, and
//! [`bad`], the out-of-range error every section's check makes. Its own module, importing
//! nothing of `config`, so that the sections defined elsewhere (`alarms`, `monitoring`) can use
//! it without importing `config`, which includes them.

/// What went wrong with a configuration, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML does not parse or has an unknown field (toml's message names it and the line).
    #[error("configuration {source_name}: {message}")]
    Parse {
        /// The file (or "built-in default").
        source_name: String,
        /// What toml said.
        message: String,
    },
    /// A value is out of range.
    #[error("configuration field `{field}` = {value}: {allowed}")]
    Value {
        /// The field, as `section.name`.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The output path cannot take the run's files on this host
    /// (`PartitionConfig::check_output`).
    #[error(
        "configuration field `run.output` = {path:?}: {reason} (give a writable directory, \
         or a path whose nearest existing parent is one)"
    )]
    Output {
        /// The path checked (the output, or its nearest existing parent).
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An output directory of the loggers cannot take files on this host
    /// (`PartitionConfig::check_output`).
    #[error(
        "configuration field `logger.directories` entry {entry:?}: {path}: {reason} (give a \
         writable directory, or a path whose nearest existing parent is one)"
    )]
    Directory {
        /// The entry as configured.
        entry: String,
        /// The path checked (the entry, or its nearest existing parent).
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The [`ConfigError::Value`] of `field` = `value`, with what is allowed.
pub(super) fn bad(field: &'static str, value: impl ToString, allowed: &'static str) -> ConfigError {
    ConfigError::Value {
        field,
        value: value.to_string(),
        allowed,
    }
}
