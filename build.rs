// Stamps the build with the git commit it is built from, as the
// compile-time variable `DLOCK_GIT_SHA` (12 hex digits; `INFO dlock` and
// `dlock --version` report it). Built outside a git checkout of this
// project (a source tarball, a `git archive` such as a baseline build under
// target/), it is "unknown", unless DLOCK_GIT_SHA is set in the
// environment, which wins. The client's build script is this file too.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// The commit, if `manifest` is the root of this project's checkout or a
/// crate folder right under it; a checkout around an unpacked copy (a
/// baseline build in target/) is some other commit.
fn commit(manifest: &Path) -> Option<(String, Vec<PathBuf>)> {
    let top = PathBuf::from(git(manifest, &["rev-parse", "--show-toplevel"])?);
    let top = top.canonicalize().ok()?;
    let here = manifest.canonicalize().ok()?;
    if top != here && Some(top.as_path()) != here.parent() {
        return None;
    }
    let sha = git(manifest, &["rev-parse", "--short=12", "HEAD"])?;
    // What moves HEAD: the HEAD file (a worktree has its own), and the
    // branch it names, loose in the common folder or in packed-refs.
    let git_dir = PathBuf::from(git(manifest, &["rev-parse", "--absolute-git-dir"])?);
    let common = git(manifest, &["rev-parse", "--git-common-dir"]).map(|c| manifest.join(c))?;
    let mut watch = vec![git_dir.join("HEAD")];
    if let Some(branch) = git(manifest, &["symbolic-ref", "-q", "HEAD"]) {
        let loose = common.join(&branch);
        if loose.exists() {
            watch.push(loose);
        } else {
            // Packed (`git gc`): a commit writes it loose again, changing
            // neither HEAD nor packed-refs, only the folder it goes in
            // (cargo watches a folder's contents).
            watch.push(common.join("packed-refs"));
            watch.extend(
                loose
                    .ancestors()
                    .skip(1)
                    .find(|d| d.is_dir())
                    .map(PathBuf::from),
            );
        }
    }
    Some((sha, watch))
}

fn main() {
    println!("cargo:rerun-if-env-changed=DLOCK_GIT_SHA");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let sha = match std::env::var("DLOCK_GIT_SHA") {
        Ok(sha) if !sha.is_empty() => sha,
        _ => match commit(&manifest) {
            Some((sha, watch)) => {
                for path in watch.iter().filter(|p| p.exists()) {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
                sha
            }
            None => "unknown".to_string(),
        },
    };
    println!("cargo:rustc-env=DLOCK_GIT_SHA={sha}");
}
