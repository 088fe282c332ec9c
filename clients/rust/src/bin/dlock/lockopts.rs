//! The options every command that takes a lock shares: `--url` (and the
//! TLS options of `tlsopts`), `--ttl`,
//! `--wait`/`--no-wait`, `--retry-for`, `--shared`, `--limit`, `--permits`,
//! `--priority` (and `--token` for `acquire`).

use crate::args::{self, usage, Args, Parsed};
use crate::backend::{LockSpec, Wait};
use std::time::Duration;

pub const TTL: Duration = Duration::from_secs(30);

/// How long an unreachable server is retried before dlock gives up (exit
/// 69), waiting or not: a restart or failover shorter than this goes
/// unnoticed, a server that is down fails a cron job within it.
pub const RETRY_FOR: Duration = Duration::from_secs(5);

pub struct LockOpts {
    pub urls: Vec<String>,
    pub ttl: Duration,
    pub wait: Wait,
    pub retry_for: Duration,
    pub shared: bool,
    pub limit: Option<u32>,
    /// `PERMITS k`: the hold counts as k of `--limit`'s permits.
    pub permits: Option<u32>,
    /// `PRIORITY p`: 0 (the default) to 1000, higher served first, aged
    /// by the server (docs/waiting.md#priorities).
    pub priority: Option<u16>,
    pub token: Option<String>,
    /// Hold the lock in a session where the server has them (exec, elect).
    pub session: bool,
}

impl LockOpts {
    /// Defaults, with the `--url`s given before the command.
    pub fn new(urls: Vec<String>) -> LockOpts {
        LockOpts {
            urls,
            ttl: TTL,
            wait: Wait::Forever,
            retry_for: RETRY_FOR,
            shared: false,
            limit: None,
            permits: None,
            priority: None,
            token: None,
            session: true,
        }
    }

    /// Takes option `--name` if it is one of these; false if not.
    pub fn option(
        &mut self,
        name: &str,
        inline: Option<String>,
        a: &mut Args,
        token_ok: bool,
    ) -> Parsed<bool> {
        if crate::tlsopts::option(name, inline.clone(), a)? {
            return Ok(true);
        }
        match name {
            "url" => self.urls.push(a.value(name, inline)?),
            "ttl" => {
                self.ttl = args::duration(name, &a.value(name, inline)?)?;
                if self.ttl.is_zero() {
                    return usage("--ttl must be at least 1ms");
                }
            }
            "wait" => {
                let d = args::duration(name, &a.value(name, inline)?)?;
                self.wait = if d.is_zero() { Wait::No } else { Wait::For(d) };
            }
            "no-wait" => {
                args::flag(name, inline)?;
                self.wait = Wait::No;
            }
            "retry-for" => self.retry_for = args::duration(name, &a.value(name, inline)?)?,
            "shared" => {
                args::flag(name, inline)?;
                self.shared = true;
            }
            "limit" => {
                let n = args::count(name, &a.value(name, inline)?)?;
                if n == 0 {
                    return usage("--limit must be at least 1");
                }
                if n > dlock_client::MAX_LIMIT {
                    return usage(format!(
                        "--limit {n}: at most {} (the server's maximum)",
                        dlock_client::MAX_LIMIT
                    ));
                }
                self.limit = Some(n);
            }
            "permits" => {
                let k = args::count(name, &a.value(name, inline)?)?;
                if k == 0 {
                    return usage("--permits must be at least 1");
                }
                self.permits = Some(k);
            }
            "priority" => {
                let v = a.value(name, inline)?;
                match v.parse::<u16>() {
                    Ok(p) if p <= dlock_client::MAX_PRIORITY => self.priority = Some(p),
                    _ => {
                        return usage(format!(
                            "--priority {v:?}: a whole number from 0 to {} (the server's maximum)",
                            dlock_client::MAX_PRIORITY
                        ))
                    }
                }
            }
            // exec and elect: the lease renewed on its own (`EXTEND`), not
            // kept by a session.
            "no-session" if !token_ok => {
                args::flag(name, inline)?;
                self.session = false;
            }
            "token" if token_ok => {
                let t = a.value(name, inline)?;
                if t.is_empty() {
                    return usage("--token must not be empty");
                }
                self.token = Some(t);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The options that only hold together: `--permits K` needs `--limit
    /// N` above 1 and K at most N.
    pub fn check(&self) -> Parsed<()> {
        match (self.permits, self.limit) {
            (Some(k), Some(n)) if n > 1 && k <= n => Ok(()),
            (Some(k), Some(n)) if n > 1 => usage(format!("--permits {k}: at most --limit ({n})")),
            (Some(_), _) => usage("--permits needs --limit N above 1"),
            (None, _) => Ok(()),
        }
    }

    /// The request for `resource`, no watchdog.
    pub fn spec(&self, resource: &str) -> LockSpec {
        LockSpec {
            resource: resource.to_string(),
            ttl: self.ttl,
            wait: self.wait,
            retry_for: self.retry_for,
            shared: self.shared,
            limit: self.limit,
            permits: self.permits,
            priority: self.priority,
            token: self.token.clone(),
            watchdog: false,
            session: self.session,
            on_wanted: None,
        }
    }
}

/// The `--url` option and the TLS options alone (commands that take no
/// lock options).
pub fn url_option(
    urls: &mut Vec<String>,
    name: &str,
    inline: Option<String>,
    a: &mut Args,
) -> Parsed<bool> {
    if name != "url" {
        return crate::tlsopts::option(name, inline, a);
    }
    urls.push(a.value(name, inline)?);
    Ok(true)
}
