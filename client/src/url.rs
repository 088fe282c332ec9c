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

/// `url` parsed; [`Error::Invalid`] naming the (masked) URL and the
/// accepted forms otherwise.
pub(crate) fn parse(url: &str) -> Result<ConnectionInfo> {
    let info = url.into_connection_info().map_err(|_| {
        let why = if crate::sentinel::is_sentinel_url(url) {
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

/// `url` with its password, if any, shown as `***`: for logs and
/// messages.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    match authority[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &authority[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
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
        assert!(parse("rediss://h:1/").is_ok());
        let e = parse("rediss://h:1/#insecure").unwrap_err().to_string();
        assert!(e.contains("#insecure") && e.contains("CA"), "{e}");
    }
}
