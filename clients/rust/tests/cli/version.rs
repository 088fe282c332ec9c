//! `dlock --version`: the release and the commit it was built from.

use crate::cli::{dead_url, dlock, run, Dir, SEC};
use crate::common::server::checked_out_commit;

#[test]
fn version_prints_the_release_and_the_commit() {
    let dir = Dir::new();
    let (code, out, err) = run(dlock(&dead_url()).args(["--version"]), &dir, 20 * SEC);
    assert_eq!(code, 0, "{err}");
    let sha = checked_out_commit().unwrap_or_else(|| env!("DLOCK_GIT_SHA").to_string());
    assert_eq!(
        out.trim_end(),
        format!("dlock {} ({sha})", dlock_client::VERSION)
    );
    assert_eq!(dlock_client::VERSION, env!("CARGO_PKG_VERSION"));
    let (code, out, err) = run(dlock(&dead_url()).args(["--help"]), &dir, 20 * SEC);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("dlock --version"),
        "dlock --help lacks --version"
    );
}
