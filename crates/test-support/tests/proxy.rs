//! The fault proxy in front of the shared control plane's API server.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use gko_test_support::{FaultProxy, TestNamespace, control_plane, eventually};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::{ListParams, WatchEvent, WatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};

async fn client_from(path: &std::path::Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn list(api: &Api<Namespace>) -> kube::Result<usize> {
    Ok(api.list(&ListParams::default()).await?.items.len())
}

#[tokio::test]
async fn forwards_goes_down_and_comes_back() -> anyhow::Result<()> {
    let cp = control_plane();
    let upstream = cp.api_server_addr()?;
    let proxy = FaultProxy::start(upstream)?;
    assert_eq!(proxy.upstream(), upstream);
    assert!(proxy.addr().ip().is_loopback());
    let path = proxy.kubeconfig(cp)?;
    let text = std::fs::read_to_string(&path)?;
    assert!(
        text.contains(&format!("https://127.0.0.1:{}", proxy.addr().port())),
        "{text}"
    );
    let api: Api<Namespace> = Api::all(client_from(&path).await?);

    // Up: requests go through the proxy.
    assert!(list(&api).await? > 0);
    assert!(proxy.accepted() >= 1);
    assert_eq!(proxy.refused(), 0);

    // Down: open connections are closed and new ones refused.
    proxy.stop();
    assert!(proxy.is_down());
    assert_eq!(proxy.open_connections(), 0);
    let accepted = proxy.accepted();
    for attempt in 0.. {
        let result = list(&api).await;
        assert!(result.is_err(), "a request through a down proxy succeeded");
        if proxy.refused() > 0 {
            break;
        }
        // The first request may only find its pooled connection closed.
        assert!(attempt < 5, "the client never tried to connect");
    }
    assert!(proxy.refused() > 0);
    assert_eq!(proxy.accepted(), accepted);

    // Up again.
    proxy.start_again();
    assert!(!proxy.is_down());
    assert!(list(&api).await? > 0);
    assert!(proxy.accepted() > accepted);

    // Another process (kubectl here, GKO in other tests) reads the proxy's kubeconfig, and the proxy runs
    // on while the test blocks.
    let kubectl = |accepted_before: u64| -> anyhow::Result<bool> {
        let out = cp
            .command("kubectl")
            .env("KUBECONFIG", &path)
            .args([
                "get",
                "namespace",
                "default",
                "-o",
                "name",
                "--request-timeout=2s",
            ])
            .output()?;
        if out.status.success() {
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "namespace/default"
            );
            assert!(proxy.accepted() > accepted_before);
        }
        Ok(out.status.success())
    };
    assert!(kubectl(proxy.accepted())?);
    proxy.stop();
    let refused = proxy.refused();
    assert!(!kubectl(proxy.accepted())?);
    assert!(proxy.refused() > refused);
    proxy.start_again();
    assert!(kubectl(proxy.accepted())?);

    // Down for a while, without blocking the test.
    let refused = proxy.refused();
    let began = Instant::now();
    proxy.down_for(Duration::from_millis(800));
    assert!(list(&api).await.is_err());
    assert!(proxy.refused() > refused || proxy.open_connections() == 0);
    eventually(
        "the proxy to come back up",
        Duration::from_secs(10),
        || async { Ok(list(&api).await.ok()) },
    )
    .await?;
    assert!(began.elapsed() >= Duration::from_millis(800));
    assert!(!proxy.is_down());

    // Slow.
    proxy.set_latency(Duration::from_millis(300));
    let began = Instant::now();
    list(&api).await?;
    assert!(began.elapsed() >= Duration::from_millis(300));
    proxy.set_latency(Duration::ZERO);

    drop(proxy);
    assert!(!path.exists(), "the proxy's kubeconfig outlived it");
    Ok(())
}

/// Starts a watch of namespaces through `api` and checks it sees a namespace being created.
async fn watch_namespaces(
    api: &Api<Namespace>,
) -> anyhow::Result<impl futures::Stream<Item = kube::Result<WatchEvent<Namespace>>> + use<>> {
    let version = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = api
        .watch(&WatchParams::default().timeout(290), &version)
        .await?
        .boxed();
    let ns = TestNamespace::new("proxy-watch").await?;
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Added(n))) if n.metadata.name.as_ref() == Some(&ns.name) => {
                    return Ok(());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => anyhow::bail!("the watch failed: {e}"),
                None => anyhow::bail!("the watch ended"),
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the watch never saw {}", ns.name))??;
    Ok(stream)
}

/// Waits for a watch to end or fail, skipping the events it still delivers.
async fn watch_cut(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<Namespace>>>,
) -> anyhow::Result<String> {
    let mut stream = std::pin::pin!(stream);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.next().await {
                None => return "ended".to_string(),
                Some(Err(e)) => return format!("failed: {e}"),
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the watch went on through the cut"))?;
    Ok(ended)
}

#[tokio::test]
async fn stopping_cuts_watches() -> anyhow::Result<()> {
    let cp = control_plane();
    let proxy = FaultProxy::in_front_of(cp)?;
    let api: Api<Namespace> = Api::all(proxy.client(cp).await?);
    let stream = watch_namespaces(&api).await?;
    assert!(proxy.open_connections() >= 1);

    proxy.stop();
    let how = watch_cut(stream).await?;
    eprintln!("watch {how}");
    assert!(api.watch(&WatchParams::default(), "0").await.is_err());

    proxy.start_again();
    let _watch = watch_namespaces(&api).await?;
    Ok(())
}

#[tokio::test]
async fn cutting_connections_ends_watches_but_keeps_serving() -> anyhow::Result<()> {
    let cp = control_plane();
    let proxy = FaultProxy::in_front_of(cp)?;
    let api: Api<Namespace> = Api::all(proxy.client(cp).await?);
    let stream = watch_namespaces(&api).await?;
    let accepted = proxy.accepted();

    proxy.cut_connections();
    assert_eq!(proxy.open_connections(), 0);
    assert!(!proxy.is_down());
    let how = watch_cut(stream).await?;
    eprintln!("watch {how}");
    eventually(
        "a request after the cut",
        Duration::from_secs(5),
        || async { Ok(list(&api).await.ok()) },
    )
    .await?;
    assert!(proxy.accepted() > accepted);
    assert_eq!(proxy.refused(), 0);
    Ok(())
}
