//! Server settings and client states that put locks at risk, judged
//! without touching Redis.

/// Every lock key carries a TTL, so both `volatile-*` and `allkeys-*`
/// policies may evict a held lock: its holder still believes it holds it
/// while anyone else can acquire it. Only `noeviction` keeps locks safe.
pub fn evicts_locks(maxmemory_policy: &str) -> bool {
    !maxmemory_policy.eq_ignore_ascii_case("noeviction")
}

/// The `flags=` field of a `CLIENT LIST` line (`A`: the server closes the
/// client as soon as possible and drops every reply to it).
pub fn client_list_flags(line: &[u8]) -> Option<&[u8]> {
    line.split(|b| *b == b' ' || *b == b'\n' || *b == b'\r')
        .find_map(|field| field.strip_prefix(b"flags="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_client_list_flags() {
        let line = b"id=7 addr=127.0.0.1:5 laddr=127.0.0.1:6 fd=8 name= age=0 idle=0 flags=bA db=0 sub=0\n";
        assert_eq!(client_list_flags(line), Some(&b"bA"[..]));
        assert_eq!(client_list_flags(b"id=7 flags=N db=0"), Some(&b"N"[..]));
        assert_eq!(client_list_flags(b"id=7 db=0"), None);
        assert_eq!(client_list_flags(b""), None);
    }

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
