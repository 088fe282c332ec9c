//! Server settings that put locks at risk, judged without touching Redis.

/// Every lock key carries a TTL, so both `volatile-*` and `allkeys-*`
/// policies may evict a held lock: its holder still believes it holds it
/// while anyone else can acquire it. Only `noeviction` keeps locks safe.
pub fn evicts_locks(maxmemory_policy: &str) -> bool {
    !maxmemory_policy.eq_ignore_ascii_case("noeviction")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_is_safe() {
        assert!(!evicts_locks("noeviction"));
        for p in [
            "volatile-lru",
            "volatile-lfu",
            "volatile-ttl",
            "volatile-random",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
        ] {
            assert!(evicts_locks(p), "{p}");
        }
    }
}
