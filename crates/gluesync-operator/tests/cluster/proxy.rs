//! The catalog is reached through the HTTPS proxy of `HTTPS_PROXY`, except for hosts in `NO_PROXY`.
//! The test sets the process's environment, which every test beside it would read: it runs in a process of
//! its own, the test binary started again with this test alone.

use std::sync::{Arc, Mutex};

use gluesync_operator::catalog::CatalogClient;
use gluesync_simulator::{CatalogEntry, Options, Simulator};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A CONNECT proxy on loopback that records the targets it is asked for and tunnels to them.
async fn proxy() -> anyhow::Result<(String, Arc<Mutex<Vec<String>>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                if reader.read_line(&mut line).await.is_err() {
                    return;
                }
                // Skip the rest of the request head.
                loop {
                    let mut header = String::new();
                    match reader.read_line(&mut header).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) if header == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                let target = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                if let Ok(mut l) = log.lock() {
                    l.push(line.trim().to_string());
                }
                let mut client = reader.into_inner();
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    Ok((url, seen))
}

/// Set in the process that runs the test alone.
const ALONE: &str = "GKO_TEST_PROXY_ALONE";

#[tokio::test]
async fn the_catalog_goes_through_https_proxy_unless_no_proxy_names_it() -> anyhow::Result<()> {
    if std::env::var_os(ALONE).is_none() {
        let name = "proxy::the_catalog_goes_through_https_proxy_unless_no_proxy_names_it";
        let out = tokio::process::Command::new(std::env::current_exe()?)
            .args(["--exact", name, "--nocapture", "--test-threads", "1"])
            .env(ALONE, "1")
            .output()
            .await?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        anyhow::ensure!(
            out.status.success() && said.contains("test result: ok. 1 passed"),
            "the test alone in its process: {said}"
        );
        return Ok(());
    }
    let sim = Simulator::start(Options {
        addr: None,
        tls: true,
    })
    .await?;
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.2"));
    let host_port = sim.url.trim_start_matches("https://").to_string();
    let (proxy_url, seen) = proxy().await?;

    // SAFETY: this process runs this test alone, which sets the environment before any client reads it.
    unsafe {
        std::env::set_var("HTTPS_PROXY", &proxy_url);
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");
    }
    let client = CatalogClient::new(&sim.url)?;
    // The simulator's certificate is its own, so the TLS handshake fails; what counts is the tunnel.
    let _ = client.entry("gluesync-core-hub").await;
    let lines = seen.lock().map(|l| l.clone()).unwrap_or_default();
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("CONNECT {host_port} HTTP/1.1")),
        "the catalog was not asked through the proxy: {lines:?}"
    );

    let before = lines.len();
    unsafe {
        std::env::set_var("NO_PROXY", "127.0.0.1");
    }
    let client = CatalogClient::new(&sim.url)?;
    let _ = client.entry("gluesync-core-hub").await;
    let after = seen.lock().map(|l| l.len()).unwrap_or_default();
    assert_eq!(after, before, "a host in NO_PROXY went through the proxy");
    Ok(())
}
