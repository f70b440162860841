//! Who may do what over HTTP: three roles, the bearer tokens that prove them (compared in
//! constant time, never logged or served), and the rule that a token crosses the network in
//! clear only on this host: over plain HTTP a token is taken from a loopback peer only.
//!
//! | role | proof | may |
//! |---|---|---|
//! | observer | none | every `GET` |
//! | operator | the operator's token (`RODEO_TOKEN`, `[control] token`) | run commands, alarm acknowledgements, run comments |
//! | expert | the expert's token (`RODEO_EXPERT_TOKEN`, `[control] expert_token`) | all that, and `PUT /api/config` |
//!
//! No token for a request above an observer's, or a wrong one: 401. A token of a role below
//! the request's: 403 naming the role it needs. A token over plain HTTP from another host: 403
//! saying to use HTTPS (the token is not even compared).

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::Response;

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// No token: reads.
    Observer,
    /// The operator's token: runs, alarms, comments.
    Operator,
    /// The expert's token: also the configuration.
    Expert,
}

impl Role {
    /// `observer`, `operator`, `expert`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Observer => "observer",
            Role::Operator => "operator",
            Role::Expert => "expert",
        }
    }

    /// Where the token of this role comes from, for messages.
    fn token_source(self) -> &'static str {
        match self {
            Role::Observer => "no token",
            Role::Operator => {
                "the operator's token (RODEO_TOKEN or [control] token) or the expert's"
            }
            Role::Expert => "the expert's token (RODEO_EXPERT_TOKEN or [control] expert_token)",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A bearer token. Its `Debug` shows no byte of it.
#[derive(Clone)]
pub struct Token(Box<[u8]>);

impl Token {
    /// `text` as a token; `None` when empty (an empty token proves nothing).
    pub fn new(text: &str) -> Option<Token> {
        (!text.is_empty()).then(|| Token(text.as_bytes().into()))
    }

    /// Whether `given` is this token, in time that depends on the lengths only.
    fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq(&self.0, given)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(hidden)")
    }
}

/// The tokens a server takes.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The operator's (`None`: operator requests are refused).
    pub operator: Option<Token>,
    /// The expert's (`None`: expert requests are refused).
    pub expert: Option<Token>,
}

/// Where a request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The peer's address.
    pub addr: SocketAddr,
    /// The connection is HTTPS.
    pub tls: bool,
}

impl Peer {
    /// Whether the peer is on this host's loopback (IPv4 127/8, `::1`, or IPv4-mapped 127/8).
    pub fn is_loopback(&self) -> bool {
        match self.addr.ip() {
            IpAddr::V4(v4) => v4.is_loopback(),
            IpAddr::V6(v6) => {
                v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.addr, if self.tls { " (https)" } else { "" })
    }
}

/// Why a request does not get the role it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token (401).
    NoToken {
        /// The role the request needs.
        needed: Role,
    },
    /// A token that is none of this server's (401).
    WrongToken {
        /// The role the request needs.
        needed: Role,
    },
    /// A token over plain HTTP from another host (403).
    PlainRemote {
        /// The role the request needs.
        needed: Role,
    },
    /// A token of a lower role (403).
    TooLow {
        /// The role the request needs.
        needed: Role,
        /// The token's role.
        have: Role,
        /// The server has no token of the needed role at all.
        none_configured: bool,
    },
}

impl Refusal {
    /// How the refused request is recorded: the role it proved, or `unauthenticated`.
    pub fn role_text(&self) -> &'static str {
        match self {
            Refusal::TooLow { have, .. } => have.as_str(),
            _ => crate::rundb::UNAUTHENTICATED,
        }
    }

    /// The answer: 401 or 403 with a message naming the role needed (and never the token).
    pub fn response(&self, what: &str) -> Response {
        let (status, message) = match self {
            Refusal::NoToken { needed } => (
                401,
                format!(
                    "{what} needs the {needed} role: send the header Authorization: Bearer \
                     <token> with {}",
                    needed.token_source()
                ),
            ),
            Refusal::WrongToken { needed } => (
                401,
                format!(
                    "{what}: the token is not one this server takes; it needs the {needed} \
                     role: {}",
                    needed.token_source()
                ),
            ),
            Refusal::PlainRemote { needed } => (
                403,
                format!(
                    "{what} needs the {needed} role, and over plain HTTP a token is taken only \
                     from this host (loopback): use TLS, i.e. serve HTTPS (--tls-cert FILE \
                     --tls-key FILE) and send to https://… (rodeo ctl --url https://… --ca \
                     FILE). The token has crossed the network in clear: change it"
                ),
            ),
            Refusal::TooLow {
                needed,
                have,
                none_configured,
            } => (
                403,
                format!(
                    "{what} needs the {needed} role: {}; the token sent is the {have}'s{}",
                    needed.token_source(),
                    if *none_configured {
                        " (this server has no token of that role: nobody may do this here)"
                    } else {
                        ""
                    }
                ),
            ),
        };
        let mut r = Response::error(status, &message);
        if status == 401 {
            r.headers
                .push(("WWW-Authenticate", "Bearer realm=\"rodeo\"".into()));
        }
        r
    }
}

/// The role the `Authorization` header proves for a request that needs `needed`, or why not.
/// An observer's request is never refused (its header is not looked at).
pub fn check(
    credentials: &Credentials,
    peer: &Peer,
    header: Option<&str>,
    needed: Role,
) -> Result<Role, Refusal> {
    if needed == Role::Observer {
        return Ok(Role::Observer);
    }
    let Some(header) = header else {
        return Err(Refusal::NoToken { needed });
    };
    if !peer.tls && !peer.is_loopback() {
        return Err(Refusal::PlainRemote { needed });
    }
    let given = bearer(header).ok_or(Refusal::WrongToken { needed })?;
    // Both compared, whatever the first says: the time does not tell which one matched.
    let expert = credentials
        .expert
        .as_ref()
        .is_some_and(|t| t.matches(given.as_bytes()));
    let operator = credentials
        .operator
        .as_ref()
        .is_some_and(|t| t.matches(given.as_bytes()));
    let have = match (expert, operator) {
        (true, _) => Role::Expert,
        (false, true) => Role::Operator,
        (false, false) => return Err(Refusal::WrongToken { needed }),
    };
    if have < needed {
        let none_configured = match needed {
            Role::Expert => credentials.expert.is_none(),
            _ => credentials.operator.is_none(),
        };
        return Err(Refusal::TooLow {
            needed,
            have,
            none_configured,
        });
    }
    Ok(have)
}

/// The token of `Bearer <token>` (the scheme in any case), trimmed.
fn bearer(header: &str) -> Option<&str> {
    let (scheme, rest) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

/// `a == b`, looking at every byte of the longer one whatever differs: the time depends on the
/// lengths only, not on where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = a.len() ^ b.len();
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials {
            operator: Token::new("op-tok"),
            expert: Token::new("ex-tok"),
        }
    }

    fn local() -> Peer {
        Peer {
            addr: "127.0.0.1:5000".parse().unwrap(),
            tls: false,
        }
    }

    #[test]
    fn each_token_proves_its_role_and_a_lower_one_gets_403() {
        let c = creds();
        let p = local();
        assert_eq!(check(&c, &p, None, Role::Observer), Ok(Role::Observer));
        assert_eq!(
            check(&c, &p, Some("Bearer op-tok"), Role::Operator),
            Ok(Role::Operator)
        );
        assert_eq!(
            check(&c, &p, Some("bearer ex-tok"), Role::Operator),
            Ok(Role::Expert)
        );
        assert_eq!(
            check(&c, &p, Some("Bearer ex-tok"), Role::Expert),
            Ok(Role::Expert)
        );
        let low = check(&c, &p, Some("Bearer op-tok"), Role::Expert).unwrap_err();
        assert!(matches!(
            low,
            Refusal::TooLow {
                needed: Role::Expert,
                have: Role::Operator,
                none_configured: false
            }
        ));
        let r = low.response("PUT /api/config");
        assert_eq!(r.status, 403);
        let text = String::from_utf8(r.body).unwrap();
        assert!(
            text.contains("expert role") && text.contains("RODEO_EXPERT_TOKEN"),
            "{text}"
        );
        assert!(!text.contains("op-tok"), "{text}");
        for h in [
            None,
            Some("Bearer wrong"),
            Some("Bearer "),
            Some("Basic op-tok"),
        ] {
            let e = check(&c, &p, h, Role::Operator).unwrap_err();
            assert_eq!(e.response("x").status, 401, "{h:?}");
        }
    }

    #[test]
    fn over_plain_http_a_token_is_taken_from_loopback_only() {
        let c = creds();
        for (addr, tls, ok) in [
            ("127.0.0.1:1", false, true),
            ("127.3.4.5:1", false, true),
            ("[::1]:1", false, true),
            ("[::ffff:127.0.0.1]:1", false, true),
            ("10.0.0.2:1", false, false),
            ("[::ffff:10.0.0.2]:1", false, false),
            ("10.0.0.2:1", true, true),
        ] {
            let p = Peer {
                addr: addr.parse().unwrap(),
                tls,
            };
            let r = check(&c, &p, Some("Bearer op-tok"), Role::Operator);
            assert_eq!(r.is_ok(), ok, "{addr} tls={tls}: {r:?}");
            if let Err(e) = r {
                let text = String::from_utf8(e.response("POST /api/command").body).unwrap();
                assert!(
                    text.contains("use TLS") && text.contains("https://"),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn without_an_expert_token_nobody_is_an_expert() {
        let c = Credentials {
            operator: Token::new("op-tok"),
            expert: None,
        };
        let e = check(&c, &local(), Some("Bearer op-tok"), Role::Expert).unwrap_err();
        let text = String::from_utf8(e.response("PUT /api/config").body).unwrap();
        assert!(text.contains("nobody may"), "{text}");
        assert!(Token::new("").is_none());
        assert_eq!(format!("{:?}", Token::new("s3").unwrap()), "Token(hidden)");
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
