//! An error and its causes as one line for people ([`error_text`]), each cause said once.

/// `err` and its causes as one line, `what: why: why`, each cause said once: a cause whose
/// message the line already ends with is left out. Errors that put their source's message in
/// their own (thiserror's `#[error("... {0}")]` with `#[from]`) would otherwise print it twice,
/// as anyhow's `{:#}` does ("mmap of a 4 GB region failed: mmap of a 4 GB region failed: ...").
pub fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let said = cause.to_string();
        if said.is_empty() || text.ends_with(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("mmap of a 4096-byte region failed")]
    struct Mmap(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("readout node memory: {0}")]
    struct Node(#[from] Mmap);

    /// A message that repeats its source's is printed once; every other cause stays, in order.
    #[test]
    fn a_cause_repeated_by_its_error_is_said_once() {
        let io = std::io::Error::from_raw_os_error(12);
        let err = anyhow::Error::new(Node(Mmap(io))).context("in-process node");
        assert_eq!(format!("{err:#}").matches("mmap of").count(), 2, "{err:#}");
        let text = error_text(&err);
        assert_eq!(text.matches("mmap of").count(), 1, "{text}");
        assert!(text.starts_with("in-process node: readout node memory: mmap of a 4096-byte"));
        assert!(
            text.ends_with("Cannot allocate memory (os error 12)"),
            "{text}"
        );
        let plain = anyhow::anyhow!("disk full").context("writing run 7");
        assert_eq!(error_text(&plain), "writing run 7: disk full");
    }
}
