//! The four kinds every durability path must keep, built through every
//! per-hold effect (a hold added, a retry and an extension moving one
//! deadline, a release dropping one), and how each must still behave.
use super::value::{info_agrees, must_store};
use super::*;

/// The error a request with another `LIMIT` gets from a `LIMIT 3` resource.
pub const LIMIT3_ERR: &str =
    "ERR the resource is held with LIMIT 3: requests must ask for the same LIMIT";
pub const TOKEN_IN_USE_ERR: &str =
    "ERR token already holds this resource with another mode, LIMIT or OWNER";
pub const UPGRADE_ERR: &str =
    "ERR upgrade refused: other owners hold the resource (an upgrade never waits)";

/// Keys of the four kinds under `prefix` (a cluster hash tag works).
pub struct Kinds {
    /// Shared holds of two owners: `r1` (its own owner), `r2` (`reader-2`).
    pub shared: String,
    /// `LIMIT 3` with two permits, `p1` and `p3`.
    pub sem: String,
    /// Owner `A` with two exclusive holds, `a1` and `a2`.
    pub owner: String,
    /// Mid-downgrade: owner `D` holds `dw` exclusive and `dr` shared.
    pub down: String,
}

impl Kinds {
    pub fn keys(&self) -> Vec<String> {
        [&self.shared, &self.sem, &self.owner, &self.down]
            .map(|k| k.to_string())
            .to_vec()
    }

    /// Builds the four kinds on `c` (the master).
    pub fn build(c: &mut impl ConnectionLike, prefix: &str) -> Kinds {
        let k = Kinds {
            shared: format!("{prefix}:shared"),
            sem: format!("{prefix}:sem"),
            owner: format!("{prefix}:owner"),
            down: format!("{prefix}:down"),
        };
        let sh = ["SHARED"];
        let r1 = take(c, &k.shared, "r1", 60_000, &sh);
        let r2 = take(c, &k.shared, "r2", 70_000, &["SHARED", "OWNER", "reader-2"]);
        let r3 = take(c, &k.shared, "r3", 80_000, &sh);
        assert!(r1 < r2 && r2 < r3, "each reader its own fence");
        assert_eq!(release(c, &k.shared, "r3"), 1);
        // A retry: the same fence, the deadline moved.
        let again = take(c, &k.shared, "r2", 75_000, &["SHARED", "OWNER", "reader-2"]);
        assert_eq!(again, r2);
        assert_eq!(extend(c, &k.shared, "r1", 90_000), 1);

        let l3 = ["LIMIT", "3"];
        let p1 = take(c, &k.sem, "p1", 60_000, &l3);
        let p2 = take(c, &k.sem, "p2", 65_000, &l3);
        let p3 = take(c, &k.sem, "p3", 70_000, &l3);
        assert!(p1 < p2 && p2 < p3, "each permit its own fence");
        assert_eq!(release(c, &k.sem, "p2"), 1);
        assert_eq!(extend(c, &k.sem, "p3", 95_000), 1);

        let a = ["OWNER", "A"];
        let a1 = take(c, &k.owner, "a1", 60_000, &a);
        assert_eq!(
            take(c, &k.owner, "a2", 85_000, &a),
            a1,
            "one owner, one fence"
        );
        assert_eq!(take(c, &k.owner, "a1", 62_000, &a), a1, "a retry");

        let dw = take(c, &k.down, "dw", 60_000, &["OWNER", "D"]);
        let dr = take(c, &k.down, "dr", 80_000, &["SHARED", "OWNER", "D"]);
        assert_eq!(dr, dw, "a downgrade keeps the owner's fence");
        k
    }

    /// The kinds hold what `build` made, and each key lives exactly as
    /// long as its latest hold.
    pub fn check_built(&self, c: &mut Connection) {
        self.check_holds(c);
        for key in self.keys() {
            let s = must_store(c, &key);
            assert_eq!(
                pexpiretime(c, &key),
                s.latest_deadline(),
                "{key}: the key's TTL is its latest hold deadline"
            );
        }
    }

    /// The kinds hold what `build` made (on any server that has them).
    pub fn check_holds(&self, c: &mut Connection) {
        let shape = |c: &mut Connection, key: &str| -> Vec<(String, String, bool)> {
            let i = info_agrees(c, key);
            i.holds
                .iter()
                .map(|h| {
                    let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                    (s(&h.token), s(&h.owner), h.shared)
                })
                .collect()
        };
        let v = |t: &str, o: &str, s: bool| (t.to_string(), o.to_string(), s);
        assert_eq!(
            shape(c, &self.shared),
            [v("r1", "r1", true), v("r2", "reader-2", true)]
        );
        assert_eq!(
            shape(c, &self.sem),
            [v("p1", "p1", false), v("p3", "p3", false)]
        );
        assert_eq!(
            shape(c, &self.owner),
            [v("a1", "A", false), v("a2", "A", false)]
        );
        assert_eq!(
            shape(c, &self.down),
            [v("dw", "D", false), v("dr", "D", true)]
        );
        let info = value::list_info(c, &self.sem).unwrap();
        assert_eq!((info.kind.as_str(), info.limit), ("semaphore", 3));
        let info = value::list_info(c, &self.shared).unwrap();
        assert_eq!((info.kind.as_str(), info.limit), ("rwlock", 1));
    }

    /// Each kind still excludes and admits what it must; every hold taken
    /// here is released again, so the stored values end as they began.
    pub fn behave(&self, c: &mut Connection) {
        let before = snapshots(c, &self.keys());
        let fences: Vec<i64> = before
            .iter()
            .flat_map(|s| s.value.as_ref().unwrap().holds().to_vec())
            .map(|h| h.fence)
            .collect();
        let newest = *fences.iter().max().unwrap();

        // Readers hold: a writer is refused, another reader joins, and an
        // upgrade beside the other owner is refused at once.
        busy(c, &self.shared, "w", &[]);
        assert!(take(c, &self.shared, "rx", 10_000, &["SHARED"]) > newest);
        assert_eq!(release(c, &self.shared, "rx"), 1);
        let up = refused(c, &self.shared, "u", &["OWNER", "reader-2"]);
        assert_eq!(up, UPGRADE_ERR);
        assert_eq!(refused(c, &self.shared, "r1", &[]), TOKEN_IN_USE_ERR);

        // Two permits of three: one more, then none; the limit is kept.
        let l3 = ["LIMIT", "3"];
        take(c, &self.sem, "p4", 10_000, &l3);
        busy(c, &self.sem, "p5", &l3);
        assert_eq!(release(c, &self.sem, "p4"), 1);
        assert_eq!(refused(c, &self.sem, "p5", &["LIMIT", "2"]), LIMIT3_ERR);
        assert_eq!(refused(c, &self.sem, "p5", &[]), LIMIT3_ERR);

        // Owner A: others wait, A nests with its fence.
        busy(c, &self.owner, "b", &["OWNER", "B"]);
        busy(c, &self.owner, "b", &["SHARED", "OWNER", "B"]);
        let a1 = must_store(c, &self.owner).holds()[0].fence;
        assert_eq!(take(c, &self.owner, "a3", 10_000, &["OWNER", "A"]), a1);
        assert_eq!(release(c, &self.owner, "a3"), 1);

        // D still writes: nobody else gets in, D reads again.
        busy(c, &self.down, "w", &[]);
        busy(c, &self.down, "x", &["SHARED"]);
        let d = must_store(c, &self.down).holds()[0].fence;
        assert_eq!(
            take(c, &self.down, "dr2", 10_000, &["SHARED", "OWNER", "D"]),
            d
        );
        assert_eq!(release(c, &self.down, "dr2"), 1);

        // The same holds; the key's TTL is the latest deadline again (after
        // MIGRATE it may have been a few ms later).
        for (b, key) in before.iter().zip(self.keys()) {
            let a = snapshot(c, &key);
            assert_eq!((&a.value, &a.digest), (&b.value, &b.digest), "{key}");
            let latest = a.value.as_ref().unwrap().latest_deadline();
            assert_eq!(a.expires_at, latest, "{key}");
        }
    }
}
