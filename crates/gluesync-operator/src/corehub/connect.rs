//! A Core Hub client for a [`Target`]: the credentials and CA its Secrets hold now, read only when this
//! GKO may read them. The background worker and the Conductor API (which forwards a caller's token to
//! Core Hub) both connect here.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

use super::{CoreHub, Credentials, Retry, Tls};
use crate::update::{access::Access, corehub::Target};

/// The data of Secret `name`, trimmed, when this GKO may read it.
async fn secret(
    client: &kube::Client,
    namespace: &str,
    access: &Access,
    name: &str,
) -> Result<BTreeMap<String, String>, String> {
    let secret = crate::cluster::view::secret(client, namespace, access, name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("reading Secret {name}: it does not exist"))?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, ByteString(v))| (k, String::from_utf8_lossy(&v).trim().to_string()))
        .collect())
}

/// A Core Hub client for `target`, with the credentials and CA its Secrets (in `namespace`) hold now,
/// naming this GKO process (`instance`) in its requests.
pub async fn connect(
    client: &kube::Client,
    namespace: &str,
    instance: Option<&str>,
    access: &Access,
    target: &Target,
) -> Result<CoreHub, String> {
    // The engine never hands over a target naming another Secret; this refuses it again.
    for name in target
        .credentials_secret
        .iter()
        .chain(target.ca_secret.iter())
    {
        if !access.secret_allowed(name) {
            return Err(format!("Secret {name} is not one this GKO may read"));
        }
    }
    let credentials = match &target.credentials_secret {
        None => Credentials::None,
        Some(name) => {
            let data = secret(client, namespace, access, name).await?;
            match (
                data.get("token"),
                data.get("username"),
                data.get("password"),
            ) {
                (Some(t), _, _) => Credentials::Token(t.clone()),
                (None, Some(u), Some(p)) => Credentials::Password {
                    username: u.clone(),
                    password: p.clone(),
                },
                _ => {
                    return Err(format!(
                        "Secret {name} has neither token nor username and password"
                    ));
                }
            }
        }
    };
    let ca_pem = match &target.ca_secret {
        None => None,
        Some(name) => Some(
            secret(client, namespace, access, name)
                .await?
                .get("ca.crt")
                .cloned()
                .ok_or(format!("Secret {name} has no ca.crt"))?,
        ),
    };
    let tls = Tls {
        ca_pem,
        insecure_skip_verify: target.insecure_skip_verify,
    };
    CoreHub::new_as(&target.url, credentials, &tls, Retry::default(), instance)
        .map_err(|e| e.to_string())
}
