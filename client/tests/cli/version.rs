//! `dlock --version`: the release and the commit it was built from.

use std::process::Command;

use crate::{dead_url, dlock, run, Dir, SEC};

/// The commit checked out now, when this is a git checkout of the project
/// and the build was not told its commit (`DLOCK_GIT_SHA`).
fn checked_out_commit() -> Option<String> {
    if std::env::var_os("DLOCK_GIT_SHA").is_some() {
        return None;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let top = std::path::PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    (top.canonicalize().ok()? == root.canonicalize().ok()?)
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .flatten()
}

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
