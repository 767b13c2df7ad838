//! What the plugin's cluster tests share: running `kubectl gluesync` in a test's namespace.

use std::process::{Command, Output};

use gko_test_support::TestNamespace;

/// Runs the plugin in the test's namespace, with the control plane's kubeconfig.
pub fn plugin(ns: &TestNamespace, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-gluesync"))
        .args(["-n", &ns.name])
        .args(args)
        .env("KUBECONFIG", &ns.cp.kubeconfig)
        .output()
        .expect("the plugin runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
