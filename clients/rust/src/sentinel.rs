//! Redis Sentinel: a server named by its master name and the sentinels that
//! watch it, found again on every new connection.
//!
//! `redis+sentinel://[user:password@]host1[:port],host2[:port]/name[/db]`
//! (`redis-sentinel://` too; a sentinel's port defaults to 26379). The
//! login is the data nodes' (the master's). The sentinels' own login, when
//! they require one, goes in the query: `?sentinel_password=...` and
//! `&sentinel_username=...`.
//!
//! Every sentinel is asked `SENTINEL GET-MASTER-ADDR-BY-NAME name` at once
//! (a slow or dead one delays nothing), and an address is used only when
//! the server there answers `ROLE` as a master: a sentinel that has not yet
//! seen a failover names the demoted master, now a replica.

use crate::error::{Error, Failure, Result};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The form of a Sentinel URL, for the error of one that is not.
pub const SENTINEL_URL_FORM: &str =
    "redis+sentinel://[user:password@]host1[:port],host2[:port]/master-name[/db][?sentinel_password=...]";

/// The port a sentinel listens on when the URL names none.
const SENTINEL_PORT: u16 = 26379;

pub use crate::url::is_sentinel_url;

/// The address and login of the master the sentinels of `url` name now
/// (checked with `ROLE`), found within `timeout`: for a tool that makes
/// its own connections. A plain server URL is parsed only.
pub fn current_master(url: &str, timeout: Duration) -> Result<ConnectionInfo> {
    if !is_sentinel_url(url) {
        return crate::url::parse(url);
    }
    let sentinels = Sentinels::parse(url)?;
    let (_, info) = sentinels
        .connect_master(timeout)
        .map_err(|f| f.at(&sentinels.describe()).into_error())?;
    Ok(info)
}

/// The sentinels of one master, and the logins for them and for it.
#[derive(Clone, Debug)]
pub(crate) struct Sentinels {
    sentinels: Vec<ConnectionInfo>,
    master: String,
    /// The data nodes' login and database.
    login: RedisConnectionInfo,
}

impl Sentinels {
    /// `url` (a Sentinel URL) parsed; [`Error::Invalid`] naming the (masked)
    /// URL and the accepted form otherwise.
    pub(crate) fn parse(url: &str) -> Result<Sentinels> {
        let invalid = |why: &str| {
            Error::Invalid(format!(
                "{}: {why}; the form is {SENTINEL_URL_FORM}",
                crate::url::redact_url(url)
            ))
        };
        let rest = url.get(17..).filter(|_| is_sentinel_url(url));
        let rest = rest.ok_or_else(|| invalid("not a Sentinel URL"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (&authority[..at], &authority[at + 1..]),
            None => ("", authority),
        };
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        if master.is_empty() {
            return Err(invalid("no master name"));
        }
        let db = db.trim_end_matches('/');
        // The redis crate decodes a login (percent-escapes) and checks a
        // database number: it is given a URL of its form to parse.
        let login = |userinfo: &str, db: &str| {
            let at = if userinfo.is_empty() { "" } else { "@" };
            format!("redis://{userinfo}{at}127.0.0.1/{db}")
                .into_connection_info()
                .map(|i| i.redis)
        };
        let data_login = login(userinfo, db).map_err(|_| invalid("a bad login or database"))?;
        let mut sentinel_user = String::new();
        let mut sentinel_password = String::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_username", v)) => sentinel_user = v.to_string(),
                Some(("sentinel_password", v)) => sentinel_password = v.to_string(),
                _ => {
                    return Err(invalid(
                        "an unknown option (sentinel_username, sentinel_password)",
                    ))
                }
            }
        }
        let sentinel_userinfo = match (sentinel_user.is_empty(), sentinel_password.is_empty()) {
            (true, true) => String::new(),
            _ => format!("{sentinel_user}:{sentinel_password}"),
        };
        let sentinel_login =
            login(&sentinel_userinfo, "").map_err(|_| invalid("a bad sentinel login"))?;
        let sentinels = hosts
            .split(',')
            .map(|host| {
                let has_port = host
                    .rsplit_once(':')
                    .is_some_and(|(h, p)| !h.ends_with(':') && p.parse::<u16>().is_ok());
                let host = if has_port || host.is_empty() {
                    host.to_string()
                } else {
                    format!("{host}:{SENTINEL_PORT}")
                };
                let addr = format!("redis://{host}/")
                    .into_connection_info()
                    .ok()
                    .filter(|_| !host.is_empty())
                    .ok_or_else(|| invalid("a bad sentinel address"))?
                    .addr;
                Ok(ConnectionInfo {
                    addr,
                    redis: sentinel_login.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Sentinels {
            sentinels,
            master: master.to_string(),
            login: data_login,
        })
    }

    /// The data nodes' login, at the first sentinel's address (a
    /// placeholder: the master's address is asked for on every connect).
    pub(crate) fn login_info(&self) -> ConnectionInfo {
        ConnectionInfo {
            addr: self.sentinels[0].addr.clone(),
            redis: self.login.clone(),
        }
    }

    /// How messages name the master before it is found.
    pub(crate) fn describe(&self) -> String {
        format!("sentinel master \"{}\"", self.master)
    }

    /// A connection to the current master, and its address and login, within
    /// `timeout`. Retry: no sentinel answered, or none named a server that
    /// answers as a master (a failover in progress). Fatal: no sentinel knows
    /// the name.
    pub(crate) fn connect_master(
        &self,
        timeout: Duration,
    ) -> std::result::Result<(redis::Connection, ConnectionInfo), Failure> {
        let timeout = crate::limits::clamp(timeout);
        let deadline = crate::limits::after(Instant::now(), timeout);
        let (tx, rx) = mpsc::channel();
        for sentinel in &self.sentinels {
            let (tx, sentinel, master) = (tx.clone(), sentinel.clone(), self.master.clone());
            let asked = std::thread::Builder::new()
                .name("dlock-sentinel".into())
                .spawn(move || {
                    let _ = tx.send((sentinel.addr.to_string(), ask(&sentinel, &master, timeout)));
                });
            if asked.is_err() {
                return Err(Failure::Retry(Error::Unavailable(
                    "no thread to ask a sentinel".into(),
                )));
            }
        }
        drop(tx);
        let mut problems = Vec::new();
        let mut unknown = 0;
        let mut tried: Vec<ConnectionAddr> = Vec::new();
        while let Ok((sentinel, answer)) =
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            let addr = match answer {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    unknown += 1;
                    continue;
                }
                Err(e) => {
                    problems.push(format!("sentinel {sentinel}: {e}"));
                    continue;
                }
            };
            if tried.contains(&addr) {
                continue;
            }
            tried.push(addr.clone());
            let info = ConnectionInfo {
                addr,
                redis: self.login.clone(),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match master_conn(&info, left) {
                Ok(conn) => return Ok((conn, info)),
                Err(e) => {
                    problems.push(format!("{} (named by sentinel {sentinel}): {e}", info.addr))
                }
            }
        }
        if unknown == self.sentinels.len() {
            return Err(Failure::Fatal(Error::Unavailable(format!(
                "no master named \"{}\" is known to the sentinels {}",
                self.master,
                self.sentinel_list()
            ))));
        }
        if problems.is_empty() {
            problems.push(format!("no sentinel answered within {timeout:?}"));
        }
        Err(Failure::Retry(Error::Unavailable(format!(
            "no master found through the sentinels {}: {}",
            self.sentinel_list(),
            problems.join("; ")
        ))))
    }

    fn sentinel_list(&self) -> String {
        let addrs: Vec<String> = self.sentinels.iter().map(|s| s.addr.to_string()).collect();
        addrs.join(", ")
    }
}

/// A connection with its reads and writes bounded by `timeout`. The
/// handshake (a login) may take as long as `timeout` again: the caller
/// bounds the whole.
fn connect(info: &ConnectionInfo, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let timeout = timeout.max(Duration::from_millis(1));
    let conn = redis::Client::open(info.clone())?.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// The address sentinel `sentinel` gives for `master` (None: it knows no
/// such master).
fn ask(
    sentinel: &ConnectionInfo,
    master: &str,
    timeout: Duration,
) -> redis::RedisResult<Option<ConnectionAddr>> {
    let mut conn = connect(sentinel, timeout)?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query(&mut conn)?;
    Ok(reply.map(|(host, port)| ConnectionAddr::Tcp(host, port)))
}

/// A connection to `info`, if the server there says it is a master.
fn master_conn(info: &ConnectionInfo, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let mut conn = connect(info, timeout)?;
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut conn)?;
    match role.first() {
        Some(Value::BulkString(r)) if r == b"master" => Ok(conn),
        Some(Value::SimpleString(r)) if r == "master" => Ok(conn),
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::ReadOnly,
            "not a master (a failover in progress, or a sentinel that has not seen it)",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_timeout_is_taken() {
        // Nothing listens on port 1: refused at once, whatever the timeout.
        for t in [Duration::ZERO, Duration::MAX] {
            let e = current_master("redis+sentinel://127.0.0.1:1/m", t).unwrap_err();
            assert!(
                matches!(&e, Error::Unavailable(m) if m.contains("127.0.0.1:1")),
                "{e}"
            );
        }
    }

    #[test]
    fn urls_are_parsed_and_bad_ones_explained() {
        let s = Sentinels::parse(
            "redis+sentinel://u:p%40w@h1,h2:26380/mymaster/3?sentinel_password=sp",
        )
        .unwrap();
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.login.db, 3);
        assert_eq!(s.login.username.as_deref(), Some("u"));
        assert_eq!(s.login.password.as_deref(), Some("p@w"));
        let addrs: Vec<String> = s.sentinels.iter().map(|i| i.addr.to_string()).collect();
        assert_eq!(addrs, ["h1:26379", "h2:26380"]);
        assert_eq!(s.sentinels[0].redis.password.as_deref(), Some("sp"));
        let s = Sentinels::parse("REDIS-SENTINEL://127.0.0.1:1/m").unwrap();
        assert_eq!((s.login.db, s.login.password.clone()), (0, None));
        assert_eq!(s.sentinels[0].redis.password, None);
        for bad in [
            "redis+sentinel://h1/",
            "redis+sentinel://h1:1/m/notadb",
            "redis+sentinel://h1,,h2/m",
            "redis+sentinel://h1:99999/m",
            "redis+sentinel://u:secret@h1/m?other=1",
            "redis://h1/m",
        ] {
            let e = Sentinels::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(SENTINEL_URL_FORM) && !e.contains("secret"),
                "{bad}: {e}"
            );
        }
    }
}
