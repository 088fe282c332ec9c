//! Which build this is: the release (the crate's semantic version) and the
//! git commit it was built from (`build.rs`). `MODULE LIST` shows the
//! release as one number, `INFO dlock` both as text.

/// The release, e.g. `0.4.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit, 12 hex digits, or `unknown` outside a git checkout.
pub const GIT_SHA: &str = env!("DLOCK_GIT_SHA");

/// The release as modules report it to the server (`MODULE LIST`'s `ver`):
/// major * 10000 + minor * 100 + patch, so 0.4.0 is 400 and 1.2.3 is 10203.
pub const MODULE_VERSION: i32 = encode(
    number(env!("CARGO_PKG_VERSION_MAJOR")),
    number(env!("CARGO_PKG_VERSION_MINOR")),
    number(env!("CARGO_PKG_VERSION_PATCH")),
);

/// Fails the build (a const panic) rather than encode a minor or patch
/// number that would run into the next place.
const fn encode(major: u32, minor: u32, patch: u32) -> i32 {
    assert!(minor < 100 && patch < 100 && major < 200_000);
    (major * 10_000 + minor * 100 + patch) as i32
}

/// A decimal number at compile time (the version's parts are digits).
const fn number(digits: &str) -> u32 {
    let mut rest = digits.as_bytes();
    assert!(!rest.is_empty());
    let mut value = 0u32;
    while let [b, tail @ ..] = rest {
        assert!(b.is_ascii_digit());
        value = value * 10 + (*b - b'0') as u32;
        rest = tail;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_version_encodes_the_crate_version() {
        assert_eq!(encode(0, 4, 0), 400);
        assert_eq!(encode(1, 2, 3), 10203);
        assert_eq!(number("17"), 17);
        let parts: Vec<i32> = VERSION.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(
            MODULE_VERSION,
            parts[0] * 10_000 + parts[1] * 100 + parts[2]
        );
    }
}
