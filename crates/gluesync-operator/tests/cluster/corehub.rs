//! The Core Hub client against the simulator: TLS, credentials, retries, re-login.

use std::time::Duration;

use gluesync_operator::corehub::{CoreHub, Credentials, Error, Retry, Tls};
use gluesync_simulator::{Options, Simulator};

fn admin() -> Credentials {
    Credentials::Password {
        username: "admin".into(),
        password: "admin".into(),
    }
}

fn quick() -> Retry {
    Retry {
        timeout: Duration::from_secs(2),
        attempts: 4,
        first_backoff: Duration::from_millis(20),
    }
}

#[tokio::test]
async fn https_with_the_right_ca_or_skip_verify_and_nothing_else() -> anyhow::Result<()> {
    let sim = Simulator::start(Options {
        addr: None,
        tls: true,
    })
    .await?;
    sim.add_pipelines("p", 3);
    assert!(sim.url.starts_with("https://"));

    let with_ca = Tls {
        ca_pem: sim.cert_pem.clone(),
        insecure_skip_verify: false,
    };
    let client = CoreHub::new(&sim.url, admin(), &with_ca, quick())?;
    assert_eq!(client.pipelines().await?.len(), 3);

    let skip = Tls {
        ca_pem: None,
        insecure_skip_verify: true,
    };
    let client = CoreHub::new(&sim.url, admin(), &skip, quick())?;
    assert_eq!(client.pipelines().await?.len(), 3);

    let client = CoreHub::new(&sim.url, admin(), &Tls::default(), quick())?;
    let err = client
        .pipelines()
        .await
        .expect_err("an unknown certificate was accepted");
    assert!(matches!(err, Error::Untrusted { .. }), "{err}");
    assert!(err.to_string().contains("spec.coreHub.caSecret"), "{err}");
    Ok(())
}

#[tokio::test]
async fn five_hundreds_are_retried_and_a_401_logs_in_again() -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 2);
    let client = CoreHub::new(&sim.url, admin(), &Tls::default(), quick())?;
    client.set_maintenance("p00000", true).await?;
    assert_eq!(sim.in_maintenance(), ["p00000"]);

    sim.update_faults(|f| f.error_count = 3);
    assert_eq!(
        client.pipelines().await?.len(),
        2,
        "three 500s, then an answer"
    );
    assert_eq!(sim.faults().error_count, 0);

    let logins = sim.calls().logins;
    sim.revoke_tokens();
    assert_eq!(client.pipelines().await?.len(), 2);
    assert_eq!(
        sim.calls().logins,
        logins + 1,
        "logged in again after the 401"
    );

    sim.update_faults(|f| f.error_count = 10);
    let err = client.pipelines().await.expect_err("ten 500s went through");
    assert!(matches!(err, Error::Status { status: 500, .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn wrong_credentials_and_a_core_hub_that_is_down_say_so() -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    let wrong = Credentials::Password {
        username: "admin".into(),
        password: "nope".into(),
    };
    let client = CoreHub::new(&sim.url, wrong, &Tls::default(), quick())?;
    let err = client
        .pipelines()
        .await
        .expect_err("a wrong password was accepted");
    assert!(matches!(err, Error::Unauthorized(_)), "{err}");
    assert!(err.to_string().contains("login as admin"), "{err}");

    let client = CoreHub::new(&sim.url, admin(), &Tls::default(), quick())?;
    sim.update_faults(|f| f.down = true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = client
        .pipelines()
        .await
        .expect_err("a Core Hub that is down answered");
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    sim.update_faults(|f| f.down = false);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(client.pipelines().await.is_ok(), "Core Hub is back");
    Ok(())
}

#[tokio::test]
async fn a_core_hub_that_hangs_times_out() -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.update_faults(|f| f.hang = true);
    let retry = Retry {
        timeout: Duration::from_millis(300),
        attempts: 2,
        first_backoff: Duration::from_millis(10),
    };
    let client = CoreHub::new(&sim.url, admin(), &Tls::default(), retry)?;
    let started = std::time::Instant::now();
    let err = client
        .pipelines()
        .await
        .expect_err("a hanging Core Hub answered");
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the call did not time out"
    );
    Ok(())
}

#[tokio::test]
async fn health_readiness_and_metrics_are_served() -> anyhow::Result<()> {
    use std::sync::{Arc, atomic::Ordering};
    let metrics = Arc::new(gluesync_operator::metrics::Metrics::default());
    let addr = gko_test_support::free_addr()?;
    let server = tokio::spawn(gluesync_operator::metrics::serve(
        addr,
        metrics.clone(),
        std::future::pending(),
    ));
    let get = |path: &'static str| async move {
        for _ in 0..50 {
            if let Ok(r) = reqwest::get(format!("http://{addr}{path}")).await {
                return Ok((r.status().as_u16(), r.text().await?));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::bail!("no answer on {path}")
    };
    assert_eq!(get("/healthz").await?.0, 200);
    assert_eq!(
        get("/readyz").await?.0,
        503,
        "not ready before the caches are filled"
    );
    metrics.ready.store(true, Ordering::Relaxed);
    assert_eq!(get("/readyz").await?.0, 200);
    metrics.status_writes.inc();
    let (code, text) = get("/metrics").await?;
    assert_eq!(code, 200);
    assert!(
        text.contains("gluesync_operator_status_writes_total 1"),
        "{text}"
    );
    server.abort();
    Ok(())
}
