//! Arbitrary stored bytes into the RDB value decoders (the plain one-hold
//! layout and the multi-hold layout) and the aux data decoder: they must
//! refuse or accept without panicking, and whatever they accept must
//! round-trip.
#![no_main]

use dlock_core::resource::lease::{ENCODING_VERSION, NEWEST_READ_VERSION};
use dlock_core::Lease;
use dlock_core::{resource::layout, rules::aux};
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
    aux_round_trip(version, bytes);
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

/// The bytes as little-endian words of aux data: whatever decodes is read
/// back the same from the words this build writes for it.
fn aux_round_trip(version: i32, bytes: &[u8]) {
    let mut words = bytes
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()));
    let Ok(read) = aux::decode(version, || words.next()) else {
        return;
    };
    let written = aux::encode(&read);
    let mut again = written.iter().copied();
    let back = aux::decode(ENCODING_VERSION, || again.next()).expect("re-decode aux");
    assert_eq!(again.next(), None, "aux words left over");
    match read.quarantine {
        // Version 1 has no quarantine facts; this build writes zeros.
        None => assert_eq!(back.last_fence, read.last_fence),
        Some(_) => assert_eq!(back, read),
    }
}
