//! Who a caller is, as Core Hub says, remembered briefly. Strangers are cheap to refuse: the cache is
//! keyed by a keyed hash of exactly what is forwarded to Core Hub (the `Authorization` header and the
//! `gs-auth` cookie, nothing else), so no raw token is kept; refusals are remembered too (5 s); at most a
//! few identity checks run at once, and at most [`CHECKS_PER_SECOND`] start each second: beyond that a
//! caller GKO does not know yet gets 429 with `Retry-After: 1`, and Core Hub is not asked.
//!
//! Each client (one network address) may start at most [`CLIENT_CHECKS_PER_SECOND`] of those checks a
//! second, in bursts of [`CLIENT_CHECK_BURST`]: a client that floods GKO with made-up credentials gets 429
//! with `Retry-After` for its own requests and cannot use up the checks other clients need. A caller GKO
//! knows costs nothing but a cache look-up and is not rationed (the API serves over 20,000 such requests a
//! second); [`super::MAX_CONNECTIONS`] bounds what anyone holds at once.

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher, RandomState},
    sync::Mutex,
    time::{Duration, Instant},
};

use super::Caller;

/// How long a caller Core Hub knows is trusted before Core Hub is asked again.
pub const TRUSTED_FOR: Duration = Duration::from_secs(30);
/// How long a refusal is remembered.
pub const REFUSED_FOR: Duration = Duration::from_secs(5);
/// Identity checks that may start each second (a burst of as many).
pub const CHECKS_PER_SECOND: f64 = 20.0;
/// Identity checks in flight at once.
pub const CONCURRENT_CHECKS: usize = 4;
/// Identity checks one client address may start each second.
pub const CLIENT_CHECKS_PER_SECOND: f64 = 5.0;
/// Identity checks one client address may start at once after a pause (less than the global burst, so
/// one client never takes every check of a second).
pub const CLIENT_CHECK_BURST: f64 = 10.0;
/// Callers remembered at most.
const CAPACITY: usize = 10_000;

/// A token bucket: `rate` tokens a second, at most `burst` kept.
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
    rate: f64,
    burst: f64,
}

impl Bucket {
    pub fn full(rate: f64, burst: f64) -> Bucket {
        Bucket {
            tokens: burst,
            at: Instant::now(),
            rate,
            burst,
        }
    }

    /// Takes a token if there is one; otherwise how long until there is.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }

    /// Full again by `now`: nothing is lost by forgetting it.
    fn refilled(&self, now: Instant) -> bool {
        self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * self.rate >= self.burst
    }
}

/// What a caller presents: exactly what is forwarded to Core Hub. (No Debug: it holds the raw token.)
#[derive(Clone, PartialEq, Eq)]
pub struct Presented {
    pub authorization: Option<String>,
    /// The value of the `gs-auth` cookie.
    pub session: Option<String>,
}

impl Presented {
    /// The `Authorization` header and the `gs-auth` cookie of a request; `None` when it has neither.
    pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<Presented> {
        let authorization = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let session = headers
            .get_all("cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|c| c.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == "gs-auth")
            .map(|(_, v)| v.to_string());
        (authorization.is_some() || session.is_some()).then_some(Presented {
            authorization,
            session,
        })
    }

    /// The `Cookie` header forwarded to Core Hub: the session cookie alone.
    pub fn cookie(&self) -> Option<String> {
        self.session.as_ref().map(|s| format!("gs-auth={s}"))
    }
}

/// What Core Hub said of a caller.
#[derive(Clone, Debug)]
pub enum Known {
    Caller(Caller),
    Refused,
}

pub struct Identities {
    keys: RandomState,
    known: Mutex<HashMap<u64, (Known, Instant)>>,
    /// Tokens left for new identity checks, refilled at [`CHECKS_PER_SECOND`].
    checks: Mutex<Bucket>,
    /// Each client address's identity checks.
    clients: Mutex<HashMap<std::net::IpAddr, Bucket>>,
    pub in_flight: tokio::sync::Semaphore,
}

impl Default for Identities {
    fn default() -> Self {
        Identities {
            keys: RandomState::new(),
            known: Mutex::default(),
            checks: Mutex::new(Bucket::full(CHECKS_PER_SECOND, CHECKS_PER_SECOND)),
            clients: Mutex::default(),
            in_flight: tokio::sync::Semaphore::new(CONCURRENT_CHECKS),
        }
    }
}

impl Identities {
    pub fn key(&self, p: &Presented) -> u64 {
        let mut h = self.keys.build_hasher();
        h.write(p.authorization.as_deref().unwrap_or("").as_bytes());
        h.write_u8(0);
        h.write(p.session.as_deref().unwrap_or("").as_bytes());
        h.finish()
    }

    /// What is remembered of this caller, while it is fresh.
    pub fn remembered(&self, key: u64) -> Option<Known> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let (k, at) = known.get(&key)?;
        let fresh = match k {
            Known::Caller(_) => at.elapsed() < TRUSTED_FOR,
            Known::Refused => at.elapsed() < REFUSED_FOR,
        };
        fresh.then(|| k.clone())
    }

    pub fn remember(&self, key: u64, k: Known) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= CAPACITY {
            known.retain(|_, (k, at)| match k {
                Known::Caller(_) => at.elapsed() < TRUSTED_FOR,
                Known::Refused => at.elapsed() < REFUSED_FOR,
            });
            if known.len() >= CAPACITY {
                known.clear();
            }
        }
        known.insert(key, (k, Instant::now()));
    }

    /// May a new identity check start now, for a caller at `client` (when known)? Otherwise how long the
    /// caller should wait. The client's own ration is taken first, then the global one.
    pub fn take_check(&self, client: Option<std::net::IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        if let Some(addr) = client {
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            if clients.len() >= CAPACITY && !clients.contains_key(&addr) {
                clients.retain(|_, b| !b.refilled(now));
                if clients.len() >= CAPACITY {
                    clients.clear();
                }
            }
            clients
                .entry(addr)
                .or_insert_with(|| Bucket::full(CLIENT_CHECKS_PER_SECOND, CLIENT_CHECK_BURST))
                .take(now)?;
        }
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        checks.take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_authorization_header_and_the_session_cookie_count() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            "cookie",
            "theme=dark; gs-auth=abc; other=1".parse().unwrap(),
        );
        let p = Presented::from_headers(&headers).unwrap();
        assert_eq!(p.session.as_deref(), Some("abc"));
        assert_eq!(
            p.cookie().as_deref(),
            Some("gs-auth=abc"),
            "nothing else is forwarded"
        );
        let ids = Identities::default();
        let mut other = headers.clone();
        other.insert("cookie", "theme=light; gs-auth=abc".parse().unwrap());
        assert_eq!(
            ids.key(&p),
            ids.key(&Presented::from_headers(&other).unwrap())
        );
        assert!(Presented::from_headers(&axum::http::HeaderMap::new()).is_none());
    }

    #[test]
    fn checks_are_rationed() {
        let ids = Identities::default();
        let granted = (0..100).filter(|_| ids.take_check(None).is_ok()).count();
        assert!((20..=21).contains(&granted), "{granted}");
    }

    #[test]
    fn each_client_has_its_own_ration_within_the_global_one() {
        let ids = Identities::default();
        let (a, b) = ("10.0.0.1".parse().ok(), "10.0.0.2".parse().ok());
        let served = (0..100).filter(|_| ids.take_check(a).is_ok()).count();
        assert_eq!(served, CLIENT_CHECK_BURST as usize, "a burst, then 429");
        let wait = ids.take_check(a).unwrap_err();
        assert!(
            wait <= Duration::from_secs_f64(1.0 / CLIENT_CHECKS_PER_SECOND),
            "{wait:?}"
        );
        assert!(
            ids.take_check(b).is_ok(),
            "another client is served meanwhile"
        );
        // Two clients' bursts reach the global ration.
        let served = (0..100).filter(|_| ids.take_check(b).is_ok()).count();
        assert!(
            served < CLIENT_CHECK_BURST as usize,
            "{served}: the global 20 bind"
        );
        let c = "10.0.0.3".parse().ok();
        assert!(ids.take_check(c).is_err(), "the global ration is spent");
    }

    #[test]
    fn a_bucket_refills_at_its_rate() {
        let start = Instant::now();
        let mut b = Bucket::full(10.0, 2.0);
        assert!(b.take(start).is_ok() && b.take(start).is_ok());
        assert!(b.take(start).is_err());
        assert!(b.take(start + Duration::from_millis(100)).is_ok());
        assert!(b.take(start + Duration::from_millis(100)).is_err());
        assert!(
            b.take(start + Duration::from_secs(10)).is_ok(),
            "refilled, never beyond the burst"
        );
        assert!(b.take(start + Duration::from_secs(10)).is_ok());
        assert!(b.take(start + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn refusals_are_remembered_briefly() {
        let ids = Identities::default();
        ids.remember(1, Known::Refused);
        assert!(matches!(ids.remembered(1), Some(Known::Refused)));
        assert!(ids.remembered(2).is_none());
    }
}
