//! What each client believed it held: every grant, member by member, and
//! per (client, token, resource) the holds from grant to release or bound,
//! with the replies that showed a hold lost before its bound.
use super::prep::{intern, Grant, Hold, Loss, Prepared, MARGIN_US};
use crate::history::{Command, Kind, Op, Outcome, Value};
use std::collections::HashMap;

impl<'a> Prepared<'a> {
    pub(super) fn collect_grants(&mut self, interned: &mut HashMap<&'a str, u32>) {
        for (i, o) in self.ops.iter().enumerate() {
            if !matches!(o.op.command, Command::Acquire | Command::Macquire) {
                continue;
            }
            let (Some(fence), Some(complete)) = (o.granted(), o.complete) else {
                continue;
            };
            for &r in &o.res {
                let owner = match (&o.op.owner, self.resources[r as usize].kind) {
                    (_, Kind::Semaphore { .. }) | (None, _) => o.token,
                    (Some(name), _) => intern(interned, &mut self.names, name),
                };
                self.grants.push(Grant {
                    op: i,
                    res: r,
                    owner,
                    fence,
                    invoke: o.root_invoke,
                    complete,
                });
            }
        }
    }

    /// Runs each (client, token, resource)'s operations through what the
    /// client believes: grants start a hold, renewals move its bound,
    /// `RELEASE` ends it, a 0 reply before the bound is a loss.
    pub(super) fn believe(&mut self) {
        // Grants by (op, res) to find owners again.
        let mut owner_of: HashMap<(usize, u32), u32> = HashMap::new();
        for g in &self.grants {
            owner_of.insert((g.op, g.res), g.owner);
        }
        let mut by_key: HashMap<(u32, u32, u32), Vec<usize>> = HashMap::new();
        for (i, o) in self.ops.iter().enumerate() {
            let reads = matches!(o.op.command, Command::Info | Command::Observe);
            // A session's holds have no lease of their own (`session_bounds.rs`).
            if reads || o.op.command.is_session() || o.op.session.is_some() {
                continue;
            }
            if o.outcome.is_none() && !is_release(o.op) {
                continue;
            }
            for &r in &o.res {
                by_key.entry((o.client, o.token, r)).or_default().push(i);
            }
        }
        let mut keys: Vec<_> = by_key.into_iter().collect();
        keys.sort_unstable_by_key(|(k, _)| *k);
        for ((client, token, res), list) in keys {
            let mut cur: Option<usize> = None;
            for i in list {
                let o = &self.ops[i];
                let ttl = o.op.ttl_ms.unwrap_or(0) * 1000;
                let new_bound = (o.invoke + ttl).saturating_sub(MARGIN_US);
                match o.op.command {
                    Command::Acquire | Command::Macquire => {
                        let Some(Value::Fence(fence)) = o.value() else {
                            continue;
                        };
                        let complete = o.complete.unwrap_or(o.invoke);
                        let durable = o.op.durable.then_some(new_bound);
                        match cur {
                            Some(h) if self.holds[h].fence == *fence => {
                                let h = &mut self.holds[h];
                                h.bound = new_bound;
                                h.end = new_bound;
                                // A shorter lease replicated since ends the
                                // durable guarantee earlier.
                                h.durable_bound =
                                    durable.or(h.durable_bound.map(|b| b.min(new_bound)));
                                h.renewed = o.invoke;
                            }
                            _ => {
                                cur = Some(self.holds.len());
                                self.holds.push(Hold {
                                    op: i,
                                    client,
                                    token,
                                    owner: owner_of.get(&(i, res)).copied().unwrap_or(token),
                                    res,
                                    mode: o.op.mode,
                                    permits: o.op.permits.unwrap_or(1),
                                    fence: *fence,
                                    start: complete,
                                    bound: new_bound,
                                    end: new_bound,
                                    durable_bound: durable,
                                    grant_invoke: o.root_invoke,
                                    renewed: o.root_invoke,
                                });
                            }
                        }
                    }
                    Command::Extend | Command::Mextend => {
                        let (Some(h), Some(n)) = (cur, o.int()) else {
                            continue;
                        };
                        if n >= 1 {
                            self.holds[h].bound = new_bound;
                            self.holds[h].end = new_bound;
                            self.holds[h].renewed = o.invoke;
                            // An EXTEND may shorten the lease: replicas then
                            // keep the hold only until the shorter end, so
                            // the durable grant guarantees no more than that.
                            let d = &mut self.holds[h].durable_bound;
                            *d = d.map(|b| b.min(new_bound));
                        } else if o.complete.unwrap_or(u64::MAX) < self.holds[h].bound {
                            let since = self.holds[h].renewed;
                            self.losses.push(Loss {
                                hold: h,
                                op: i,
                                since,
                            });
                        }
                    }
                    Command::Release | Command::Mrelease => {
                        // A handover refused (an error reply) changed
                        // nothing: the hold is still believed.
                        if o.op.to.is_some() && matches!(o.outcome, Some(Outcome::Fail { .. })) {
                            continue;
                        }
                        let Some(h) = cur.take() else { continue };
                        let hold = &mut self.holds[h];
                        hold.end = hold.bound.min(o.invoke);
                        let short = match o.int() {
                            Some(n) if o.op.command == Command::Release => n == 0,
                            Some(n) => n < o.res.len() as i64,
                            None => false,
                        };
                        if short && o.complete.unwrap_or(u64::MAX) < hold.bound {
                            let since = hold.renewed;
                            self.losses.push(Loss {
                                hold: h,
                                op: i,
                                since,
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        for (i, h) in self.holds.iter().enumerate() {
            self.holds_by_key
                .entry((h.client, h.token, h.res))
                .or_default()
                .push(i);
        }
        // One loss per op: a set's 0 reply names its first member.
        let mut seen = std::collections::HashSet::new();
        self.losses.retain(|l| seen.insert(l.op));
    }
}

fn is_release(op: &Op) -> bool {
    matches!(op.command, Command::Release | Command::Mrelease)
}
