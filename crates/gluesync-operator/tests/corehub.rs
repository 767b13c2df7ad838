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
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
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
