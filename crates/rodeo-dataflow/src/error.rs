//! The error every dataflow application returns: [`DataflowError`].

use rodeo_transport::endpoint::EndpointError;
use rodeo_transport::socket::TransportError;

/// Why a dataflow application failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataflowError {
    /// A socket operation failed.
    #[error("{app}: {what}: {source}")]
    Transport {
        /// The application.
        app: String,
        /// What it was doing.
        what: String,
        /// The error.
        #[source]
        source: TransportError,
    },
    /// An endpoint in the configuration is invalid.
    #[error("{app}: {source}")]
    Endpoint {
        /// The application.
        app: String,
        /// The error.
        #[source]
        source: EndpointError,
    },
    /// The configuration is invalid.
    #[error("{app}: invalid configuration: {reason}")]
    Config {
        /// The application.
        app: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing events failed.
    #[error("{app}: {source}")]
    Files {
        /// The application.
        app: String,
        /// The error.
        #[source]
        source: rodeo_files::rawfile::RawFileError,
    },
    /// Writing EventStorage files failed.
    #[error("{app}: {source}")]
    EventStorage {
        /// The application.
        app: String,
        /// The error.
        #[source]
        source: rodeo_files::eventstorage::EsError,
    },
    /// No DCM offered a processing slot within the supervisor's start timeout: the partition
    /// cannot take events, and the run would wait at 0 L1 accepts forever.
    #[error(
        "{app}: no DCM offered a processing slot within {waited_s} s of the start (DCMs heard: \
         {heard}): the partition cannot take events; check the DCMs' logs, and \
         [supervisor] start_timeout_ms"
    )]
    NoSlots {
        /// The application (the supervisor).
        app: String,
        /// Seconds waited.
        waited_s: u64,
        /// The DCMs heard from, or "none".
        heard: String,
    },
    /// The application's thread could not start or panicked.
    #[error("{app}: thread {what}")]
    Thread {
        /// The application.
        app: String,
        /// "could not start" or "panicked".
        what: String,
    },
}

/// The error of a failed socket call of application `app` doing `what`, for `map_err`: the
/// strings are built only when the call fails (a loop's receive calls it on every message).
pub(crate) fn transport_err<'a>(
    app: &'a str,
    what: &'static str,
) -> impl FnOnce(TransportError) -> DataflowError + 'a {
    move |source| DataflowError::Transport {
        app: app.to_string(),
        what: what.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error names the application and what it was doing, around the socket's error.
    #[test]
    fn transport_errors_say_who_and_what() {
        let socket = TransportError::Unsupported {
            endpoint: "shm://x".into(),
            detail: "gone".into(),
        };
        let e = transport_err("dcm-3", "receive")(socket);
        let text = e.to_string();
        assert!(text.starts_with("dcm-3: receive: "), "{text}");
        assert!(matches!(e, DataflowError::Transport { .. }));
    }
}
