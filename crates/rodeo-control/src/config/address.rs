//! Addresses in a configuration: `SCHEME://HOST:PORT` split and checked, the port within
//! 1..=65535 (port 0 would mean "any port", which no peer can find; past 65535 there is none),
//! and host names.

/// `address` split as `SCHEME://HOST:PORT`, the scheme one of `schemes` (without `://`): the
/// scheme, the host and the port, or what is wrong, in words.
pub(crate) fn host_port<'a>(
    address: &'a str,
    schemes: &[&str],
) -> Result<(&'a str, &'a str, u16), String> {
    let Some((scheme, rest)) = address.split_once("://") else {
        return Err(format!("no scheme: {}", scheme_words(schemes)));
    };
    if !schemes.contains(&scheme) {
        return Err(format!("scheme {scheme:?}: {}", scheme_words(schemes)));
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err("no port (HOST:PORT)".into());
    };
    if !host_ok(host) {
        return Err(format!(
            "host {host:?}: a host name or address, not empty, without spaces"
        ));
    }
    let port = port_number(port)?;
    Ok((scheme, host, port))
}

/// A port as written: 1..=65535, or what is wrong.
pub(crate) fn port_number(port: &str) -> Result<u16, String> {
    match port.parse::<u64>() {
        Ok(p @ 1..=65535) => Ok(p as u16),
        Ok(p) => Err(format!("port {p} is outside 1..=65535")),
        Err(_) => Err(format!("port {port:?} is not a number in 1..=65535")),
    }
}

/// Whether `host` can be a host name or address (a bracketed IPv6 address included).
pub(crate) fn host_ok(host: &str) -> bool {
    !host.is_empty()
        && !host.starts_with('-')
        && !host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == '"')
}

/// A bare host of a tcp endpoint this partition binds or connects (`transport.host`,
/// `control.address`): [`host_ok`], a dotted address only if it is a real IPv4 address
/// (`999.1.1.1` passed and failed at the run's bind as "No such device"), and no IPv6
/// literal (the endpoints are written `tcp://HOST:PORT`, which an IPv6 address cannot be).
pub(crate) fn bare_host_ok(host: &str) -> bool {
    let dotted = host.chars().all(|c| c.is_ascii_digit() || c == '.');
    host_ok(host)
        && !host.contains(':')
        && !host.contains("://")
        && (!dotted || host.parse::<std::net::Ipv4Addr>().is_ok())
}

fn scheme_words(schemes: &[&str]) -> String {
    let list: Vec<String> = schemes.iter().map(|s| format!("{s}://HOST:PORT")).collect();
    list.join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_outside_1_to_65535_and_bad_hosts_are_named() {
        assert_eq!(
            host_port("tcp://127.0.0.1:5000", &["tcp"]),
            Ok(("tcp", "127.0.0.1", 5000))
        );
        assert_eq!(
            host_port("udp://[::1]:65535", &["tcp", "udp"]),
            Ok(("udp", "[::1]", 65535))
        );
        for (a, words) in [
            ("tcp://127.0.0.1:99999", "port 99999 is outside 1..=65535"),
            ("tcp://127.0.0.1:0", "port 0 is outside"),
            ("tcp://127.0.0.1:-1", "not a number"),
            ("tcp://127.0.0.1", "no port"),
            ("tcp://:5000", "host \"\""),
            ("http://x:1", "scheme \"http\""),
            ("127.0.0.1:5000", "no scheme"),
        ] {
            let e = host_port(a, &["tcp", "udp"]).unwrap_err();
            assert!(e.contains(words), "{a}: {e}");
        }
        assert!(host_ok("node-1.cern.ch") && !host_ok("a b") && !host_ok("-oProxy"));
        for ok in ["127.0.0.1", "10.200.0.2", "node-1.cern.ch", "localhost"] {
            assert!(bare_host_ok(ok), "{ok}");
        }
        for bad in [
            "999.1.1.1",
            "1.2.3",
            "::1",
            "[::1]",
            "tcp://h",
            "127.0.0.1:5000",
        ] {
            assert!(!bare_host_ok(bad), "{bad}");
        }
    }
}
