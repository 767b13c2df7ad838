//! The krew manifest `plugins/gluesync.yaml`, as `make plugin` fills it in: a Plugin krew installs, whose
//! binary is the one this crate builds and whose version is this crate's.

#[test]
fn the_krew_manifest_names_this_binary_and_version() {
    let template = include_str!("../../../plugins/gluesync.yaml");
    let filled = template
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
        .replace("@HOMEPAGE@", "https://example.com")
        .replace("@RELEASE_URL@", "file:///tmp/plugin")
        .replace("@ARCHIVE@", "kubectl-gluesync.tar.gz")
        .replace("@SHA256@", &"0".repeat(64));
    assert!(
        !filled.contains('@'),
        "every placeholder is filled: {filled}"
    );
    let m: serde_yaml::Value = serde_yaml::from_str(&filled).unwrap();
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "gluesync", "kubectl gluesync");
    let spec = &m["spec"];
    assert_eq!(
        spec["version"],
        format!("v{}", env!("CARGO_PKG_VERSION")).as_str()
    );
    let platform = &spec["platforms"][0];
    assert_eq!(platform["bin"], "kubectl-gluesync");
    assert_eq!(platform["selector"]["matchLabels"]["os"], "linux");
    assert_eq!(
        platform["uri"],
        "file:///tmp/plugin/kubectl-gluesync.tar.gz"
    );
    let files: Vec<&str> = platform["files"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|f| f["from"].as_str())
        .collect();
    assert_eq!(files, ["kubectl-gluesync", "LICENSE"]);
    // Every verb is in the description.
    let description = spec["description"].as_str().unwrap();
    for verb in [
        "status", "plan", "history", "events", "update", "retry", "check",
    ] {
        assert!(description.contains(&format!("`{verb}`")), "{verb}");
    }
}
