//! Leader election on the tokio runtime: the blocking API's
//! [`Election`](crate::Election), with `async` calls and an async stream of
//! leader changes ([`Observe::next_leader`]).

use super::guard::Guard;
use super::locker::Locker;
use crate::election::{candidate_token, observe_cmd, observed, Leader, OBSERVE_CHUNK};
use crate::error::Result;
use crate::handover::{candidate_in, check_id, HandedOver};
use crate::queue::MAX_WAITERS_PAGE;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One election (see [`crate::Election`]).
#[derive(Clone)]
pub struct Election {
    locker: Locker,
    name: String,
    id: Option<String>,
    ttl: Duration,
    prefer: Option<String>,
}

impl Locker {
    /// The election held on `name`.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
            id: None,
            ttl: Duration::from_secs(15),
            prefer: None,
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

    /// Prefer candidate `id` as the leader (see
    /// [`crate::Election::prefer`]): a task of the runtime hands the lead
    /// over once `id` waits, tried when this candidate starts leading and
    /// again every third of the ttl.
    pub fn prefer(mut self, id: impl Into<String>) -> Self {
        self.prefer = Some(id.into());
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
        if let Some(p) = &self.prefer {
            crate::handover::check_id(p)?;
        }
        if !wait.is_zero() {
            req = req.wait(wait);
        }
        let Some(guard) = req.acquire().await? else {
            return Ok(None);
        };
        let lead = Leadership {
            guard: Arc::new(guard),
            locker: self.locker.clone(),
            name: self.name.clone(),
        };
        if let Some(p) = self.prefer.clone().filter(|p| self.id.as_ref() != Some(p)) {
            let guard = Arc::downgrade(&lead.guard);
            let (locker, name) = (lead.locker.clone(), lead.name.clone());
            let every = self.ttl / 3;
            tokio::spawn(async move {
                // Ends with the lead: handed over, resigned or dropped (the
                // guard gone), or lost.
                loop {
                    let Some(guard) = guard.upgrade().filter(|g| !g.is_lost()) else {
                        return;
                    };
                    if let Ok(true) = hand_over(&locker, &name, &guard, &p).await {
                        return;
                    }
                    drop(guard);
                    tokio::time::sleep(every).await;
                }
            });
        }
        Ok(Some(lead))
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
    guard: Arc<Guard>,
    locker: Locker,
    name: String,
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

    /// Steps down; whether this candidate still led. A [`Election::prefer`]
    /// task that is trying a handover at this moment ends first.
    pub async fn resign(self) -> Result<bool> {
        let mut guard = self.guard;
        loop {
            match Arc::try_unwrap(guard) {
                Ok(g) => return g.release().await,
                Err(shared) => {
                    guard = shared;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }

    /// Hands the lead to candidate `id` if it waits (see the blocking
    /// [`crate::Leadership::hand_over`]): `Ok(true)`, `id` leads and this
    /// leadership ended; `Ok(false)`, this candidate still leads (or had
    /// lost its lead already).
    pub async fn hand_over(&self, id: &str) -> Result<bool> {
        hand_over(&self.locker, &self.name, &self.guard, id).await
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

/// Hands the lead of `guard` on `name` to candidate `id` if it waits:
/// its token found a `DLOCK.WAITERS` page at a time.
async fn hand_over(locker: &Locker, name: &str, guard: &Guard, id: &str) -> Result<bool> {
    check_id(id)?;
    let mut offset = 0;
    let to = loop {
        let page = locker.waiters(name, offset, MAX_WAITERS_PAGE).await?;
        if let Some(t) = candidate_in(&page, id) {
            break t;
        }
        if page.len() < MAX_WAITERS_PAGE {
            return Ok(false);
        }
        offset += page.len() as u64;
    };
    Ok(guard.hand_over(&to).await? == HandedOver::Yes)
}
