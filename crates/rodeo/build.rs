//! Build script: records the git commit the binary was built from (`rodeo info`), or
//! "unknown" outside a git checkout.

use std::path::Path;
use std::process::Command;

fn main() {
    let git_dir = Path::new("../../.git");
    // Rebuild when the checked-out commit changes: HEAD, and the branch it names.
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=../../.git/{r}");
        }
    }
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=RODEO_GIT_COMMIT={commit}");
}
