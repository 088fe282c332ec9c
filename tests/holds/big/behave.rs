//! After a load or a move, both resources must still decide against every
//! hold they have: the full semaphore refuses a newcomer until one permit
//! is released and then exactly one more, the readers keep a writer out
//! and let another reader in. The stored holds then differ from before by
//! exactly what those commands did, every other hold untouched.
use super::*;
use redis::RedisResult;

fn ask(
    c: &mut Connection,
    key: &str,
    tok: &str,
    ttl: u64,
    opts: &[String],
) -> RedisResult<Option<i64>> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg(tok)
        .arg(ttl)
        .arg(opts)
        .query(c)
}

fn granted(c: &mut Connection, key: &str, tok: &str, ttl: u64, opts: &[String]) -> i64 {
    match ask(c, key, tok, ttl, opts) {
        Ok(Some(f)) => f,
        other => panic!("ACQUIRE {key} {tok} {opts:?}: {other:?}"),
    }
}

fn refused(c: &mut Connection, key: &str, tok: &str, opts: &[String], what: &str) {
    let r = ask(c, key, tok, 60_000, opts);
    assert!(matches!(r, Ok(None)), "{what}: {key} {tok} {opts:?}: {r:?}");
}

/// What one resource's holds must be after `behave`: `before` less
/// `gone`, `moved` with a deadline in its window, plus `added`.
struct Expect<'a> {
    before: &'a [Hold],
    gone: &'a [u8],
    moved: (&'a [u8], std::ops::RangeInclusive<i64>),
    added: (Hold, std::ops::RangeInclusive<i64>),
}

impl Expect<'_> {
    fn check(&self, c: &mut Connection, key: &str, what: &str) {
        let after = by_token(&multi(c, key).1);
        let mut want: Vec<(&Hold, Option<&std::ops::RangeInclusive<i64>>)> = self
            .before
            .iter()
            .filter(|h| *h.token != *self.gone)
            .map(|h| (h, (*h.token == *self.moved.0).then_some(&self.moved.1)))
            .collect();
        want.push((&self.added.0, Some(&self.added.1)));
        want.sort_by(|a, b| a.0.token.cmp(&b.0.token));
        assert_eq!(after.len(), want.len(), "{what}: {key} holds");
        for (i, (h, (w, window))) in after.iter().zip(&want).enumerate() {
            let ok = match window {
                None => h == *w,
                Some(range) => {
                    (&h.token, &h.owner, h.fence, h.shared)
                        == (&w.token, &w.owner, w.fence, w.shared)
                        && range.contains(&h.deadline_ms)
                }
            };
            assert!(
                ok,
                "{what}: {key} hold {i} is {}, expected {} {window:?}",
                show(h),
                show(w)
            );
        }
        let latest = after.iter().map(|h| h.deadline_ms).max().unwrap();
        assert_eq!(pexpiretime(c, key), latest, "{what}: {key} expiry");
        info_matches(c, key, what);
    }
}

impl Big {
    /// Both resources decide against their whole set of holds.
    pub fn behave(&self, c: &mut Connection, what: &str) {
        let mark = last_fence(c);
        self.semaphore_behaves(c, what, mark);
        self.readers_behave(c, what, mark);
    }

    fn semaphore_behaves(&self, c: &mut Connection, what: &str, mark: i64) {
        let (key, opts) = (&self.sem.key, self.sem.opts());
        let before = by_token(&multi(c, key).1);
        let newest = before.iter().map(|h| h.fence).max().unwrap().max(mark);
        refused(c, key, "newcomer", &opts, &format!("{what}: full"));
        let other = ["LIMIT".to_string(), "7".to_string()];
        let e = err_text(&ask(c, key, "newcomer", 60_000, &other).unwrap_err());
        let limit = self.sem.limit;
        let want = format!(
            "ERR the resource is held with LIMIT {limit}: requests must ask for the same LIMIT"
        );
        assert_eq!(e, want, "{what}");

        // A retry of the last permit: its own fence back, its deadline moved.
        let last = before.last().unwrap();
        let ttl = BASE_TTL_MS + 5_000;
        let t0 = now_ms();
        let f = granted(c, key, &text(&last.token), ttl, &opts);
        let moved = t0 + ttl as i64..=now_ms() + ttl as i64;
        assert_eq!(f, last.fence, "{what}: a retry gets its fence back");

        // One permit released frees exactly one place.
        let gone = &before[before.len() / 3];
        assert_eq!(release(c, key, &gone.token), 1, "{what}");
        assert_eq!(release(c, key, &gone.token), 0, "{what}: released twice");
        let t0 = now_ms();
        let f = granted(c, key, "newcomer", BASE_TTL_MS, &opts);
        let added = t0 + BASE_TTL_MS as i64..=now_ms() + BASE_TTL_MS as i64;
        assert!(f > newest, "{what}: fence {f} not above {newest}");
        refused(c, key, "newcomer-2", &opts, &format!("{what}: full again"));
        Expect {
            before: &before,
            gone: &gone.token,
            moved: (&last.token, moved),
            added: (hold("newcomer", f, false), added),
        }
        .check(c, key, what);
    }

    fn readers_behave(&self, c: &mut Connection, what: &str, mark: i64) {
        let (key, opts) = (&self.readers.key, self.readers.opts());
        let before = by_token(&multi(c, key).1);
        let newest = before.iter().map(|h| h.fence).max().unwrap().max(mark);
        refused(c, key, "writer", &[], &format!("{what}: readers hold"));
        let t0 = now_ms();
        let f = granted(c, key, "reader-new", BASE_TTL_MS, &opts);
        let added = t0 + BASE_TTL_MS as i64..=now_ms() + BASE_TTL_MS as i64;
        assert!(f > newest, "{what}: fence {f} not above {newest}");

        let last = before.last().unwrap();
        let ttl = BASE_TTL_MS + 7_000;
        let t0 = now_ms();
        assert_eq!(extend(c, key, &last.token, ttl), 1, "{what}");
        let moved = t0 + ttl as i64..=now_ms() + ttl as i64;
        let gone = &before[before.len() / 3];
        assert_eq!(release(c, key, &gone.token), 1, "{what}");
        refused(
            c,
            key,
            "writer",
            &[],
            &format!("{what}: readers still hold"),
        );
        Expect {
            before: &before,
            gone: &gone.token,
            moved: (&last.token, moved),
            added: (hold("reader-new", f, true), added),
        }
        .check(c, key, what);
    }
}

/// A hold whose owner is its token; its deadline is checked by window.
fn hold(token: &str, fence: i64, shared: bool) -> Hold {
    Hold {
        token: token.as_bytes().to_vec(),
        owner: token.as_bytes().to_vec(),
        fence,
        shared,
        deadline_ms: 0,
    }
}
