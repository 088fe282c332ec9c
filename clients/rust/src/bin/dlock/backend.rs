//! Where locks are taken: one server (`Locker`), or Redlock over several
//! `--url`s (`Redlock`): every method below is a `match` with one arm per
//! backend.

use crate::codes;
use dlock_client::{Error, Guard, Locker, Redlock, Result, TlsSettings};
use redis::{IntoConnectionInfo, Value};
use std::time::Duration;

/// The server when neither `--url` nor `DLOCK_URL` names one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// How long to wait for the lock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wait {
    /// One attempt (`--no-wait`, `--wait 0`).
    No,
    /// Up to this long in the server's queue.
    For(Duration),
    /// Until granted (the default).
    Forever,
}

/// What to acquire (the options shared by `exec` and `acquire`).
#[derive(Clone, Debug)]
pub struct LockSpec {
    pub resource: String,
    pub ttl: Duration,
    pub wait: Wait,
    /// How long a run of connection errors is retried.
    pub retry_for: Duration,
    pub shared: bool,
    pub limit: Option<u32>,
    pub permits: Option<u32>,
    pub priority: Option<u16>,
    pub token: Option<String>,
    pub watchdog: bool,
    /// Bound to a session where the server has them (one server only).
    pub session: bool,
    /// `--on-wanted SIGNAL` (one server only).
    pub on_wanted: Option<std::sync::Arc<crate::wanted::OnWanted>>,
}

/// Applies a [`LockSpec`] to a request builder (`Locker::request`, and the
/// Redlock request, which has the same methods).
macro_rules! build {
    ($req:expr, $spec:expr) => {{
        let spec: &LockSpec = $spec;
        let mut r = $req.ttl(spec.ttl).retry_for(spec.retry_for);
        match spec.wait {
            Wait::No => {}
            Wait::For(d) => r = r.wait(d),
            Wait::Forever => r = r.wait(Duration::MAX),
        }
        if spec.shared {
            r = r.shared();
        }
        if let Some(n) = spec.limit {
            r = r.limit(n);
        }
        if let Some(k) = spec.permits {
            r = r.permits(k);
        }
        if let Some(p) = spec.priority {
            r = r.priority(p);
        }
        if spec.watchdog {
            r = r.watchdog();
        }
        r
    }};
}

#[derive(Clone)]
pub enum Backend {
    /// One server: the lock lives there (boxed: a `Locker` is the larger
    /// by far).
    Single(Box<Single>),
    /// Several independent servers: granted by a majority. `servers` (in
    /// `--url` order) serve `status`.
    Redlock {
        redlock: Redlock,
        servers: Vec<Single>,
    },
}

#[derive(Clone)]
pub struct Single {
    url: String,
    /// `host:port` (or the socket's path), for messages.
    addr: String,
    /// Where `url` came from, for the hint after a connection error.
    source: UrlSource,
    locker: Locker,
    /// `--tls-ca` and the others, for connections of the tool's own.
    tls: Option<TlsSettings>,
}

/// Where the server's URL came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UrlSource {
    Option,
    Env,
    Default,
}

impl UrlSource {
    /// Said after a connection error: which URL was tried, and how to name
    /// another server (never the URL itself, which may hold a password).
    pub fn hint(self) -> String {
        match self {
            UrlSource::Option => "the server named by --url".into(),
            UrlSource::Env => {
                "the server named by DLOCK_URL; name another with --url or DLOCK_URL".into()
            }
            UrlSource::Default => format!(
                "no --url or DLOCK_URL was given, so dlock tried the default {}; \
                 name the server with --url redis://host:port/ or DLOCK_URL",
                DEFAULT_URL
            ),
        }
    }
}

/// The usage error for a URL that names no server (the library's
/// message: the masked URL and the accepted forms).
fn bad_url(e: Error, from_env: bool) -> SetupError {
    let source = if from_env { "DLOCK_URL" } else { "--url" };
    let msg = match e {
        Error::Invalid(m) => m,
        e => e.to_string(),
    };
    SetupError(format!("{source} {msg}"), codes::USAGE)
}

/// A failure to set up a backend: its message and exit code.
pub struct SetupError(pub String, pub i32);

impl Backend {
    /// The backend for the `--url`s given (none: `DLOCK_URL`, else the
    /// local default).
    pub fn from_urls(urls: &[String]) -> std::result::Result<Backend, SetupError> {
        let default;
        let from_env = urls.is_empty();
        let mut source = UrlSource::Option;
        let urls = if urls.is_empty() {
            let env = std::env::var("DLOCK_URL").ok().filter(|u| !u.is_empty());
            source = if env.is_some() {
                UrlSource::Env
            } else {
                UrlSource::Default
            };
            default = [env.unwrap_or_else(|| DEFAULT_URL.to_string())];
            &default[..]
        } else {
            urls
        };
        let tls = crate::tlsopts::settings().map_err(|m| SetupError(m, codes::USAGE))?;
        let servers = urls
            .iter()
            .map(|url| {
                let locker = match &tls {
                    Some(tls) => Locker::new_tls(url, tls),
                    None => Locker::new(url),
                }
                .map_err(|e| bad_url(e, from_env))?;
                // Parsed already by the locker: the address for messages
                // (through Sentinel: the URL, as the master may change).
                let addr = if dlock_client::sentinel::is_sentinel_url(url) {
                    dlock_client::redact_url(url)
                } else {
                    url.as_str()
                        .into_connection_info()
                        .map(|i| i.addr.to_string())
                        .unwrap_or_default()
                };
                Ok(Single {
                    url: url.clone(),
                    addr,
                    source,
                    locker,
                    tls: tls.clone(),
                })
            })
            .collect::<std::result::Result<Vec<_>, SetupError>>()?;
        if servers.len() == 1 {
            return Ok(Backend::Single(Box::new(
                servers.into_iter().next().expect("one"),
            )));
        }
        let redlock = match &tls {
            Some(tls) => Redlock::new_tls(urls, tls),
            None => Redlock::new(urls),
        }
        .map_err(|e| {
            let msg = match e {
                Error::Invalid(m) => m,
                e => e.to_string(),
            };
            SetupError(msg, codes::USAGE)
        })?;
        Ok(Backend::Redlock { redlock, servers })
    }

    /// The one server's locker (`None` for Redlock).
    pub fn locker(&self) -> Option<&Locker> {
        match self {
            Backend::Single(s) => Some(&s.locker),
            Backend::Redlock { .. } => None,
        }
    }

    /// The servers' URLs, in `--url` order.
    pub fn urls(&self) -> Vec<&str> {
        match self {
            Backend::Single(s) => vec![s.url.as_str()],
            Backend::Redlock { servers, .. } => servers.iter().map(|s| s.url.as_str()).collect(),
        }
    }

    /// What `exec` tells its command about the server, for guarded writes
    /// with `redis-cli` (`DLOCK.GUARD "$DLOCK_RESOURCE" FENCE
    /// "$DLOCK_FENCE" ...`): `DLOCK_URL` (as given, login included: the
    /// command is the user's own), and `DLOCK_HOST` and `DLOCK_PORT`, or
    /// `DLOCK_SOCKET`, where the URL names them; None: removed from the
    /// command's environment (not inherited from dlock's). Redlock: every
    /// one removed, since a write on one of its servers is not protected
    /// by a majority.
    pub fn server_env(&self) -> Vec<(&'static str, Option<String>)> {
        let mut env = vec![
            ("DLOCK_URL", None),
            ("DLOCK_HOST", None),
            ("DLOCK_PORT", None),
            ("DLOCK_SOCKET", None),
        ];
        let Backend::Single(s) = self else {
            return env;
        };
        env[0].1 = Some(s.url.clone());
        if dlock_client::sentinel::is_sentinel_url(&s.url) {
            return env;
        }
        match s.url.as_str().into_connection_info().map(|i| i.addr) {
            Ok(redis::ConnectionAddr::Tcp(host, port))
            | Ok(redis::ConnectionAddr::TcpTls { host, port, .. }) => {
                env[1].1 = Some(host);
                env[2].1 = Some(port.to_string());
            }
            Ok(redis::ConnectionAddr::Unix(path)) => {
                env[3].1 = Some(path.to_string_lossy().into_owned());
            }
            Err(_) => {}
        }
        env
    }

    /// The sequencer check (`DLOCK.CHECK resource FENCE fence`) on the one
    /// server; Redlock is refused (a fence is one server's).
    pub fn check(&self, resource: &str, fence: u64) -> Result<bool> {
        match self {
            Backend::Single(s) => s.locker.check(resource, fence),
            Backend::Redlock { .. } => Err(Error::Invalid(
                "check takes one --url (a fence is one server's)".into(),
            )),
        }
    }

    /// The TLS settings every server was given (`--tls-ca` and the
    /// others), if any.
    pub fn tls(&self) -> Option<&TlsSettings> {
        match self {
            Backend::Single(s) => s.tls.as_ref(),
            Backend::Redlock { servers, .. } => servers.first().and_then(|s| s.tls.as_ref()),
        }
    }

    /// Servers a result needs: 1, or a majority for Redlock.
    fn quorum(&self) -> usize {
        match self {
            Backend::Single(_) => 1,
            Backend::Redlock { redlock, .. } => redlock.quorum(),
        }
    }

    /// Acquires. Connection errors are retried for `retry_for` in a row
    /// (waiting or not), and each new reason is said on stderr: a server
    /// that is down fails within that time, instead of a wait that retries
    /// silently forever.
    pub fn acquire(&self, spec: &LockSpec) -> Result<Option<Guard>> {
        match self {
            Backend::Single(s) => {
                let retry_for = spec.retry_for;
                let mut said = String::new();
                let mut r =
                    build!(s.locker.request(spec.resource.as_str()), spec).on_retry(move |e| {
                        let what = e.to_string();
                        if what != said {
                            crate::status_line::say(&format!(
                                "{what}; retrying for up to {} (--retry-for)",
                                crate::args::show(retry_for)
                            ));
                            said = what;
                        }
                    });
                if let Some(t) = &spec.token {
                    r = r.token(t.clone());
                }
                if let Some(w) = &spec.on_wanted {
                    r = r.on_wanted(w.hook());
                }
                r.session(spec.session).acquire()
            }
            Backend::Redlock { redlock, .. } => {
                if spec.token.is_some() {
                    return Err(Error::Invalid(
                        "--token takes one server (Redlock draws its own tokens)".into(),
                    ));
                }
                if spec.on_wanted.is_some() {
                    return Err(Error::Invalid("--on-wanted takes one server".into()));
                }
                build!(redlock.request(spec.resource.as_str()), spec).acquire()
            }
        }
    }

    /// Closes the locker's sessions (`DLOCK.SESSION CLOSE`), waiting at most
    /// `patience` (a server that does not answer must not hold dlock's
    /// exit; the session then ends at its ttl). Redlock has none.
    pub fn close_sessions(&self, patience: Duration) {
        let Backend::Single(s) = self else { return };
        let locker = s.locker.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("dlock-close".into())
            .spawn(move || {
                locker.close();
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(patience);
        }
    }

    /// Redlock: each server's `DLOCK.INFO`, by URL (None for one server).
    pub fn info_by_server(&self, resource: &str) -> Option<Vec<(String, Result<Info>)>> {
        match self {
            Backend::Single(_) => None,
            Backend::Redlock { servers, .. } => Some(
                servers
                    .iter()
                    .map(|s| {
                        let info = s.locker.info(resource).and_then(Info::parse);
                        (dlock_client::redact_url(&s.url), info)
                    })
                    .collect(),
            ),
        }
    }

    /// `DLOCK.INFO` on every server (one for a single server).
    pub fn info(&self, resource: &str) -> Result<Vec<Info>> {
        match self {
            Backend::Single(s) => Ok(vec![Info::parse(s.locker.info(resource)?)?]),
            Backend::Redlock { servers, .. } => {
                // Every server's view; unreachable ones are left out, as
                // long as a majority answered.
                let mut infos = Vec::new();
                let mut last = None;
                for s in servers {
                    match s.locker.info(resource).and_then(Info::parse) {
                        Ok(i) => infos.push(i),
                        Err(e) => last = Some(e),
                    }
                }
                match last {
                    Some(e) if infos.len() < self.quorum() => Err(e),
                    _ => Ok(infos),
                }
            }
        }
    }

    /// `DLOCK.EXTEND resource token ttl`: true if extended, false if the
    /// token holds nothing there (Redlock: on every server at once, decided
    /// by a majority).
    pub fn extend(&self, resource: &str, token: &str, ttl: Duration) -> Result<bool> {
        match self {
            Backend::Single(s) => s.locker.extend_token(resource, token, ttl),
            Backend::Redlock { redlock, .. } => redlock.extend_token(resource, token, ttl),
        }
    }

    /// `DLOCK.RELEASE resource token`: true if released.
    pub fn release(&self, resource: &str, token: &str) -> Result<bool> {
        match self {
            Backend::Single(s) => s.locker.release_token(resource, token),
            Backend::Redlock { redlock, .. } => redlock.release_token(resource, token),
        }
    }

    /// A library error as dlock reports it, naming the server(s).
    pub fn explain(&self, e: &Error) -> String {
        match (self, e) {
            (Backend::Single(s), Error::Unavailable(m)) => {
                let m = m.strip_prefix(&format!("{}: ", s.addr)).unwrap_or(m);
                format!("server {} unavailable: {m} ({})", s.addr, s.source.hint())
            }
            (Backend::Single(s), Error::Quarantined(m)) => {
                format!("server {} in restart quarantine: {m}", s.addr)
            }
            (Backend::Single(s), Error::Server(m)) => format!("server {}: {m}", s.addr),
            (Backend::Redlock { servers, .. }, Error::NoQuorum { .. }) => {
                let addrs: Vec<&str> = servers.iter().map(|s| s.addr.as_str()).collect();
                format!("{e} ({})", addrs.join(", "))
            }
            _ => e.to_string(),
        }
    }
}

/// `DLOCK.INFO`, decoded.
#[derive(Debug, PartialEq)]
pub enum Info {
    Free,
    /// A plain lock. `token` None: nobody holds it, but it is reserved for
    /// its queue (a pending handoff).
    Lock {
        token: Option<Bytes>,
        fence: u64,
        ttl_ms: i64,
        waiters: i64,
    },
    /// Shared holds, a semaphore, or reentrant holds: the list form.
    Holds {
        kind: String,
        limit: i64,
        waiters: i64,
        holds: Vec<Hold>,
    },
}

#[derive(Debug, PartialEq)]
pub struct Hold {
    pub token: Bytes,
    pub owner: Option<Bytes>,
    pub fence: u64,
    pub ttl_ms: i64,
    pub mode: String,
}

/// A map (RESP3) or flat array (RESP2) of fields.
pub fn fields(v: Value) -> Option<Vec<(String, Value)>> {
    let pairs = match v {
        Value::Map(m) => m,
        Value::Array(a) => {
            let mut it = a.into_iter();
            let mut m = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                m.push((k, v));
            }
            m
        }
        _ => return None,
    };
    pairs
        .into_iter()
        .map(|(k, v)| Some((text(k)?, v)))
        .collect()
}

pub fn text(v: Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(escaped(&b)),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s),
        _ => None,
    }
}

/// A resource name, token or owner as the server sent it: binary-safe,
/// kept as bytes so that JSON can give every byte back (see
/// `status::json_field`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    /// As text: see [`escaped`].
    pub fn text(&self) -> String {
        escaped(&self.0)
    }
}

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&self.text())
    }
}

impl From<&str> for Bytes {
    fn from(s: &str) -> Bytes {
        Bytes(s.as_bytes().to_vec())
    }
}

impl From<String> for Bytes {
    fn from(s: String) -> Bytes {
        Bytes(s.into_bytes())
    }
}

/// A string reply's bytes, as they are.
pub fn bytes(v: Value) -> Option<Bytes> {
    match v {
        Value::BulkString(b) => Some(Bytes(b)),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.into()),
        _ => None,
    }
}

/// Bytes as text: UTF-8 as it is, each byte that is not UTF-8 as `\xNN`.
/// Names and tokens are binary-safe; a lossy conversion would show
/// different tokens as the same one.
pub fn escaped(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

pub fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        _ => 0,
    }
}

impl Info {
    pub fn parse(v: Value) -> Result<Info> {
        if v == Value::Nil {
            return Ok(Info::Free);
        }
        let bad = || Error::Server("unexpected DLOCK.INFO reply".into());
        let f = fields(v).ok_or_else(bad)?;
        let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v);
        if let Some(holds) = get("holds") {
            let Value::Array(list) = holds else {
                return Err(bad());
            };
            let holds = list
                .iter()
                .map(|h| {
                    let hf = fields(h.clone())?;
                    let g = |k: &str| hf.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                    Some(Hold {
                        token: g("token").and_then(bytes)?,
                        owner: g("owner").and_then(bytes),
                        fence: g("fence").map_or(0, |v| int(&v)) as u64,
                        ttl_ms: g("ttl").map_or(-1, |v| int(&v)),
                        mode: g("mode").and_then(text).unwrap_or_default(),
                    })
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            return Ok(Info::Holds {
                kind: get("kind").cloned().and_then(text).unwrap_or_default(),
                limit: get("limit").map_or(1, int),
                waiters: get("waiters").map_or(0, int),
                holds,
            });
        }
        Ok(Info::Lock {
            token: get("token").cloned().and_then(bytes),
            fence: get("fence").map_or(0, int) as u64,
            ttl_ms: get("ttl").map_or(-1, int),
            waiters: get("waiters").map_or(0, int),
        })
    }

    pub fn waiters(&self) -> i64 {
        match self {
            Info::Free => 0,
            Info::Lock { waiters, .. } | Info::Holds { waiters, .. } => *waiters,
        }
    }

    /// The fences of the current holders (empty when free or reserved).
    pub fn fences(&self) -> Vec<u64> {
        match self {
            Info::Free => vec![],
            Info::Lock { token: None, .. } => vec![],
            Info::Lock { fence, .. } => vec![*fence],
            Info::Holds { holds, .. } => holds.iter().map(|h| h.fence).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_not_utf8_are_escaped() {
        assert_eq!(escaped(b"job:1"), "job:1");
        assert_eq!(escaped("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(escaped(&[b'a', 0xff, b'b', 0xc3]), "a\\xffb\\xc3");
        let token = Value::BulkString(vec![b't', 0x80]);
        assert_eq!(text(token).as_deref(), Some("t\\x80"));
    }
}
