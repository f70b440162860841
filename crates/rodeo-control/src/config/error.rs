//! [`ConfigError`]: what went wrong with a partition configuration, naming the field;
//! [`bad`], the out-of-range error every section's check makes; and [`Checks`], where the
//! checks of a configuration collect every error they find (not only the first). Its own
//! module, importing nothing of `config`, so that the sections defined elsewhere (`alarms`,
//! `monitoring`) can use it without importing `config`, which includes them.

use std::borrow::Cow;

/// What went wrong with a configuration, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML does not parse (toml's message names the line and shows it).
    #[error("configuration {source_name}: {message}")]
    Parse {
        /// The file (or "built-in default").
        source_name: String,
        /// What toml said.
        message: String,
    },
    /// A field of the wrong type, an unknown field or an unknown name, in words
    /// (`configuration t.toml, line 2: `dcm.slots` = -1: a whole number >= 0 is needed`).
    #[error("configuration {source_name}, line {line}: `{field}` {problem}")]
    Field {
        /// The file (or "built-in default").
        source_name: String,
        /// The line of the value (1-based).
        line: usize,
        /// The field, as `section.name` (`alarms[0].name` in a list of tables).
        field: String,
        /// What is wrong and what is needed (`= -1: a whole number >= 0 is needed`).
        problem: String,
    },
    /// A value is out of range.
    #[error("configuration field `{field}` = {value}: {allowed}")]
    Value {
        /// The field, as `section.name`.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: Cow<'static, str>,
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
    /// Several errors, in the order of the file's sections: shown one per line.
    #[error("{}", lines(.0))]
    Many(Vec<ConfigError>),
}

impl ConfigError {
    /// Every error this one holds, one per entry (a [`ConfigError::Many`] opened up).
    pub fn errors(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Many(v) => v.iter().flat_map(ConfigError::errors).collect(),
            e => vec![e],
        }
    }

    /// The fields named, in order (`dcm.slots`, `alarms.metric`, `run.output`, ...; a parse
    /// error names none).
    pub fn fields(&self) -> Vec<String> {
        self.errors()
            .into_iter()
            .filter_map(|e| match e {
                ConfigError::Value { field, .. } => Some((*field).to_string()),
                ConfigError::Field { field, .. } => Some(field.clone()),
                ConfigError::Output { .. } => Some("run.output".into()),
                ConfigError::Directory { .. } => Some("logger.directories".into()),
                ConfigError::Parse { .. } | ConfigError::Many(_) => None,
            })
            .collect()
    }
}

/// The errors of a [`ConfigError::Many`], one per line.
fn lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A number as a value in an error: as written for ordinary sizes, in scientific notation
/// when very large or very small (`1e300`, not three hundred digits).
pub(crate) fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&v.abs()) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// The [`ConfigError::Value`] of `field` = `value`, with what is allowed.
pub(crate) fn bad(
    field: &'static str,
    value: impl ToString,
    allowed: impl Into<Cow<'static, str>>,
) -> ConfigError {
    ConfigError::Value {
        field,
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

/// The errors the checks of a configuration found, every one of them: each check adds what it
/// finds and goes on, and [`Checks::finish`] makes one [`ConfigError`] of them.
#[derive(Debug, Default)]
pub struct Checks {
    errors: Vec<ConfigError>,
}

impl Checks {
    /// No error yet.
    pub fn new() -> Checks {
        Checks::default()
    }

    /// Adds `error`.
    pub fn push(&mut self, error: ConfigError) {
        match error {
            ConfigError::Many(v) => self.errors.extend(v),
            e => self.errors.push(e),
        }
    }

    /// Adds the [`bad`] error of `field` = `value` with what is allowed.
    pub fn bad(
        &mut self,
        field: &'static str,
        value: impl ToString,
        allowed: impl Into<Cow<'static, str>>,
    ) {
        self.push(bad(field, value, allowed));
    }

    /// Adds the error of `result`, if any.
    pub fn check(&mut self, result: Result<(), ConfigError>) {
        if let Err(e) = result {
            self.push(e);
        }
    }

    /// Whether an error was found for `field`.
    pub fn has(&self, field: &str) -> bool {
        self.errors
            .iter()
            .any(|e| matches!(e, ConfigError::Value { field: f, .. } if *f == field))
    }

    /// Whether an error was found for any of `fields`: a check across fields skips then, so
    /// that a value refused on its own is said once, by its own name.
    pub fn has_any(&self, fields: &[&str]) -> bool {
        fields.iter().any(|f| self.has(f))
    }

    /// Whether no error was found.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// `Ok` without errors, the error itself when there is one, [`ConfigError::Many`] for
    /// several.
    pub fn finish(mut self) -> Result<(), ConfigError> {
        match self.errors.len() {
            0 => Ok(()),
            1 => Err(self.errors.remove(0)),
            _ => Err(ConfigError::Many(self.errors)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_errors_show_one_per_line_and_one_stays_itself() {
        let mut c = Checks::new();
        assert!(c.is_empty());
        c.bad("dcm.slots", 0, "1..=4096");
        let one = c.finish().unwrap_err();
        assert!(matches!(
            one,
            ConfigError::Value {
                field: "dcm.slots",
                ..
            }
        ));
        let mut c = Checks::new();
        c.bad("dcm.slots", 0, "1..=4096");
        c.push(ConfigError::Many(vec![
            bad("ros.nodes", 0, "1..=32"),
            bad("run.seconds", -1, format!("{} or more", 0)),
        ]));
        assert!(c.has("ros.nodes") && !c.has("ros.channels"));
        let many = c.finish().unwrap_err();
        let text = many.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert_eq!(
            text.lines().next(),
            Some("configuration field `dcm.slots` = 0: 1..=4096")
        );
        assert_eq!(many.fields(), ["dcm.slots", "ros.nodes", "run.seconds"]);
        assert_eq!(many.errors().len(), 3);
    }
}
