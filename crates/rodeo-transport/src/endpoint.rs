//! Endpoint URLs: `inproc://name`, `ipc:///path`, `tcp://host:port`, `shm://name`,
//! `stream://host:port`. The same code runs on all of them; this module only checks that a string names one of them, so a typo in a configuration is
//! reported with the field's value before any socket is made.

use std::fmt;

/// The transport an endpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Inside one process (threads of one partition).
    Inproc,
    /// Unix-domain sockets between processes of one host.
    Ipc,
    /// TCP between hosts.
    Tcp,
    /// Shared memory (iceoryx2) between processes of one host: `shm://NAME`.
    Shm,
    /// rodeo's own framing over kernel TCP (ROUTER/DEALER only): `stream://HOST:PORT`.
    Stream,
}

/// A checked endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    url: String,
    scheme: Scheme,
}

/// Why a string is not an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The scheme is none of inproc, ipc, tcp, shm, stream.
    #[error(
        "endpoint {url:?}: unknown scheme (use inproc://NAME, ipc:///PATH, tcp://HOST:PORT, shm://NAME or stream://HOST:PORT)"
    )]
    UnknownScheme {
        /// The rejected URL.
        url: String,
    },
    /// Nothing follows the scheme.
    #[error("endpoint {url:?}: empty address after the scheme")]
    EmptyAddress {
        /// The rejected URL.
        url: String,
    },
    /// A tcp or stream endpoint without a valid `:port`.
    #[error(
        "endpoint {url:?}: tcp and stream endpoints need HOST:PORT with a port number (or * to bind any)"
    )]
    BadPort {
        /// The rejected URL.
        url: String,
    },
}

impl Endpoint {
    /// Parses and checks an endpoint URL.
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("inproc://") {
            (Scheme::Inproc, rest)
        } else if let Some(rest) = url.strip_prefix("ipc://") {
            (Scheme::Ipc, rest)
        } else if let Some(rest) = url.strip_prefix("tcp://") {
            (Scheme::Tcp, rest)
        } else if let Some(rest) = url.strip_prefix("shm://") {
            (Scheme::Shm, rest)
        } else if let Some(rest) = url.strip_prefix("stream://") {
            (Scheme::Stream, rest)
        } else {
            return Err(EndpointError::UnknownScheme {
                url: url.to_string(),
            });
        };
        if rest.is_empty() {
            return Err(EndpointError::EmptyAddress {
                url: url.to_string(),
            });
        }
        if matches!(scheme, Scheme::Tcp | Scheme::Stream) {
            let port = rest.rsplit_once(':').map(|(_, p)| p);
            let ok = matches!(port, Some("*")) || port.is_some_and(|p| p.parse::<u16>().is_ok());
            if !ok {
                return Err(EndpointError::BadPort {
                    url: url.to_string(),
                });
            }
        }
        Ok(Endpoint {
            url: url.to_string(),
            scheme,
        })
    }

    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// What follows the scheme (`NAME` of `shm://NAME`).
    pub fn address(&self) -> &str {
        self.url.split_once("://").map_or("", |(_, a)| a)
    }

    /// The transport.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl std::str::FromStr for Endpoint {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Endpoint, EndpointError> {
        Endpoint::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_scheme() {
        assert_eq!(
            Endpoint::parse("inproc://ros-1").unwrap().scheme(),
            Scheme::Inproc
        );
        assert_eq!(
            Endpoint::parse("ipc:///tmp/ros.sock").unwrap().scheme(),
            Scheme::Ipc
        );
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:5555").unwrap().scheme(),
            Scheme::Tcp
        );
        assert_eq!(
            Endpoint::parse("tcp://*:5555").unwrap().scheme(),
            Scheme::Tcp
        );
        let s = Endpoint::parse("stream://10.0.0.2:47001").unwrap();
        assert_eq!(
            (s.scheme(), s.address()),
            (Scheme::Stream, "10.0.0.2:47001")
        );
        assert!(matches!(
            Endpoint::parse("stream://host"),
            Err(EndpointError::BadPort { .. })
        ));
    }

    #[test]
    fn rejects_with_the_reason() {
        assert!(matches!(
            Endpoint::parse("udp://x:1"),
            Err(EndpointError::UnknownScheme { .. })
        ));
        assert!(matches!(
            Endpoint::parse("inproc://"),
            Err(EndpointError::EmptyAddress { .. })
        ));
        assert!(matches!(
            Endpoint::parse("tcp://host"),
            Err(EndpointError::BadPort { .. })
        ));
        assert!(matches!(
            Endpoint::parse("tcp://host:99999"),
            Err(EndpointError::BadPort { .. })
        ));
    }
}
