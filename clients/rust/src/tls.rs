//! TLS settings for `rediss://` servers: the CA that vouches for the
//! server and, for mutual TLS, this client's certificate and key, checked
//! when given and carried into every connection (cluster nodes and Redlock
//! servers included).

use crate::error::{Error, Result};
use redis::{ConnectionAddr, ConnectionInfo};
use rustls::pki_types::CertificateDer;
use std::path::Path;

/// PEM text and where it came from (a file's path), for messages.
#[derive(Clone)]
struct Pem {
    source: String,
    bytes: Vec<u8>,
}

/// How to verify a `rediss://` server, and how to prove who this client
/// is. Without a CA the server's certificate must chain to one of the
/// public (Mozilla) roots built into the client; with one, to that CA
/// only. The name verified is the URL's host (a DNS name or an IP address
/// in the certificate's subjectAltName), also sent as SNI; the certificate
/// is always verified (`#insecure` URLs are refused).
///
/// ```no_run
/// use dlock_client::{Locker, TlsSettings};
/// let tls = TlsSettings::new()
///     .ca_file("/etc/redis/tls/ca.crt")?
///     .client_cert_files("/etc/app/tls/client.crt", "/etc/app/tls/client.key")?;
/// let locker = Locker::new_tls("rediss://redis.internal:6380/", &tls)?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct TlsSettings {
    ca: Option<Pem>,
    client: Option<(Pem, Pem)>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("ca", &self.ca.as_ref().map(|p| &p.source))
            .field("client_cert", &self.client.as_ref().map(|(c, _)| &c.source))
            .finish()
    }
}

impl TlsSettings {
    /// The public roots, no client certificate.
    pub fn new() -> TlsSettings {
        TlsSettings::default()
    }

    /// Trust only the CA certificate(s) in this PEM file.
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<TlsSettings> {
        let pem = read(path.as_ref(), "CA")?;
        self.ca_pem_from(pem)
    }

    /// Trust only the CA certificate(s) in this PEM text.
    pub fn ca_pem(self, pem: impl Into<Vec<u8>>) -> Result<TlsSettings> {
        self.ca_pem_from(Pem {
            source: "the CA PEM".into(),
            bytes: pem.into(),
        })
    }

    fn ca_pem_from(mut self, pem: Pem) -> Result<TlsSettings> {
        certificates(&pem, "CA")?;
        self.ca = Some(pem);
        Ok(self)
    }

    /// Present this certificate (chain) and its private key, both PEM
    /// files, to a server that asks for one (mutual TLS).
    pub fn client_cert_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsSettings> {
        let cert = read(cert.as_ref(), "client certificate")?;
        let key = read(key.as_ref(), "client key")?;
        self.client_from(cert, key)
    }

    /// [`TlsSettings::client_cert_files`] from PEM text.
    pub fn client_cert_pem(
        self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Result<TlsSettings> {
        let cert = Pem {
            source: "the client certificate PEM".into(),
            bytes: cert.into(),
        };
        let key = Pem {
            source: "the client key PEM".into(),
            bytes: key.into(),
        };
        self.client_from(cert, key)
    }

    fn client_from(mut self, cert: Pem, key: Pem) -> Result<TlsSettings> {
        let chain = certificates(&cert, "client certificate")?;
        let found = rustls_pemfile::private_key(&mut key.bytes.as_slice())
            .map_err(|e| invalid(&key, &format!("not a PEM private key: {e}")))?;
        let Some(private) = found else {
            // rustls reads no encrypted key, and passes over one unread.
            let encrypted = String::from_utf8_lossy(&key.bytes).contains("ENCRYPTED");
            return Err(invalid(
                &key,
                if encrypted {
                    "holds an encrypted private key, which is not supported: decrypt it \
                     (openssl pkey -in KEY -out PLAIN_KEY) and keep that file private"
                } else {
                    "holds no PEM private key"
                },
            ));
        };
        // The pair as rustls will take it on each connection: a key that
        // is not the certificate's fails here, not at every connect.
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(&cert, &e.to_string()))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_client_auth_cert(chain, private)
            .map_err(|e| {
                Error::Invalid(format!(
                    "TLS: {} and {}: not a usable client certificate and its key \
                     (an X.509 v3 certificate and the private key it was made for): {e}",
                    cert.source, key.source
                ))
            })?;
        self.client = Some((cert, key));
        Ok(self)
    }

    /// The connection info for `url` (a `rediss://` URL) with these
    /// settings, e.g. for a `redis::Client` of your own:
    /// `redis::Client::open(tls.connection_info(url)?)`.
    pub fn connection_info(&self, url: &str) -> Result<ConnectionInfo> {
        if crate::sentinel::is_sentinel_url(url) {
            return Err(Error::Invalid(format!(
                "{}: Redis Sentinel over TLS is not supported (give the master's rediss:// URL)",
                crate::url::redact_url(url)
            )));
        }
        let info = crate::url::parse(url)?;
        if !matches!(info.addr, ConnectionAddr::TcpTls { .. }) {
            return Err(Error::Invalid(format!(
                "{}: TLS settings are given, so a rediss:// URL is needed \
                 (refusing to connect without TLS)",
                crate::url::redact_url(url)
            )));
        }
        let certificates = redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.bytes.clone(),
                    client_key: key.bytes.clone(),
                }),
            root_cert: self.ca.as_ref().map(|ca| ca.bytes.clone()),
        };
        let client = redis::Client::build_with_tls(info, certificates).map_err(|e| {
            let sources: Vec<&str> = self
                .ca
                .iter()
                .chain(self.client.iter().flat_map(|(c, k)| [c, k]))
                .map(|p| p.source.as_str())
                .collect();
            Error::Invalid(format!("TLS settings ({}): {e}", sources.join(", ")))
        })?;
        Ok(client.get_connection_info().clone())
    }
}

/// The connection info for `url`, with `tls` if given (which then needs a
/// `rediss://` URL).
pub(crate) fn connection_info(url: &str, tls: Option<&TlsSettings>) -> Result<ConnectionInfo> {
    match tls {
        Some(tls) => tls.connection_info(url),
        None => crate::url::parse(url),
    }
}

/// The most read of a PEM file: far above any CA bundle, and a bound on
/// what a wrong path (`/dev/zero`, a disk image) takes before it is refused.
const MAX_PEM_FILE: u64 = 4 << 20;

fn read(path: &Path, what: &str) -> Result<Pem> {
    use std::io::Read;
    let failed =
        |e: std::io::Error| Error::Invalid(format!("TLS {what} file {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_FILE + 1).read_to_end(&mut bytes))
        .map_err(failed)?;
    if bytes.len() as u64 > MAX_PEM_FILE {
        return Err(Error::Invalid(format!(
            "TLS {what} file {}: larger than {} MiB, so not a PEM file",
            path.display(),
            MAX_PEM_FILE >> 20
        )));
    }
    Ok(Pem {
        source: path.display().to_string(),
        bytes,
    })
}

/// The certificates in `pem`: at least one, all readable.
fn certificates(pem: &Pem, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = rustls_pemfile::certs(&mut pem.bytes.as_slice())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(pem, &format!("not a PEM {what} certificate: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(pem, &format!("holds no PEM certificate ({what})")));
    }
    Ok(certs)
}

fn invalid(pem: &Pem, why: &str) -> Error {
    Error::Invalid(format!("TLS: {}: {why}", pem.source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pem_is_refused_naming_its_source() {
        let e = TlsSettings::new()
            .ca_pem("not pem")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the CA PEM") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = TlsSettings::new()
            .ca_file("/nonexistent/ca.pem")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        // An endless file is refused, not read until memory runs out.
        let e = TlsSettings::new()
            .ca_file("/dev/zero")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("not a PEM file"),
            "{e}"
        );
        let e = TlsSettings::new()
            .connection_info("redis://127.0.0.1:1/")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rediss://"), "{e}");
    }

    #[test]
    fn an_encrypted_key_is_named_so() {
        let cert = "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n";
        let key =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMA==\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let e = TlsSettings::new()
            .client_cert_pem(cert, key)
            .unwrap_err()
            .to_string();
        assert!(e.contains("encrypted private key"), "{e}");
    }
}
