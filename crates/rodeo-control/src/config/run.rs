//! `[run]`: the run's number, its end (events or seconds), where its files go, the memory
//! it may take, and its words (comment, run type, shifter).

use serde::{Deserialize, Serialize};

use super::error::{num, Checks};

/// The longest `run.seconds`: a year (a larger number is a typing error, and a run limit past
/// it never comes); the command line's `--seconds` limit too.
pub const MAX_RUN_SECONDS: f64 = rodeo_ros::cli_values::MAX_SECONDS;

/// `[run]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Run number.
    pub number: u32,
    /// L1 accepts to produce (0: no limit).
    pub events: u64,
    /// Seconds to run (0: no limit).
    pub seconds: f64,
    /// Output directory.
    pub output: String,
    /// The memory the partition may take on each host, in bytes (0: what the machine has
    /// available); `rodeo config check` and `rodeo run` refuse a larger estimate
    /// ([`super::PartitionConfig::estimate`]).
    pub memory_budget_bytes: u64,
    /// A comment on the run (what it is for), in the run database, `summary.json` and the
    /// files (EventStorage free string `Comment=`). `rodeo serve` takes it at `start`.
    pub comment: String,
    /// The run's type (`physics`, `calibration`, `cosmics`...: letters, digits, `_`, `-`).
    pub run_type: String,
    /// Who is on shift.
    pub shifter: String,
    /// Where the partition's threads run ([`CpuPlan`]).
    pub cpu_plan: CpuPlan,
}

/// `run.cpu_plan`: the CPUs the partition's threads run on, on each host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPlan {
    /// Wherever the kernel puts them.
    Off,
    /// Each readout node's core thread on a CPU of its own (the host's last CPUs the process
    /// may use), every other thread of the partition on the remaining ones; off when the host
    /// has no CPU left for the others, the partition spans hosts, or the input is the SW ROD
    /// (its builder threads want every CPU). The default.
    #[default]
    Auto,
}

/// Longest `run.comment`, in bytes.
pub const MAX_COMMENT_BYTES: usize = 1000;
/// Longest `run.run_type` and `run.shifter`, in bytes.
pub const MAX_WORD_BYTES: usize = 64;

/// A run's words: what the operator says about it at start ([`RunConfig`]'s `comment`,
/// `run_type` and `shifter`). Empty strings: not given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunWords {
    /// `run.comment`.
    pub comment: String,
    /// `run.run_type`.
    pub run_type: String,
    /// `run.shifter`.
    pub shifter: String,
}

impl RunWords {
    /// Whether no word is given.
    pub fn is_empty(&self) -> bool {
        self.comment.is_empty() && self.run_type.is_empty() && self.shifter.is_empty()
    }

    /// The first thing wrong with the words (too long, control characters, a run type that is
    /// not a word), naming the field.
    pub fn check(&self) -> Result<(), String> {
        let mut c = Checks::new();
        check_words(self, &mut c);
        c.finish().map_err(|e| e.to_string())
    }

    /// The words as EventStorage free strings (`Comment=...`, `RunType=...`, `Shifter=...`),
    /// the ones given only.
    pub fn free_strings(&self) -> Vec<String> {
        [
            ("Comment", &self.comment),
            ("RunType", &self.run_type),
            ("Shifter", &self.shifter),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
    }
}

/// Whether `ch` would not show as itself in a table or a terminal: a control character, or an
/// invisible or formatting one (bidirectional overrides and isolates, zero-width and filler
/// characters, line and paragraph separators, variation selectors, tags, the byte-order
/// mark): a comment holding U+202E was printed reversed by `rodeo runs`, a way to make a run's
/// line say what it does not (two QA passes, 2026-12-07).
pub fn hides_text(ch: char) -> bool {
    ch.is_control()
        || matches!(
            ch,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

fn check_words(w: &RunWords, c: &mut Checks) {
    let quoted = |s: &str| format!("{:?}", s.chars().take(40).collect::<String>());
    for (field, value, max) in [
        ("run.comment", &w.comment, MAX_COMMENT_BYTES),
        ("run.run_type", &w.run_type, MAX_WORD_BYTES),
        ("run.shifter", &w.shifter, MAX_WORD_BYTES),
    ] {
        if value.len() > max || value.chars().any(hides_text) {
            c.bad(
                field,
                quoted(value),
                format!(
                    "at most {max} bytes of text without control or invisible formatting \
                     characters (bidirectional overrides, zero-width ones)"
                ),
            );
        }
    }
    if !w
        .run_type
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        c.bad(
            "run.run_type",
            quoted(&w.run_type),
            "a word of letters, digits, `_` and `-` (physics, calibration, cosmics)",
        );
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            number: 1,
            events: 100_000,
            seconds: 0.0,
            output: "rodeo-output".into(),
            memory_budget_bytes: 0,
            comment: String::new(),
            run_type: String::new(),
            shifter: String::new(),
            cpu_plan: CpuPlan::Auto,
        }
    }
}

impl RunConfig {
    /// The run's words.
    pub fn words(&self) -> RunWords {
        RunWords {
            comment: self.comment.clone(),
            run_type: self.run_type.clone(),
            shifter: self.shifter.clone(),
        }
    }

    /// Sets the run's words.
    pub fn set_words(&mut self, w: RunWords) {
        self.comment = w.comment;
        self.run_type = w.run_type;
        self.shifter = w.shifter;
    }

    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if !(0.0..=MAX_RUN_SECONDS).contains(&self.seconds) {
            c.bad(
                "run.seconds",
                num(self.seconds),
                "a number of seconds >= 0 (0: no limit), at most 31536000 (a year)",
            );
        }
        if self.output.is_empty() {
            c.bad("run.output", "\"\"", "a directory path");
        }
        if self.memory_budget_bytes != 0 && self.memory_budget_bytes < 64 << 20 {
            c.bad(
                "run.memory_budget_bytes",
                self.memory_budget_bytes,
                "0 (what the machine has available) or at least 67108864 (64 MiB)",
            );
        }
        check_words(&self.words(), c);
    }
}

#[cfg(test)]
mod tests {
    use super::RunWords;

    /// Control characters and invisible formatting ones (a right-to-left override printed a
    /// comment reversed in `rodeo runs`) are refused in every word, naming the field; plain
    /// text in any script passes.
    #[test]
    fn words_that_would_hide_their_text_are_refused() {
        for bad in [
            "a\u{202E}b",
            "x\u{200B}y",
            "\u{2066}z",
            "bom\u{FEFF}",
            "tab\there",
            "soft\u{00AD}hyphen",
            "tag\u{E0041}",
            "line\u{2028}sep",
            "filler\u{3164}",
            "vs\u{FE0F}",
        ] {
            let w = RunWords {
                comment: bad.into(),
                ..RunWords::default()
            };
            let e = w.check().unwrap_err();
            assert!(e.contains("run.comment"), "{bad:?}: {e}");
        }
        let w = RunWords {
            comment: "HV scan, secteur 3 (Überprüfung), 測試".into(),
            shifter: "Åsa".into(),
            ..RunWords::default()
        };
        w.check().unwrap();
    }
}
