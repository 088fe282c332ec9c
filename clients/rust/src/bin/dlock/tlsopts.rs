//! `--tls-ca FILE`, `--tls-cert FILE`, `--tls-key FILE` (before or after
//! COMMAND, like `--url`), else `DLOCK_TLS_CA`, `DLOCK_TLS_CERT`,
//! `DLOCK_TLS_KEY`: the TLS settings of every `rediss://` server. Kept for
//! the whole run (the parsers of every command take them), read once by
//! the backend.

use crate::args::{usage, Args, Parsed};
use dlock_client::TlsSettings;
use std::sync::Mutex;

/// The files named on the command line.
struct Given {
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

static GIVEN: Mutex<Given> = Mutex::new(Given {
    ca: None,
    cert: None,
    key: None,
});

/// Takes option `--name` if it is one of the TLS options; false if not.
pub fn option(name: &str, inline: Option<String>, a: &mut Args) -> Parsed<bool> {
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let slot = match name {
        "tls-ca" => &mut given.ca,
        "tls-cert" => &mut given.cert,
        "tls-key" => &mut given.key,
        _ => return Ok(false),
    };
    let file = a.value(name, inline)?;
    if file.is_empty() {
        return usage(format!("--{name} needs a file"));
    }
    if slot.is_some() {
        return usage(format!("--{name} given twice: name one file"));
    }
    *slot = Some(file);
    Ok(true)
}

/// The option's file, else the environment variable's (when not empty),
/// and where it came from.
fn file(given: &Option<String>, var: &str, flag: &str) -> Option<(String, String)> {
    match given {
        Some(f) => Some((f.clone(), format!("--{flag}"))),
        None => std::env::var(var)
            .ok()
            .filter(|f| !f.is_empty())
            .map(|f| (f, var.to_string())),
    }
}

/// The TLS settings given, or None (a `rediss://` server is then verified
/// against the public roots). A certificate without its key (or a key
/// without its certificate), or a file that cannot be read or holds no
/// PEM certificate or key: a message naming the option and the file.
pub fn settings() -> Result<Option<TlsSettings>, String> {
    let given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let ca = file(&given.ca, "DLOCK_TLS_CA", "tls-ca");
    let cert = file(&given.cert, "DLOCK_TLS_CERT", "tls-cert");
    let key = file(&given.key, "DLOCK_TLS_KEY", "tls-key");
    if ca.is_none() && cert.is_none() && key.is_none() {
        return Ok(None);
    }
    let mut tls = TlsSettings::new();
    if let Some((ca, from)) = ca {
        tls = tls.ca_file(&ca).map_err(|e| named(&from, e))?;
    }
    match (cert, key) {
        (Some((cert, from)), Some(key)) => {
            tls = tls
                .client_cert_files(&cert, &key.0)
                .map_err(|e| named(&format!("{from}/{}", key.1), e))?;
        }
        (Some((_, from)), None) => {
            return Err(format!(
                "{from} needs the certificate's private key (--tls-key or DLOCK_TLS_KEY)"
            ))
        }
        (None, Some((_, from))) => {
            return Err(format!(
                "{from} needs its certificate (--tls-cert or DLOCK_TLS_CERT)"
            ))
        }
        (None, None) => {}
    }
    Ok(Some(tls))
}

fn named(from: &str, e: dlock_client::Error) -> String {
    match e {
        dlock_client::Error::Invalid(m) => format!("{from}: {m}"),
        e => format!("{from}: {e}"),
    }
}
