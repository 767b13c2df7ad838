//! Any bytes as an HTTP request to the whole Conductor API (routing, the body limit, the `Authorization`
//! header and `gs-auth` cookie, the cross-site checks, the handlers and their body parsing): never a
//! panic, never a 500, always the JSON envelope, and 401 for every route but `/health` and
//! `/openapi.json` unless the request presents a credential Core Hub knows (400 when its `Authorization`
//! header cannot be read: repeated, or not visible ASCII).
#![no_main]

use std::sync::LazyLock;

use gluesync_operator::conductor::harness::Harness;
use libfuzzer_sys::fuzz_target;

static HARNESS: LazyLock<Harness> = LazyLock::new(Harness::new);

fuzz_target!(|data: &[u8]| {
    let Some(a) = HARNESS.answer(data) else {
        return;
    };
    let code = a.status.as_u16();
    // 502: the catalog did not answer; 503: the (absent) API server refused a write.
    assert!(
        code < 500 || code == 502 || code == 503,
        "{code} for {:?}",
        String::from_utf8_lossy(data)
    );
    let body = a.body.as_ref().unwrap_or_else(|| {
        panic!("{code} without a JSON body for {:?}", String::from_utf8_lossy(data))
    });
    assert!(
        body.get("success").is_some_and(|s| s.is_boolean()) || body.get("openapi").is_some(),
        "{code} outside the envelope: {body}"
    );
    if !a.open && !a.known {
        assert!(
            code == 401 || code == 429 || (a.malformed && code == 400),
            "{code} for a caller Core Hub does not know: {:?}",
            String::from_utf8_lossy(data)
        );
    }
    if code == 429 {
        assert!(a.retry_after.is_some(), "429 without Retry-After");
    }
});
