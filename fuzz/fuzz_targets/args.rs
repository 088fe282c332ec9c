//! Arbitrary argument vectors into every command parser. None may panic; an
//! accepted request must only borrow from, and be consistent with, argv.
#![no_main]

use dlock_core::request::args::{self, Limits, MAX_WAIT_MS};
use dlock_core::ask::Mode;
use dlock_core::limits::{MAX_LIMIT, MAX_STORED_TOKEN, MAX_TTL_MS};
use dlock_core::request::set_args;
use dlock_core::resource::changes;
use libfuzzer_sys::fuzz_target;

// Bytes 0 and 1 pick the limits (token cap; TTL cap, 0 = unlimited); the
// rest is split on 0xFF into arguments, so the fuzzer controls both the
// arity and the contents.
fuzz_target!(|data: &[u8]| {
    let [cap, ttl_cap, rest @ ..] = data else {
        return;
    };
    let max_token = usize::from(*cap);
    let max_ttl = match ttl_cap {
        0 => 0,
        0xFF => MAX_TTL_MS,
        t => u64::from(*t) * 1000,
    };
    let limits = Limits { max_token, max_ttl };
    let argv: Vec<&[u8]> = rest.split(|&b| b == 0xFF).collect();

    if let Ok(a) = args::acquire(&argv, &limits) {
        assert!(argv.len() >= 4);
        assert_eq!(a.token, argv[2]);
        // Any storable token parses; max_token applies to new grants.
        assert!(!a.token.is_empty() && a.token.len() <= MAX_STORED_TOKEN);
        assert_eq!(a.max_new_token, max_token);
        let owner_len = a.owner.map_or(0, <[u8]>::len);
        assert_eq!(
            a.check_new_token().is_ok(),
            a.token.len().max(owner_len) <= max_token
        );
        // LIMIT 1 is the plain lock; a semaphore has no modes and no owner.
        assert!(a.limit.is_none_or(|n| n > 1 && n <= MAX_LIMIT));
        assert!(a.limit.is_none() || (a.mode == Mode::Exclusive && a.owner.is_none()));
        assert!(a.owner.is_none_or(|o| !o.is_empty()));
        assert_eq!(
            a.is_plain(),
            a.mode == Mode::Exclusive && a.limit.is_none() && a.owner.is_none()
        );
        assert!(a.ttl_ms > 0 && a.ttl_ms <= MAX_TTL_MS);
        assert!(max_ttl == 0 || a.ttl_ms <= max_ttl);
        assert!(a.wait_ms.is_none_or(|w| w <= MAX_WAIT_MS));
    }
    if let Ok(r) = args::release(&argv, &limits) {
        assert_eq!(argv.len(), 3);
        assert_eq!(r.token, argv[2]);
        assert!(!r.token.is_empty() && r.token.len() <= MAX_STORED_TOKEN);
    }
    if let Ok(e) = args::extend(&argv, &limits) {
        assert_eq!(argv.len(), if e.wanted { 5 } else { 4 });
        assert_eq!(e.token, argv[2]);
        assert!(e.token.len() <= MAX_STORED_TOKEN);
        assert!(e.ttl_ms > 0 && e.ttl_ms <= MAX_TTL_MS);
        assert!(max_ttl == 0 || e.ttl_ms <= max_ttl);
    }
    assert_eq!(args::info(&argv).is_ok(), argv.len() == 2);
    if let Ok(a) = args::apply(&argv) {
        // `last_fence` is optional: a fresh grant's effect leaves it out.
        assert!(argv.len() == 5 || argv.len() == 6);
        assert_eq!(a.token, argv[2]);
        assert!(!a.token.is_empty());
    }
    let _ = args::meta(&argv);
    // The set commands: members are distinct argv positions.
    if let Ok(a) = set_args::acquire(&argv, &limits) {
        assert!(a.members.indexes().end <= argv.len());
        assert!((1..=set_args::MAX_SET).contains(&a.members.count));
    }
    let _ = (set_args::release(&argv), set_args::extend(&argv, &limits));
    // The keys the server is told about are argv positions, and a command
    // that parses names exactly those.
    let keys = set_args::key_positions(&argv);
    if let Some(k) = &keys {
        assert!(k.first == 2 && k.indexes().end <= argv.len());
    }
    if let Ok(a) = set_args::acquire(&argv, &limits) {
        assert_eq!(keys.as_ref(), Some(&a.members));
    }
    // The per-hold effects: whatever they accept applies without panicking.
    let mut holds = dlock_core::resource::holds::Holds::new(1);
    if let Ok((add, mark)) = changes::parse_add(&argv) {
        assert_eq!(argv.len(), 9);
        if let changes::Change::Add { hold, limit } = &add {
            assert!(mark >= hold.fence && (1..=MAX_LIMIT).contains(limit));
        }
        add.apply(&mut holds);
    }
    for parsed in [changes::parse_move(&argv), changes::parse_drop(&argv)] {
        if let Ok(change) = parsed {
            change.apply(&mut holds);
        }
    }
    // The error text is what clients see: building it must not panic either.
    for e in [
        args::acquire(&argv, &limits).err(),
        args::release(&argv, &limits).err(),
        args::extend(&argv, &limits).err(),
        args::apply(&argv).err(),
        args::meta(&argv).err(),
        changes::parse_add(&argv).err(),
        changes::parse_move(&argv).err(),
        changes::parse_drop(&argv).err(),
    ]
    .into_iter()
    .flatten()
    {
        let _ = format!("{e} {e:?}");
    }
});
