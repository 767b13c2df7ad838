//! Which Secrets GKO may read and where it may send Core Hub credentials. These are settings of GKO's
//! installation (flags, set by the Helm chart), never of the resource: someone who may edit a
//! GluesyncPlatform must not be able to make GKO read another Secret of the namespace, or send Core Hub
//! credentials to a URL of their choice. A spec that names another Secret or URL is reported `Stalled`
//! (`SecretNotAllowed`, `CoreHubURLNotAllowed`), and nothing is read or sent.

use std::collections::BTreeSet;

use crate::{
    api::Problem,
    api::{ComponentType, GluesyncPlatform},
    update::observed::Workload,
};

/// What this GKO may read and where it may call Core Hub.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Secret names GKO may read (Core Hub credentials, Core Hub CA).
    pub secrets: BTreeSet<String>,
    /// Core Hub URLs GKO may call besides the default (the Core Hub workload's Service in its namespace):
    /// `scheme://host:port`, where the port may be `*`. A path is allowed below an allowed origin.
    pub corehub_urls: Vec<String>,
}

/// The scheme, host and port of a URL (`None` when it is not an `http(s)://host[:port]...` URL, or
/// carries a user name or password). The port may be `*` (an allowed entry's wildcard).
fn origin(url: &str) -> Option<(String, String, String)> {
    let (url, any_port) = match url.strip_suffix(":*") {
        Some(base) => (base, true),
        None => (url, false),
    };
    let parsed = url::Url::parse(url).ok()?;
    let scheme = parsed.scheme();
    if (scheme != "http" && scheme != "https")
        || !parsed.username().is_empty()
        || parsed.password().is_some()
    {
        return None;
    }
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())?
        .to_ascii_lowercase();
    let port = if any_port {
        "*".to_string()
    } else {
        parsed.port_or_known_default()?.to_string()
    };
    Some((scheme.to_string(), host, port))
}

impl Access {
    /// Parses the comma-separated flags.
    pub fn from_lists(secrets: &str, urls: &str) -> Access {
        let split = |s: &str| {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        Access {
            secrets: split(secrets).into_iter().collect(),
            corehub_urls: split(urls),
        }
    }

    pub fn secret_allowed(&self, name: &str) -> bool {
        self.secrets.contains(name)
    }

    /// May Core Hub credentials be sent to `url`? `default` is the Core Hub workload's Service URL.
    pub fn url_allowed(&self, url: &str, default: Option<&str>) -> bool {
        let Some((scheme, host, port)) = origin(url) else {
            return false;
        };
        let same = |allowed: &str| {
            origin(allowed)
                .is_some_and(|(s, h, p)| s == scheme && h == host && (p == "*" || p == port))
        };
        default.is_some_and(same) || self.corehub_urls.iter().any(|a| same(a))
    }

    /// Why the spec of `gsp` asks for something this GKO may not do, if it does.
    pub fn problem(
        &self,
        gsp: &GluesyncPlatform,
        workloads: &[Workload],
        namespace: &str,
    ) -> Option<Problem> {
        let spec = &gsp.spec.core_hub;
        for (field, name) in [
            ("credentialsSecret", &spec.credentials_secret),
            ("caSecret", &spec.ca_secret),
        ] {
            if let Some(name) = name
                && !self.secret_allowed(name)
            {
                return Some(Problem {
                    reason: "SecretNotAllowed",
                    message: format!(
                        "spec.coreHub.{field} names Secret {name}, which this GKO may not read (it may read: {}); \
                         GKO reads nothing and calls no Core Hub until the spec or GKO's settings change",
                        self.list_secrets()
                    ),
                });
            }
        }
        if let Some(url) = &spec.url {
            let default = default_url(workloads, namespace);
            if !self.url_allowed(url, default.as_deref()) {
                return Some(Problem {
                    reason: "CoreHubURLNotAllowed",
                    message: format!(
                        "spec.coreHub.url {url} is not a Core Hub URL this GKO may send credentials to \
                         (the Core Hub workload's Service{}); GKO calls no Core Hub until the spec or GKO's \
                         settings change",
                        if self.corehub_urls.is_empty() {
                            String::new()
                        } else {
                            format!(", or {}", self.corehub_urls.join(", "))
                        }
                    ),
                });
            }
        }
        None
    }

    fn list_secrets(&self) -> String {
        if self.secrets.is_empty() {
            "none".into()
        } else {
            self.secrets.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    }
}

/// The Core Hub workload's Service in the namespace, on port 1717 over HTTPS.
pub fn default_url(workloads: &[Workload], namespace: &str) -> Option<String> {
    workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub))
        .map(|w| format!("https://{}.{namespace}.svc:1717", w.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access::from_lists(
            "corehub-credentials, corehub-ca",
            "https://corehub.example.com, http://127.0.0.1:*",
        )
    }

    #[test]
    fn only_the_listed_secrets_may_be_read() {
        let a = access();
        assert!(a.secret_allowed("corehub-credentials"));
        assert!(!a.secret_allowed("db-password"));
        assert!(!Access::default().secret_allowed("corehub-credentials"));
    }

    /// A refused Secret's message names what this GKO may read instead (or says it may read none).
    #[test]
    fn a_refused_secret_says_what_may_be_read() {
        let g = crate::update::fixtures::platform(serde_json::json!({
            "version": "2.3.2.1",
            "coreHub": {"credentialsSecret": "db-password"},
        }));
        let p = access().problem(&g, &[], "ns").expect("refused");
        assert_eq!(p.reason, "SecretNotAllowed");
        assert!(
            p.message
                .contains("(it may read: corehub-ca, corehub-credentials)"),
            "{}",
            p.message
        );
        let p = Access::default().problem(&g, &[], "ns").expect("refused");
        assert!(p.message.contains("(it may read: none)"), "{}", p.message);
    }

    #[test]
    fn urls_match_by_origin_and_the_default_is_always_allowed() {
        let a = access();
        let default = Some("https://gluesync-gluesync-core-hub.ns.svc:1717");
        assert!(a.url_allowed("https://gluesync-gluesync-core-hub.ns.svc:1717", default));
        assert!(a.url_allowed(
            "https://gluesync-gluesync-core-hub.ns.svc:1717/api",
            default
        ));
        assert!(
            !a.url_allowed("http://gluesync-gluesync-core-hub.ns.svc:1717", default),
            "another scheme"
        );
        assert!(a.url_allowed("https://corehub.example.com", default));
        assert!(a.url_allowed("https://corehub.example.com:443/x", default));
        assert!(!a.url_allowed("https://corehub.example.com:8443", default));
        assert!(!a.url_allowed("https://corehub.example.com.evil.io", default));
        assert!(!a.url_allowed("https://evil.io/?https://corehub.example.com", default));
        assert!(!a.url_allowed("https://corehub.example.com@evil.io", default));
        // Credentials in the URL itself, even to an allowed origin: refused.
        assert!(!a.url_allowed("https://user@corehub.example.com", default));
        assert!(!a.url_allowed("https://:secret@corehub.example.com", default));
        assert!(!a.url_allowed("https://user:secret@corehub.example.com", default));
        assert!(a.url_allowed("http://127.0.0.1:40123", default));
        assert!(!a.url_allowed("http://localhost:40123", default));
        assert!(!a.url_allowed("ftp://127.0.0.1:1", default));
    }
}
