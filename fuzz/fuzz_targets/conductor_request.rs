//! Any bytes as the body of `POST /containers`: the parser answers an action or a 4xx, and never panics.
#![no_main]

use gluesync_operator::conductor::{ContainersAction, parse_containers_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_containers_request(data) {
        Ok(ContainersAction::Update { ids, .. }) => {
            assert!(ids.len() <= 256 && ids.iter().all(|id| !id.is_empty() && id.len() <= 253));
        }
        Ok(ContainersAction::Refused(action)) => assert_ne!(action, "update"),
        Err((status, error, _)) => {
            assert!(status.is_client_error(), "{status} for a request body");
            assert!(!error.is_empty());
        }
    }
});
