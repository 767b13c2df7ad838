//! The engine does no I/O, and Cargo keeps it so: among everything it builds on there is no HTTP stack,
//! no async runtime and no Kubernetes client. Read from `cargo tree`, as a build of the engine alone
//! resolves it (the operator's kube, with its client, is not unified into it).

use std::process::Command;

/// The crates that would let the engine reach the network, a runtime or the API server.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "mio",
    "hyper",
    "hyper-util",
    "h2",
    "axum",
    "tower",
    "reqwest",
    "rustls",
    "kube-client",
    "kube-runtime",
];

#[test]
fn the_engine_depends_on_no_io() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "gluesync-engine",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-f",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).expect("UTF-8");
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The tree is the engine's: it starts there and holds what the types are made of.
    assert_eq!(names.first(), Some(&"gluesync-engine"), "{tree}");
    for needed in ["kube-core", "k8s-openapi", "serde_json", "jiff"] {
        assert!(names.contains(&needed), "{needed} not in {tree}");
    }
    let found: Vec<&&str> = FORBIDDEN.iter().filter(|f| names.contains(f)).collect();
    assert!(found.is_empty(), "the engine builds on {found:?}:\n{tree}");
}
