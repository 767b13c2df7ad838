//! The background catalog check of one GluesyncPlatform: each new [`Check`] token is answered once, and
//! the answer is left for the engine to take in. A catalog that hangs delays only this task.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::background::{Input, lock};
use crate::update::catalog::{Answer, Check};

/// Runs until the controller drops the work's sender.
pub async fn run(mut input: Input<Check, Option<Answer>>) {
    let mut answered: Option<String> = None;
    loop {
        let want = input.want.borrow_and_update().clone();
        match want {
            Some(check) if answered.as_ref() != Some(&check.token) => {
                let at = Time(jiff::Timestamp::now());
                let fetch = super::latest(&check.base, check.channel, &check.images);
                tokio::pin!(fetch);
                // A new check (another channel, a check-now) replaces one still waiting on the catalog.
                let result = loop {
                    tokio::select! {
                        r = &mut fetch => break Some(r),
                        changed = input.want.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            if input.want.borrow().as_ref().map(|c| &c.token) != Some(&check.token) {
                                break None;
                            }
                        }
                    }
                };
                let Some(result) = result else {
                    continue;
                };
                *lock(&input.report) = Some(Answer {
                    token: check.token.clone(),
                    at,
                    result,
                });
                answered = Some(check.token);
                input.wake.wake();
            }
            _ => {
                if input.want.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}
