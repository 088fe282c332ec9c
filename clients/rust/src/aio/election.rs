//! Leader election on the tokio runtime: the blocking API's
//! [`Election`](crate::Election), with `async` calls and an async stream of
//! leader changes ([`Observe::next_leader`]).

use super::guard::Guard;
use super::locker::Locker;
use crate::election::{candidate_token, observe_cmd, observed, Leader, OBSERVE_CHUNK};
use crate::error::Result;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// One election (see [`crate::Election`]).
#[derive(Clone)]
pub struct Election {
    locker: Locker,
    name: String,
    id: Option<String>,
    ttl: Duration,
}

impl Locker {
    /// The election held on `name`.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
            id: None,
            ttl: Duration::from_secs(15),
        }
    }
}

impl Election {
    /// The id observers see for this candidate (default: its token).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The leadership's lease (default 15 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Waits up to `wait` to lead. Cancelling the future (dropping it)
    /// leaves no hold and no waiter behind: the blocking acquire's
    /// connection is closed, which the server counts as the waiter leaving.
    pub async fn campaign(&self, wait: Duration) -> Result<Option<Leadership>> {
        let mut req = self
            .locker
            .request(self.name.clone())
            .ttl(self.ttl)
            .watchdog();
        if let Some(token) = candidate_token(self.id.as_deref())? {
            req = req.token(token);
        }
        if !wait.is_zero() {
            req = req.wait(wait);
        }
        Ok(req.acquire().await?.map(|guard| Leadership { guard }))
    }

    /// Who leads now.
    pub async fn leader(&self) -> Result<Leader> {
        let (_, l) = self.observe_once(None, None).await?;
        Ok(l.unwrap_or(Leader::Nobody))
    }

    /// The leader changes, as an async stream: call
    /// [`Observe::next_leader`] in a loop.
    pub fn observe(&self) -> Observe {
        Observe {
            election: self.clone(),
            version: None,
        }
    }

    async fn observe_once(
        &self,
        since: Option<&str>,
        wait: Option<Duration>,
    ) -> Result<(Option<String>, Option<Leader>)> {
        let cmd = observe_cmd(&self.name, since, wait);
        let io = self.locker.inner.io_timeout;
        let connected = AtomicBool::new(false);
        // A waiting observation blocks its connection: a dedicated one.
        let (reply, _) = self
            .locker
            .inner
            .call(
                &cmd,
                false,
                wait.is_some(),
                io,
                wait.unwrap_or_default(),
                &connected,
            )
            .await
            .map_err(crate::error::Failure::into_error)?;
        observed(reply, since)
    }
}

/// The leadership this candidate holds (see [`crate::Leadership`]).
pub struct Leadership {
    guard: Guard,
}

impl Leadership {
    pub fn term(&self) -> u64 {
        self.guard.fence()
    }

    pub fn token(&self) -> &str {
        self.guard.token()
    }

    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the leadership is lost.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// Steps down; whether this candidate still led.
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }
}

/// The leader changes of an election.
pub struct Observe {
    election: Election,
    version: Option<String>,
}

impl Observe {
    /// The next leader: at once the first time (and after a change that
    /// happened since), else when it changes.
    pub async fn next_leader(&mut self) -> Result<Leader> {
        loop {
            let (version, leader) = match &self.version {
                None => self.election.observe_once(None, None).await?,
                Some(v) => {
                    let v = v.clone();
                    self.election
                        .observe_once(Some(&v), Some(OBSERVE_CHUNK))
                        .await?
                }
            };
            self.version = version;
            if let Some(l) = leader {
                return Ok(l);
            }
        }
    }
}
