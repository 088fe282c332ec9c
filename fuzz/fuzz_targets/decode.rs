//! Arbitrary stored bytes into the RDB value decoders (the plain one-hold
//! layout and the multi-hold layout): they must refuse or accept without
//! panicking, and whatever they accept must round-trip.
#![no_main]

use dlock::lock::layout;
use dlock::lock::lease::{ENCODING_VERSION, NEWEST_READ_VERSION};
use dlock::lock::Lease;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Byte 0 picks the version: mostly a supported one (1..=newest read),
    // sometimes an unsupported one (-16..=-1, or 0 and newest+1 below).
    let Some((&v, bytes)) = data.split_first() else {
        return;
    };
    if let Ok(holds) = layout::decode(bytes) {
        assert!(layout::is_multi(bytes));
        assert!(!holds.is_empty());
        assert_eq!(
            layout::encode(&holds),
            bytes,
            "a non-canonical multi-hold value"
        );
    }
    let version = match v {
        0xF0.. => i32::from(v as i8),
        0xE0.. => i32::from(v & 1) * (NEWEST_READ_VERSION + 1),
        _ => 1 + i32::from(v) % NEWEST_READ_VERSION,
    };
    let Ok(lease) = Lease::decode(version, bytes) else {
        return;
    };
    assert!((1..=NEWEST_READ_VERSION).contains(&version));
    // encode writes the version this build registers.
    let encoded = lease.encode();
    let again = Lease::decode(ENCODING_VERSION, &encoded).expect("re-decode");
    assert_eq!(again, lease);
    assert_eq!(again.fence(), lease.fence());
    assert_eq!(again.token(), lease.token());
    assert_eq!(again.encode(), encoded);
    if version == ENCODING_VERSION {
        assert_eq!(encoded, bytes, "decode accepted a non-canonical encoding");
    }
});
