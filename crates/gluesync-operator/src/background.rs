//! Slow work outside the reconcile: Core Hub calls and catalog checks run as background tasks, one per
//! GluesyncPlatform and kind of work. The reconcile says what it wants (a value, compared with the last
//! one, so wanting the same thing twice does nothing); the task does it and leaves a report that the next
//! reconcile reads back as an observation; then it wakes the controller for that platform. Nothing in the
//! reconcile waits on the network.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use futures::channel::mpsc::UnboundedSender;
use kube::{ResourceExt, runtime::reflector::ObjectRef};
use tokio::{sync::watch, task::JoinHandle};

use crate::api::GluesyncPlatform;

/// The GluesyncPlatform as the controller watches it (one that does not parse included).
pub type Watched = kube::core::DeserializeGuard<GluesyncPlatform>;

/// Asks the controller to reconcile one platform.
#[derive(Clone)]
pub struct Wake {
    tx: UnboundedSender<ObjectRef<Watched>>,
    target: ObjectRef<Watched>,
}

impl Wake {
    pub fn wake(&self) {
        let _ = self.tx.unbounded_send(self.target.clone());
    }
}

/// What a background task is given.
pub struct Input<W, R> {
    /// The work wanted; `None` when there is none (the task then waits for some).
    pub want: watch::Receiver<Option<W>>,
    /// The task's report, read by the reconcile.
    pub report: Arc<Mutex<R>>,
    pub wake: Wake,
}

/// Locks a report, whatever a panicking holder left behind (it is plain data).
pub fn lock<R>(report: &Mutex<R>) -> MutexGuard<'_, R> {
    report.lock().unwrap_or_else(|e| e.into_inner())
}

struct Slot<W, R> {
    want: watch::Sender<Option<W>>,
    report: Arc<Mutex<R>>,
    task: JoinHandle<()>,
}

type Run<W, R> = dyn Fn(Input<W, R>) -> futures::future::BoxFuture<'static, ()> + Send + Sync;

/// One kind of background work, one task per platform (by uid).
pub struct Tasks<W, R> {
    slots: Mutex<HashMap<String, Slot<W, R>>>,
    wake: UnboundedSender<ObjectRef<Watched>>,
    run: Box<Run<W, R>>,
}

impl<W, R> Tasks<W, R>
where
    W: PartialEq + Send + Sync + 'static,
    R: Default + Clone + Send + 'static,
{
    pub fn new<F>(
        wake: UnboundedSender<ObjectRef<Watched>>,
        run: impl Fn(Input<W, R>) -> F + Send + Sync + 'static,
    ) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Tasks {
            slots: Mutex::default(),
            wake,
            run: Box::new(move |input| Box::pin(run(input))),
        }
    }

    /// Says what work is wanted for this platform now; the task starts on the first work.
    pub fn want(&self, gsp: &GluesyncPlatform, work: Option<W>) {
        let Some(uid) = gsp.uid() else {
            return;
        };
        let mut slots = lock(&self.slots);
        if work.is_none() && !slots.contains_key(&uid) {
            return;
        }
        let slot = slots.entry(uid).or_insert_with(|| {
            let (want, rx) = watch::channel(None);
            let report = Arc::new(Mutex::new(R::default()));
            let input = Input {
                want: rx,
                report: report.clone(),
                wake: Wake {
                    tx: self.wake.clone(),
                    target: ObjectRef::from_obj(gsp).into_kind_unchecked(()),
                },
            };
            let task = tokio::spawn((self.run)(input));
            Slot { want, report, task }
        });
        slot.want.send_if_modified(|current| {
            if *current == work {
                false
            } else {
                *current = work;
                true
            }
        });
    }

    /// The latest report for this platform.
    pub fn report(&self, uid: &str) -> R {
        lock(&self.slots)
            .get(uid)
            .map(|s| lock(&s.report).clone())
            .unwrap_or_default()
    }

    /// Stops the work of every platform but those `keep` names (deleted platforms).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        lock(&self.slots).retain(|uid, slot| {
            let kept = keep(uid);
            if !kept {
                slot.task.abort();
            }
            kept
        });
    }
}

impl<W, R> Tasks<W, R> {
    /// Stops every task once the call in hand is done (each task ends when its work's sender goes),
    /// waiting at most `timeout`; what is still running then is aborted.
    pub async fn stop(&self, timeout: std::time::Duration) {
        let slots: Vec<Slot<W, R>> = lock(&self.slots).drain().map(|(_, s)| s).collect();
        let mut tasks = vec![];
        for slot in slots {
            drop(slot.want);
            tasks.push(slot.task);
        }
        for mut task in tasks {
            if tokio::time::timeout(timeout, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl<W, R> Drop for Tasks<W, R> {
    fn drop(&mut self) {
        for slot in lock(&self.slots).values() {
            slot.task.abort();
        }
    }
}
