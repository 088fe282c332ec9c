//! Server URLs: parsed into the `redis` crate's connection info with an
//! error a person can act on, and shown in messages with the password
//! masked.

use crate::error::{Error, Result};
use redis::{ConnectionInfo, IntoConnectionInfo};

/// The forms of a server URL, for the error of one that is not.
pub const URL_FORMS: &str = "redis://[user:password@]host[:port][/db], \
     rediss://[user:password@]host[:port][/db] (TLS), unix:///path/to/socket[?db=N] \
     or, for one server found through Redis Sentinel, \
     redis+sentinel://[user:password@]host[:port][,host[:port]...]/master-name[/db]";

/// Whether `url` names a server through Redis Sentinel.
pub fn is_sentinel_url(url: &str) -> bool {
    let lower = url.get(..17).unwrap_or("").to_ascii_lowercase();
    lower == "redis+sentinel://" || lower == "redis-sentinel://"
}

/// `url` parsed; [`Error::Invalid`] naming the (masked) URL and the
/// accepted forms otherwise.
pub(crate) fn parse(url: &str) -> Result<ConnectionInfo> {
    let info = url.into_connection_info().map_err(|_| {
        let why = if is_sentinel_url(url) {
            "a Sentinel URL names one server: give it alone (a Locker), not to Redlock or a cluster"
        } else {
            "not a server URL"
        };
        Error::Invalid(format!(
            "{}: {why}; the accepted forms are {URL_FORMS}",
            redact_url(url)
        ))
    })?;
    refuse_insecure(url, &info)?;
    Ok(info)
}

/// A `rediss://...#insecure` URL (no certificate verification) is refused:
/// a lock server anyone on the path can impersonate grants nothing.
fn refuse_insecure(url: &str, info: &ConnectionInfo) -> Result<()> {
    if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr {
        return Err(Error::Invalid(format!(
            "{}: #insecure (TLS without verifying the server) is not supported; \
             give the server's CA instead (TlsSettings::ca_file, dlock --tls-ca)",
            redact_url(url)
        )));
    }
    Ok(())
}

/// `info`'s login, database and TLS settings at another address (a cluster
/// node named by a redirect, the slot map or `CLUSTER SHARDS`).
pub fn same_login_at(info: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let mut info = info.clone();
    info.addr = match &info.addr {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host.to_string(), port),
    };
    info
}

/// `url` with its password, if any, shown as `***`: for logs and
/// messages. The password is the login's (`user:password@`, up to the last
/// `@`, as a password may hold an unencoded `/`, `?` or `#`, which makes
/// the URL one to refuse and show) and a `pass=` in the query (`unix:`
/// URLs log in so).
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let (scheme, rest) = url.split_at(scheme_end);
    let rest = match rest.split_once('?') {
        Some((before, query)) => format!("{before}?{}", mask_query(query)),
        None => rest.to_string(),
    };
    // A path right after `//` (unix:///path): no login.
    if rest.starts_with('/') {
        return format!("{scheme}{rest}");
    }
    let Some(at) = rest.rfind('@') else {
        return format!("{scheme}{rest}");
    };
    match rest[..at].find(':') {
        Some(colon) => format!("{scheme}{}:***{}", &rest[..colon], &rest[at..]),
        None => format!("{scheme}{rest}"),
    }
}

/// The query with the value of `pass` (and `password`) shown as `***`.
fn mask_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key == "pass" || key == "password" => format!("{key}=***"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_and_bad_urls_explained() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:pw@h/"), "redis://:***@h/");
        assert_eq!(redact_url("redis://h:1/"), "redis://h:1/");
        assert_eq!(redact_url("nonsense"), "nonsense");
        let e = parse("redis://u:pw@h:notaport/").unwrap_err().to_string();
        assert!(e.contains("redis://u:***@h:notaport/"), "{e}");
        assert!(e.contains(URL_FORMS) && !e.contains("pw"), "{e}");
        assert!(parse("unix:///tmp/s").is_ok());
    }

    #[test]
    fn a_sentinel_url_is_refused_for_a_cluster_and_for_redlock() {
        let url = "redis+sentinel://10.0.0.1,10.0.0.2/locks";
        let e = crate::Locker::cluster(&[url]).err().unwrap().to_string();
        assert!(e.contains("a Sentinel URL names one server"), "{e}");
        let e = crate::Redlock::new(&[url, url, url])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("a Sentinel URL names one server"), "{e}");
        assert!(parse("rediss://h:1/").is_ok());
        let e = parse("rediss://h:1/#insecure").unwrap_err().to_string();
        assert!(e.contains("#insecure") && e.contains("CA"), "{e}");
    }

    #[test]
    fn passwords_in_queries_and_with_slashes_are_masked() {
        // unix: URLs take their login from the query (`redis` reads
        // `user` and `pass` there).
        assert_eq!(
            redact_url("unix:///tmp/s?db=1&pass=hunter2&user=u"),
            "unix:///tmp/s?db=1&pass=***&user=u"
        );
        // A password with an unencoded `/` (the URL's path seems to start
        // inside it): masked up to the last `@`.
        assert_eq!(redact_url("redis://:pa/ss@h:1/"), "redis://:***@h:1/");
        let e = parse("redis://u:1234/ss@h:1/").unwrap_err().to_string();
        assert!(!e.contains("1234") && !e.contains("ss@"), "{e}");
        // An `@` in a unix socket's path is no login.
        assert_eq!(redact_url("unix:///tmp/a:b@c/s"), "unix:///tmp/a:b@c/s");
    }
}
