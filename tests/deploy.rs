//! The deployment files (issue 28): the Kubernetes manifest passes Kubernetes' own schema
//! (kubernetes-validate, installed by scripts/setup.sh from a hash-pinned lock file), and every
//! `MEMPROXY_*` variable the manifest and the Dockerfile set is one the binary reads.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn validate(file: &Path) -> (bool, String) {
    let bin = deps().join("venv/bin/kubernetes-validate");
    assert!(
        bin.exists(),
        "kubernetes-validate is missing: run scripts/setup.sh (it installs deploy/k8s/requirements-validate.lock)"
    );
    let out = Command::new(bin)
        .arg("--strict")
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_kubernetes_manifest_passes_schema_validation() {
    let manifest = root().join("deploy/k8s/agent-with-memproxy.yaml");
    let (ok, out) = validate(&manifest);
    assert!(ok, "{out}");
    assert!(out.contains("passed"), "{out}");
    // The validator does reject what Kubernetes would: a field no Pod has.
    let text = std::fs::read_to_string(&manifest).unwrap();
    let bad = text.replacen("  containers:\n", "  containerz: []\n  containers:\n", 1);
    assert_ne!(bad, text);
    let tmp = std::env::temp_dir().join(format!("memproxy-bad-{}.yaml", std::process::id()));
    std::fs::write(&tmp, bad).unwrap();
    let (ok, out) = validate(&tmp);
    let _ = std::fs::remove_file(&tmp);
    assert!(!ok, "a bogus field must fail: {out}");
}

#[test]
fn every_memproxy_variable_the_deployment_sets_is_read_by_the_binary() {
    let help = Command::new(env!("CARGO_BIN_EXE_memproxy"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let mut seen = 0;
    for file in ["deploy/k8s/agent-with-memproxy.yaml", "deploy/Dockerfile"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("MEMPROXY_") {
                seen += 1;
                assert!(
                    help.contains(&format!("env: {word}=")),
                    "{file} sets {word}, which `memproxy --help` does not list"
                );
            }
        }
    }
    assert!(seen >= 5, "the files set memproxy's variables ({seen})");
}
