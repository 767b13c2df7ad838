//! Who a caller is, as Core Hub says, remembered briefly. Strangers are cheap to refuse: the cache is
//! keyed by a keyed hash of exactly what is forwarded to Core Hub (the `Bearer` token, or else the
//! `gs-auth` cookie), so no raw token is kept; refusals are remembered too (5 s).
//!
//! A caller GKO does not know right now is checked with Core Hub within budgets, so that a flood of
//! made-up credentials costs Core Hub at most [`CHECKS_PER_SECOND`] checks a second and never locks out
//! the callers it would otherwise serve:
//! - **verified**: the very credentials GKO verified before, whose 30 s of trust ran out:
//!   [`VERIFIED_CHECKS_PER_SECOND`], rationed by nothing else (no stranger can present them, so no flood
//!   reaches this budget);
//! - **known**: a token whose claimed subject (the JWT's `sub`, read but not trusted) Core Hub confirmed
//!   within the last day, a new login of a known user: [`KNOWN_CHECKS_PER_SECOND`], each subject at most
//!   [`SUBJECT_CHECKS_PER_SECOND`] (a forger claiming a user's name spends that user's ration of new
//!   logins, never the re-checks of sessions GKO verified);
//! - **new**: a well-formed token of a subject GKO has not seen verified: [`NEW_CHECKS_PER_SECOND`], each
//!   subject at most [`SUBJECT_CHECKS_PER_SECOND`];
//! - **other**: anything else (what a flood of random tokens is): [`OTHER_CHECKS_PER_SECOND`], each
//!   client address at most [`CLIENT_CHECKS_PER_SECOND`].
//!
//! Each budget has its own checks in flight. Beyond a budget the caller gets 429 with `Retry-After` and
//! Core Hub is not asked. A caller GKO knows right now costs a cache look-up and is not rationed (over
//! 20,000 such requests a second); [`super::MAX_REQUESTS`] bounds what anyone holds at once, and
//! [`super::CALLER_REQUESTS`] what one caller holds.

use std::{
    hash::{BuildHasher, Hasher, RandomState},
    num::NonZeroU32,
    time::{Duration, Instant},
};

use governor::{
    DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter,
    clock::{Clock, DefaultClock},
};
use moka::sync::Cache;

use super::Caller;

/// How long a caller Core Hub knows is trusted before Core Hub is asked again.
pub const TRUSTED_FOR: Duration = Duration::from_secs(30);
/// How long a refusal is remembered.
pub const REFUSED_FOR: Duration = Duration::from_secs(5);
/// How long a subject Core Hub confirmed counts as known.
pub const SUBJECT_KNOWN_FOR: Duration = Duration::from_secs(24 * 3600);
/// Identity checks a second for credentials verified before.
pub const VERIFIED_CHECKS_PER_SECOND: u32 = 4;
/// Identity checks a second for new tokens of known subjects.
pub const KNOWN_CHECKS_PER_SECOND: u32 = 4;
/// Identity checks a second for well-formed tokens of subjects not seen verified.
pub const NEW_CHECKS_PER_SECOND: u32 = 8;
/// Identity checks a second for everything else.
pub const OTHER_CHECKS_PER_SECOND: u32 = 4;
/// What Core Hub gets at most: the three budgets together.
pub const CHECKS_PER_SECOND: u32 = VERIFIED_CHECKS_PER_SECOND
    + KNOWN_CHECKS_PER_SECOND
    + NEW_CHECKS_PER_SECOND
    + OTHER_CHECKS_PER_SECOND;
// The guide's bound: a flood costs Core Hub at most 20 identity checks a second.
const _: () = assert!(CHECKS_PER_SECOND <= 20);
/// Identity checks in flight at once: for verified credentials, for known subjects, and for each of the
/// two others.
const VERIFIED_IN_FLIGHT: usize = 2;
const KNOWN_IN_FLIGHT: usize = 1;
const STRANGERS_IN_FLIGHT: usize = 1;
/// Identity checks one claimed subject may start each second (a burst of [`SUBJECT_CHECK_BURST`]).
pub const SUBJECT_CHECKS_PER_SECOND: u32 = 2;
const SUBJECT_CHECK_BURST: u32 = 4;
/// Identity checks one client address may start each second for credentials of the other budget (behind
/// an ingress every caller shares one address: callers with well-formed tokens are not held to it).
pub const CLIENT_CHECKS_PER_SECOND: u32 = 2;
/// Identity checks one client address may start at once after a pause (less than the other budget's
/// burst, so one client never takes every check of a second).
pub const CLIENT_CHECK_BURST: u32 = 3;
/// Callers (and subjects, and client addresses) remembered at most.
const CAPACITY: usize = 10_000;

/// What a caller presents: exactly what is forwarded to Core Hub. (No Debug: it holds the raw token.)
#[derive(Clone, PartialEq, Eq)]
pub struct Presented {
    pub authorization: Option<String>,
    /// The value of the `gs-auth` cookie.
    pub session: Option<String>,
}

/// An `Authorization` header GKO cannot use: refused, never dropped (a header dropped would leave the
/// session cookie to authenticate a request the cross-site rule then no longer sees as the cookie's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// Not visible ASCII, or given more than once: 400.
    Malformed,
    /// Two `gs-auth` cookies (in one `Cookie` header or in two): 400. GKO and Core Hub would not agree
    /// on which one speaks (Core Hub reads the first), so neither is taken.
    TwoSessions,
    /// Another scheme than `Bearer` (a browser adds `Basic` or `Negotiate` by itself for a proxy), or
    /// an empty token: 401.
    NotBearer,
}

impl Presented {
    /// What authenticates a request: its `Bearer` token when it has an `Authorization` header (then the
    /// cookie is not forwarded: the token alone speaks for the caller), else its `gs-auth` cookie;
    /// `Ok(None)` when it has neither.
    pub fn from_headers(headers: &axum::http::HeaderMap) -> Result<Option<Presented>, Unusable> {
        let sessions = headers
            .get_all("cookie")
            .iter()
            .flat_map(|h| h.as_bytes().split(|b| *b == b';'))
            .filter(|pair| {
                let name = pair.split(|b| *b == b'=').next().unwrap_or_default();
                name.trim_ascii() == b"gs-auth"
            })
            .count();
        if sessions > 1 {
            return Err(Unusable::TwoSessions);
        }
        let mut given = headers.get_all("authorization").iter();
        if let Some(value) = given.next() {
            if given.next().is_some() {
                return Err(Unusable::Malformed);
            }
            let value = value.to_str().map_err(|_| Unusable::Malformed)?;
            let (scheme, token) = value.trim().split_once(' ').ok_or(Unusable::NotBearer)?;
            let token = token.trim();
            if !scheme.eq_ignore_ascii_case("bearer")
                || token.is_empty()
                || token.contains(char::is_whitespace)
            {
                return Err(Unusable::NotBearer);
            }
            return Ok(Some(Presented {
                authorization: Some(format!("Bearer {token}")),
                session: None,
            }));
        }
        let session = axum_extra::extract::CookieJar::from_headers(headers)
            .get("gs-auth")
            .map(|c| c.value().to_string())
            .filter(|v| !v.is_empty());
        Ok(session.map(|session| Presented {
            authorization: None,
            session: Some(session),
        }))
    }

    /// The session cookie, not a token, speaks for the caller: the cross-site rule applies.
    pub fn by_cookie(&self) -> bool {
        self.authorization.is_none()
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

/// Which budget a check comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    Verified,
    Known,
    New,
    Other,
}

/// `rate` checks a second, as many at once after a pause.
fn quota(rate: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(rate).allow_burst(NonZeroU32::new(burst).unwrap_or(rate))
}

/// How long until a limiter that refused has a check again. The clock is made once: making one asks the
/// CPU (CPUID) whether its counter can be used, which a virtual machine answers slowly, and a flood is
/// refused tens of thousands of times a second.
fn wait(refused: governor::NotUntil<<DefaultClock as Clock>::Instant>) -> Duration {
    static CLOCK: std::sync::LazyLock<DefaultClock> =
        std::sync::LazyLock::new(DefaultClock::default);
    refused.wait_time_from(CLOCK.now())
}

/// One budget: its rate, its checks in flight.
struct Pool {
    rate: DefaultDirectRateLimiter,
    in_flight: tokio::sync::Semaphore,
}

impl Pool {
    fn new(rate: u32, in_flight: usize) -> Pool {
        Pool {
            rate: RateLimiter::direct(quota(rate, rate)),
            in_flight: tokio::sync::Semaphore::new(in_flight),
        }
    }
}

/// Rations kept per key (a client address, a claimed subject); keys whose ration is full again are
/// forgotten when the table reaches its bound.
struct Rations<K: std::hash::Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Rations<K> {
    fn new(rate: u32, burst: u32) -> Rations<K> {
        Rations {
            limiter: RateLimiter::keyed(quota(rate, burst)),
        }
    }

    fn take(&self, key: K) -> Result<(), Duration> {
        if self.limiter.len() >= CAPACITY {
            // The keys whose ration is full again go; the budgets above bound Core Hub's checks whatever
            // the table holds.
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&key).map_err(wait)
    }
}

/// How long an entry of the caller cache is kept: a refusal briefly; a caller Core Hub confirmed for a
/// day (trusted only [`TRUSTED_FOR`] of it: after that it only picks the verified budget).
struct Lifetime;

impl moka::Expiry<u64, (Known, Instant)> for Lifetime {
    fn expire_after_create(
        &self,
        _: &u64,
        value: &(Known, Instant),
        _: Instant,
    ) -> Option<Duration> {
        Some(match value.0 {
            Known::Caller(_) => SUBJECT_KNOWN_FOR,
            Known::Refused => REFUSED_FOR,
        })
    }

    fn expire_after_update(
        &self,
        key: &u64,
        value: &(Known, Instant),
        now: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        self.expire_after_create(key, value, now)
    }
}

pub struct Identities {
    keys: RandomState,
    /// What Core Hub said of each caller (by keyed hash), and when. Bounded: when full, the entries
    /// used least give way (never every entry at once).
    known: Cache<u64, (Known, Instant)>,
    /// Keyed hashes of the subjects Core Hub confirmed within the last day.
    subjects: Cache<u64, ()>,
    verified_pool: Pool,
    known_pool: Pool,
    new_pool: Pool,
    other_pool: Pool,
    /// Each claimed subject's checks.
    per_subject: Rations<u64>,
    /// Each client address's checks as a stranger.
    per_client: Rations<std::net::IpAddr>,
}

impl Default for Identities {
    fn default() -> Self {
        Identities {
            keys: RandomState::new(),
            known: Cache::builder()
                .max_capacity(CAPACITY as u64)
                .expire_after(Lifetime)
                .build(),
            subjects: Cache::builder()
                .max_capacity(CAPACITY as u64)
                .time_to_live(SUBJECT_KNOWN_FOR)
                .build(),
            verified_pool: Pool::new(VERIFIED_CHECKS_PER_SECOND, VERIFIED_IN_FLIGHT),
            known_pool: Pool::new(KNOWN_CHECKS_PER_SECOND, KNOWN_IN_FLIGHT),
            new_pool: Pool::new(NEW_CHECKS_PER_SECOND, STRANGERS_IN_FLIGHT),
            other_pool: Pool::new(OTHER_CHECKS_PER_SECOND, STRANGERS_IN_FLIGHT),
            per_subject: Rations::new(SUBJECT_CHECKS_PER_SECOND, SUBJECT_CHECK_BURST),
            per_client: Rations::new(CLIENT_CHECKS_PER_SECOND, CLIENT_CHECK_BURST),
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

    /// The keyed hash of the subject a token claims (the `sub` of a JWT's payload), when it is one.
    /// Read, never trusted: it only picks the budget of the check that verifies it.
    fn subject(&self, p: &Presented) -> Option<u64> {
        use base64::Engine;
        let token = p
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .or(p.session.as_deref())?;
        let mut parts = token.split('.');
        let (Some(_), Some(payload), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        if payload.len() > 4096 {
            return None;
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let sub = match claims.get("sub")? {
            serde_json::Value::String(s) if !s.is_empty() => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return None,
        };
        let mut h = self.keys.build_hasher();
        h.write_u8(1);
        h.write(sub.as_bytes());
        Some(h.finish())
    }

    /// What is remembered of this caller, while it is fresh.
    pub fn remembered(&self, key: u64) -> Option<Known> {
        let (k, at) = self.known.get(&key)?;
        let fresh = match k {
            Known::Caller(_) => at.elapsed() < TRUSTED_FOR,
            Known::Refused => at.elapsed() < REFUSED_FOR,
        };
        fresh.then_some(k)
    }

    pub fn remember(&self, key: u64, k: Known) {
        self.known.insert(key, (k, Instant::now()));
    }

    /// Core Hub confirmed this caller: remembered, and its subject known from now on.
    pub fn verified(&self, p: &Presented, key: u64, caller: Known) {
        if let Some(subject) = self.subject(p) {
            self.subjects.insert(subject, ());
        }
        self.remember(key, caller);
    }

    /// The budget a check of these credentials comes from, and the subject they claim.
    pub fn budget(&self, p: &Presented, key: u64) -> (Budget, Option<u64>) {
        let subject = self.subject(p);
        let verified_before = matches!(self.known.get(&key), Some((Known::Caller(_), _)));
        let subject_known = subject.is_some_and(|s| self.subjects.contains_key(&s));
        let budget = if verified_before {
            Budget::Verified
        } else if subject_known {
            Budget::Known
        } else if subject.is_some() {
            Budget::New
        } else {
            Budget::Other
        };
        (budget, subject)
    }

    /// May a check of these credentials start now, for a caller at `client` (when known)? A slot of its
    /// budget's checks in flight while it runs; otherwise how long the caller should wait.
    pub fn take_check(
        &self,
        p: &Presented,
        key: u64,
        client: Option<std::net::IpAddr>,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, Duration> {
        let (budget, subject) = self.budget(p, key);
        let pool = match budget {
            Budget::Verified => &self.verified_pool,
            Budget::Known => &self.known_pool,
            Budget::New => &self.new_pool,
            Budget::Other => &self.other_pool,
        };
        let slot = pool
            .in_flight
            .try_acquire()
            .map_err(|_| Duration::from_secs(1))?;
        if budget != Budget::Verified
            && let Some(subject) = subject
        {
            self.per_subject.take(subject)?;
        }
        if budget == Budget::Other
            && let Some(addr) = client
        {
            self.per_client.take(addr)?;
        }
        pool.rate.check().map_err(wait)?;
        Ok(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                axum::http::HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    /// A token shaped as Core Hub's (a JWT) claiming `sub`; its signature is not GKO's to check.
    fn jwt(sub: &str) -> Presented {
        use base64::Engine;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let token = format!(
            "{}.{}.c2ln",
            b64(serde_json::json!({"alg": "HS256"})),
            b64(serde_json::json!({"sub": sub, "iss": "MOLO17", "jti": "1"}))
        );
        Presented {
            authorization: Some(format!("Bearer {token}")),
            session: None,
        }
    }

    /// What Core Hub said of a verified caller.
    fn caller(username: &str, role: &str) -> Known {
        Known::Caller(super::super::Caller {
            username: username.into(),
            role: role.into(),
        })
    }

    fn random(i: usize) -> Presented {
        Presented {
            authorization: Some(format!("Bearer made-up-{i}")),
            session: None,
        }
    }

    #[test]
    fn only_the_authorization_header_and_the_session_cookie_count() {
        let with_cookie = headers(&[("cookie", b"theme=dark; gs-auth=abc; other=1")]);
        let p = Presented::from_headers(&with_cookie).unwrap().unwrap();
        assert_eq!(p.session.as_deref(), Some("abc"));
        assert!(p.by_cookie());
        assert_eq!(
            p.cookie().as_deref(),
            Some("gs-auth=abc"),
            "nothing else is forwarded"
        );
        let ids = Identities::default();
        let other = headers(&[("cookie", b"theme=light; gs-auth=abc")]);
        assert_eq!(
            ids.key(&p),
            ids.key(&Presented::from_headers(&other).unwrap().unwrap())
        );
        assert!(
            Presented::from_headers(&axum::http::HeaderMap::new())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_bearer_token_speaks_alone_and_any_other_authorization_is_refused() {
        let both = headers(&[("authorization", b"Bearer tok"), ("cookie", b"gs-auth=abc")]);
        let p = Presented::from_headers(&both).unwrap().unwrap();
        assert_eq!(p.authorization.as_deref(), Some("Bearer tok"));
        assert_eq!(
            p.session, None,
            "the cookie is not forwarded beside a token"
        );
        assert!(!p.by_cookie());
        let lower = headers(&[("authorization", b"bearer  tok ")]);
        assert_eq!(
            Presented::from_headers(&lower)
                .unwrap()
                .unwrap()
                .authorization
                .as_deref(),
            Some("Bearer tok")
        );
        // What a browser adds by itself for a proxy, an empty value, non-ASCII bytes, two headers:
        // refused, never dropped (the cookie beside them would otherwise authenticate).
        for (value, why) in [
            (&b"Basic dXNlcjpwYXNz"[..], Unusable::NotBearer),
            (
                b"Negotiate YIIBhgYGKwYBBQUCoIIBejCCAXagMDAu",
                Unusable::NotBearer,
            ),
            (b"", Unusable::NotBearer),
            (b"Bearer", Unusable::NotBearer),
            (b"Bearer a b", Unusable::NotBearer),
            (b"Bearer \xe9t\xe9", Unusable::Malformed),
        ] {
            let h = headers(&[("authorization", value), ("cookie", b"gs-auth=abc")]);
            assert_eq!(Presented::from_headers(&h).err(), Some(why), "{value:?}");
        }
        let twice = headers(&[
            ("authorization", b"Bearer a"),
            ("authorization", b"Bearer b"),
        ]);
        assert_eq!(
            Presented::from_headers(&twice).err(),
            Some(Unusable::Malformed)
        );
    }

    #[test]
    fn two_session_cookies_are_refused_in_one_header_or_two() {
        for h in [
            headers(&[("cookie", b"gs-auth=viewer; gs-auth=manager")]),
            headers(&[
                ("cookie", b"gs-auth=viewer"),
                ("cookie", b"theme=dark;gs-auth=manager"),
            ]),
            headers(&[("cookie", b"gs-auth=a; gs-auth=a")]),
            headers(&[
                ("authorization", b"Bearer tok"),
                ("cookie", b"gs-auth=a; gs-auth=b"),
            ]),
        ] {
            assert_eq!(
                Presented::from_headers(&h).err(),
                Some(Unusable::TwoSessions)
            );
        }
        // Another cookie whose name ends the same is not a second session.
        let one = headers(&[("cookie", b"old-gs-auth=x; gs-auth=a")]);
        assert_eq!(
            Presented::from_headers(&one)
                .unwrap()
                .and_then(|p| p.session)
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn made_up_tokens_spend_their_own_budget() {
        let ids = Identities::default();
        let granted = (0..100)
            .filter(|i| {
                let p = random(*i);
                ids.take_check(&p, ids.key(&p), None).is_ok()
            })
            .count();
        assert_eq!(
            granted, OTHER_CHECKS_PER_SECOND as usize,
            "a burst, then 429"
        );
        // A new well-formed token is still checked, and so is a caller verified before.
        let manager = jwt("manager");
        let (budget, _) = ids.budget(&manager, ids.key(&manager));
        assert_eq!(budget, Budget::New);
        assert!(ids.take_check(&manager, ids.key(&manager), None).is_ok());
        ids.verified(&manager, ids.key(&manager), caller("manager", "MANAGER"));
        // A later login of the same subject (another token) comes from the known budget.
        let relogin = jwt("manager");
        let mut relogin = relogin;
        relogin.authorization = relogin.authorization.map(|a| format!("{a}x"));
        assert_eq!(ids.budget(&relogin, ids.key(&relogin)).0, Budget::Known);
        // Well-formed tokens of made-up subjects spend the new budget, not the known one.
        let spent = (0..100)
            .filter(|i| {
                let p = jwt(&format!("stranger-{i}"));
                ids.take_check(&p, ids.key(&p), None).is_ok()
            })
            .count();
        assert!(spent < NEW_CHECKS_PER_SECOND as usize, "{spent}");
        assert!(ids.take_check(&relogin, ids.key(&relogin), None).is_ok());
        // Whatever comes, Core Hub gets at most the three budgets together in a burst.
        let mut total = granted + 1 + spent + 1;
        total += (0..100)
            .filter(|i| {
                let p = jwt(&format!("known-{i}"));
                ids.verified(&p, 0, Known::Refused);
                ids.take_check(&p, ids.key(&p), None).is_ok()
            })
            .count();
        assert!(total <= CHECKS_PER_SECOND as usize, "{total}");
    }

    #[test]
    fn forged_tokens_of_a_known_name_never_block_the_sessions_gko_verified() {
        let ids = Identities::default();
        let admin = jwt("admin");
        ids.verified(&admin, ids.key(&admin), caller("admin", "SUPER_ADMIN"));
        // Forgers claim the admin's name with made-up tokens: they get that name's ration, no more.
        let forged = (0..100)
            .filter(|i| {
                let mut p = jwt("admin");
                p.authorization = p.authorization.map(|a| format!("{a}{i}"));
                ids.take_check(&p, ids.key(&p), None).is_ok()
            })
            .count();
        assert!(forged <= SUBJECT_CHECK_BURST as usize, "{forged}");
        // The admin's own session, once its trust ran out, is checked from a budget of its own.
        assert_eq!(ids.budget(&admin, ids.key(&admin)).0, Budget::Verified);
        assert!(ids.take_check(&admin, ids.key(&admin), None).is_ok());
    }

    #[test]
    fn each_client_has_its_own_ration_within_a_budget() {
        let ids = Identities::default();
        let (a, b) = ("10.0.0.1".parse().ok(), "10.0.0.2".parse().ok());
        let served = (0..100)
            .filter(|i| {
                let p = random(*i);
                ids.take_check(&p, ids.key(&p), a).is_ok()
            })
            .count();
        assert_eq!(served, CLIENT_CHECK_BURST as usize, "a burst, then 429");
        let p = random(1000);
        let wait = ids.take_check(&p, ids.key(&p), a).unwrap_err();
        assert!(
            wait <= Duration::from_secs_f64(1.0 / f64::from(CLIENT_CHECKS_PER_SECOND)),
            "{wait:?}"
        );
        assert!(
            ids.take_check(&p, ids.key(&p), b).is_ok(),
            "another client is served meanwhile"
        );
        // A known caller is never held to a client's ration.
        let known = random(2000);
        ids.remember(ids.key(&known), Known::Refused);
        ids.remember(ids.key(&known), caller("admin", "SUPER_ADMIN"));
        assert_eq!(ids.budget(&known, ids.key(&known)).0, Budget::Verified);
        assert!(ids.take_check(&known, ids.key(&known), a).is_ok());
    }

    #[test]
    fn a_full_cache_keeps_the_callers_it_serves() {
        let ids = Identities::default();
        let manager = jwt("manager");
        let key = ids.key(&manager);
        ids.verified(&manager, key, caller("manager", "MANAGER"));
        // The manager is served all along while a flood of made-up tokens is refused and remembered.
        for i in 0..3 * CAPACITY {
            let stranger = random(10_000 + i);
            ids.remember(ids.key(&stranger), Known::Refused);
            if i % 100 == 0 {
                assert!(
                    matches!(ids.remembered(key), Some(Known::Caller(_))),
                    "after {i}"
                );
            }
        }
        ids.known.run_pending_tasks();
        assert!(ids.known.entry_count() <= CAPACITY as u64);
        assert!(matches!(ids.remembered(key), Some(Known::Caller(_))));
    }

    #[test]
    fn refusals_are_remembered_briefly() {
        let ids = Identities::default();
        ids.remember(1, Known::Refused);
        assert!(matches!(ids.remembered(1), Some(Known::Refused)));
        assert!(ids.remembered(2).is_none());
    }
}
