//! The library over TLS: `Locker::new_tls`, `Redlock::new_tls`, the async
//! `Locker::new_tls`, and what each refuses.

use crate::common::{holder, SEC};
use crate::tls::certs::Certs;
use crate::tls::{settings, TlsServer};
use dlock_client::{Error, Locker, Redlock, TlsSettings};
use std::time::Duration;

/// A lock taken and released over TLS, the server verified by the CA given,
/// by its IP address and by its DNS name.
#[test]
fn acquire_and_release_over_tls_with_the_ca() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "server", false);
    let mut plain = s.server.conn();
    for host in ["127.0.0.1", "localhost"] {
        let locker = Locker::new_tls(&s.url(host), &settings(&certs, false)).unwrap();
        let g = locker.try_lock("res", 10 * SEC).unwrap().expect("free");
        assert_eq!(
            holder(&mut plain, "res"),
            Some((g.token().to_string(), g.fence()))
        );
        assert!(locker.try_lock("res", SEC).unwrap().is_none());
        g.release().unwrap();
        assert_eq!(holder(&mut plain, "res"), None);
    }
}

/// The error of a first request on `locker`, which must fail at once: a
/// refused handshake is not retried (the locker retries connection errors
/// for an hour here, so a retry would hang the request far past the
/// deadline below, whatever the machine's load).
fn refusal(locker: &Locker) -> String {
    let locker = locker.clone().with_retry_for(Duration::from_secs(3600));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(locker.try_lock("res", 10 * SEC).map(|g| g.is_some()));
    });
    let e = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("a refused handshake was retried")
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    e.to_string()
}

/// A server that requires client certificates: served with one, refused
/// without one and with one from another CA.
#[test]
fn mutual_tls_required_by_the_server() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "server", true);
    let url = s.url("127.0.0.1");
    let locker = Locker::new_tls(&url, &settings(&certs, true)).unwrap();
    let g = locker.try_lock("res", 10 * SEC).unwrap().expect("free");
    g.release().unwrap();

    let without = Locker::new_tls(&url, &settings(&certs, false)).unwrap();
    let e = refusal(&without);
    assert!(
        e.contains("TLS handshake refused") && e.contains(&format!("127.0.0.1:{}", s.tls_port)),
        "{e}"
    );

    let stranger = settings(&certs, false)
        .client_cert_files(certs.path("stranger.crt"), certs.path("stranger.key"))
        .unwrap();
    let e = refusal(&Locker::new_tls(&url, &stranger).unwrap());
    assert!(e.contains("TLS handshake refused"), "{e}");
    assert_eq!(holder(&mut s.server.conn(), "res"), None);
}

/// A server whose certificate no trusted CA signed is refused: with
/// another CA given, and with the public roots (no CA given).
#[test]
fn an_unknown_ca_is_refused() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "server", false);
    let url = s.url("127.0.0.1");
    let other = TlsSettings::new()
        .ca_file(certs.path("other-ca.crt"))
        .unwrap();
    let e = refusal(&Locker::new_tls(&url, &other).unwrap());
    assert!(e.contains("UnknownIssuer"), "{e}");
    let e = refusal(&Locker::new(&url).unwrap());
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert_eq!(holder(&mut s.server.conn(), "res"), None);
}

/// A certificate for another name than the URL's host is refused.
#[test]
fn a_wrong_host_name_is_refused() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "misnamed", false);
    let locker = Locker::new_tls(&s.url("127.0.0.1"), &settings(&certs, false)).unwrap();
    let e = refusal(&locker);
    assert!(e.contains("not valid for name"), "{e}");
    assert_eq!(holder(&mut s.server.conn(), "res"), None);
}

/// Files that cannot serve, and URLs that would not verify or not use
/// TLS: refused before any server is asked, naming the file or URL.
#[test]
fn bad_settings_are_refused_naming_the_file() {
    let certs = Certs::new();
    let invalid = |r: dlock_client::Result<TlsSettings>| match r {
        Err(Error::Invalid(m)) => m,
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("accepted"),
    };
    let missing = certs.path("missing.crt");
    let m = invalid(TlsSettings::new().ca_file(&missing));
    assert!(m.contains(&missing.display().to_string()), "{m}");
    let ext = certs.path("server.ext");
    let m = invalid(TlsSettings::new().ca_file(&ext));
    assert!(
        m.contains("server.ext") && m.contains("no PEM certificate"),
        "{m}"
    );
    // The key file given as the certificate, and the reverse.
    let m = invalid(
        TlsSettings::new().client_cert_files(certs.path("client.key"), certs.path("client.key")),
    );
    assert!(
        m.contains("client.key") && m.contains("no PEM certificate"),
        "{m}"
    );
    let m = invalid(
        TlsSettings::new().client_cert_files(certs.path("client.crt"), certs.path("client.crt")),
    );
    assert!(
        m.contains("client.crt") && m.contains("no PEM private key"),
        "{m}"
    );
    // A key that is not the certificate's.
    let m = invalid(
        TlsSettings::new().client_cert_files(certs.path("client.crt"), certs.path("server.key")),
    );
    assert!(
        m.contains("server.key") && m.contains("not a usable client certificate and its key"),
        "{m}"
    );

    let tls = settings(&certs, false);
    let m = match Locker::new_tls("redis://127.0.0.1:6379/", &tls) {
        Err(Error::Invalid(m)) => m,
        other => panic!("{:?}", other.err()),
    };
    assert!(m.contains("rediss://"), "{m}");
    let m = match Locker::new("rediss://127.0.0.1:6379/#insecure") {
        Err(Error::Invalid(m)) => m,
        other => panic!("{:?}", other.err()),
    };
    assert!(m.contains("#insecure"), "{m}");
}

/// Redlock over three TLS servers, one CA for all.
#[test]
fn redlock_over_rediss_urls() {
    let certs = Certs::new();
    let servers: Vec<TlsServer> = (0..3)
        .map(|_| TlsServer::start(&certs, "server", true))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url("127.0.0.1")).collect();
    // A loaded machine's handshakes may take more than the default 100 ms.
    let redlock = Redlock::new_tls(&urls, &settings(&certs, true))
        .unwrap()
        .with_node_timeout(5 * SEC);
    let g = redlock
        .request("res")
        .ttl(30 * SEC)
        .acquire()
        .unwrap()
        .expect("free");
    for (s, fence) in servers.iter().zip(g.fences()) {
        let (_, held) = holder(&mut s.server.conn(), "res").expect("held");
        assert_eq!(Some(held), *fence);
    }
    g.release().unwrap();
    for s in &servers {
        assert_eq!(holder(&mut s.server.conn(), "res"), None);
    }
}

/// The async API over mutual TLS, and its refusal of an unknown CA.
#[cfg(feature = "tokio")]
#[test]
fn async_api_over_tls() {
    use dlock_client::aio;
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "server", true);
    let url = s.url("127.0.0.1");
    let mut plain = s.server.conn();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let locker = aio::Locker::new_tls(&url, &settings(&certs, true)).unwrap();
        let g = locker
            .try_lock("res", 10 * SEC)
            .await
            .unwrap()
            .expect("free");
        assert_eq!(
            holder(&mut plain, "res"),
            Some((g.token().to_string(), g.fence()))
        );
        assert!(g.release().await.unwrap());
        let other = TlsSettings::new()
            .ca_file(certs.path("other-ca.crt"))
            .unwrap()
            .client_cert_files(certs.path("client.crt"), certs.path("client.key"))
            .unwrap();
        let e = aio::Locker::new_tls(&url, &other)
            .unwrap()
            .try_lock("res", 10 * SEC)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    });
    assert_eq!(holder(&mut plain, "res"), None);
}

/// Redlock over servers whose handshakes are all refused (an unknown CA):
/// the refusal, at once, however long the request would wait and retry an
/// unreachable quorum (an hour each: a retry would hang the test).
#[test]
fn redlock_does_not_retry_refused_handshakes() {
    let certs = Certs::new();
    let servers: Vec<TlsServer> = (0..3)
        .map(|_| TlsServer::start(&certs, "server", false))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url("127.0.0.1")).collect();
    let other = TlsSettings::new()
        .ca_file(certs.path("other-ca.crt"))
        .unwrap();
    let redlock = Redlock::new_tls(&urls, &other)
        .unwrap()
        .with_node_timeout(5 * SEC);
    let hour = Duration::from_secs(3600);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = redlock
            .request("res")
            .ttl(30 * SEC)
            .wait(hour)
            .retry_for(hour)
            .acquire();
        let _ = tx.send(r.map(|g| g.is_some()));
    });
    // Far beyond a refusal's time, far short of a retry's.
    let e = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("a refused handshake was retried")
        .unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    for s in &servers {
        assert_eq!(holder(&mut s.server.conn(), "res"), None);
    }
}
