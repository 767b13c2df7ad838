//! Who a caller is, as Core Hub says, remembered briefly. Strangers are cheap to refuse: the cache is
//! keyed by a keyed hash of exactly what is forwarded to Core Hub (the `Authorization` header and the
//! `gs-auth` cookie, nothing else), so no raw token is kept; refusals are remembered too (5 s); at most a
//! few identity checks run at once, and at most [`CHECKS_PER_SECOND`] start each second: beyond that a
//! caller GKO does not know yet gets 429 with `Retry-After: 1`, and Core Hub is not asked.

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
/// Callers remembered at most.
const CAPACITY: usize = 10_000;

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
    bucket: Mutex<(f64, Instant)>,
    pub in_flight: tokio::sync::Semaphore,
}

impl Default for Identities {
    fn default() -> Self {
        Identities {
            keys: RandomState::new(),
            known: Mutex::default(),
            bucket: Mutex::new((CHECKS_PER_SECOND, Instant::now())),
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

    /// May a new identity check start now?
    pub fn take_check(&self) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = *bucket;
        let refilled =
            (tokens + at.elapsed().as_secs_f64() * CHECKS_PER_SECOND).min(CHECKS_PER_SECOND);
        if refilled >= 1.0 {
            *bucket = (refilled - 1.0, Instant::now());
            true
        } else {
            *bucket = (refilled, Instant::now());
            false
        }
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
        let granted = (0..100).filter(|_| ids.take_check()).count();
        assert!((20..=21).contains(&granted), "{granted}");
    }

    #[test]
    fn refusals_are_remembered_briefly() {
        let ids = Identities::default();
        ids.remember(1, Known::Refused);
        assert!(matches!(ids.remembered(1), Some(Known::Refused)));
        assert!(ids.remembered(2).is_none());
    }
}
