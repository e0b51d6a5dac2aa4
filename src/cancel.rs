//! [`Cancel`]: stops blocked lock calls and campaigns from another thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use parking_lot::Mutex;

/// Every live handle by its id, so that [`LockOptions`](crate::LockOptions)
/// can carry the id and stay `Copy`.
static LIVE: LazyLock<Mutex<HashMap<u64, Weak<Inner>>>> = LazyLock::new(Mutex::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A handle's id, as lock options carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CancelId(u64);

/// A cancel handle: give a clone to [`LockOptions::cancel`](crate::LockOptions::cancel) (or
/// [`Election::cancel`](crate::Election::cancel)), and call
/// [`cancel`](Self::cancel) from any thread, say when a service shuts down.
/// A lock call or campaign waiting with it then returns
/// [`Error::Cancelled`](crate::Error::Cancelled) within one instance
/// timeout (the attempt in flight, if any, finishes and is undone); a call
/// started after the cancel returns it at once. A handle cancels for good:
/// make a new one for new calls.
///
/// ```no_run
/// use std::time::Duration;
/// use redfence::{Cancel, Error, LockOptions, Redlock};
///
/// let locks = Redlock::new(["redis://127.0.0.1:7001"])?;
/// let shutdown = Cancel::new();
/// let waiting = {
///     let (locks, shutdown) = (locks.clone(), shutdown.clone());
///     std::thread::spawn(move || {
///         let options = LockOptions::new().wait(Duration::from_secs(3600)).cancel(&shutdown);
///         locks.lock_with("nightly-report", options)
///     })
/// };
/// shutdown.cancel(); // e.g. on SIGTERM
/// assert!(matches!(waiting.join().unwrap(), Err(Error::Cancelled { .. })));
/// # Ok::<(), redfence::Error>(())
/// ```
#[derive(Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    /// Dropped by `cancel`: every receiver then sees the disconnection at
    /// once, so waits select on it instead of polling.
    sender: Mutex<Option<Sender<()>>>,
    signal: Receiver<()>,
}

impl Cancel {
    /// A handle not cancelled yet.
    pub fn new() -> Self {
        let (sender, signal) = crossbeam_channel::bounded(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(Inner {
            id,
            sender: Mutex::new(Some(sender)),
            signal,
        });
        LIVE.lock().insert(id, Arc::downgrade(&inner));
        Cancel { inner }
    }

    pub(crate) fn id(&self) -> CancelId {
        CancelId(self.inner.id)
    }

    /// The live handle with this id; `None` once every clone was dropped
    /// (nobody can cancel it any more).
    pub(crate) fn find(id: CancelId) -> Option<Cancel> {
        let inner = LIVE.lock().get(&id.0)?.upgrade()?;
        Some(Cancel { inner })
    }

    /// Cancels every call waiting with this handle (or a clone of it), and
    /// every later one. Harmless when called again.
    pub fn cancel(&self) {
        self.inner.sender.lock().take();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        matches!(
            self.inner.signal.try_recv(),
            Err(TryRecvError::Disconnected)
        )
    }

    /// A channel that disconnects when the handle is cancelled (it never
    /// carries a message): for `select!` with a wait.
    pub(crate) fn signal(&self) -> &Receiver<()> {
        &self.inner.signal
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        LIVE.lock().remove(&self.id);
    }
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Two handles are equal when they are clones of one another.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Cancel {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_reaches_every_clone_at_once_and_for_good() {
        let cancel = Cancel::new();
        let clone = cancel.clone();
        assert!(!clone.is_cancelled());
        assert_eq!(cancel, clone);
        assert_ne!(cancel, Cancel::new());
        clone.cancel();
        assert!(cancel.is_cancelled());
        assert!(cancel.signal().recv().is_err(), "the signal disconnects");
        cancel.cancel();
        assert!(clone.is_cancelled());
        let id = cancel.id();
        assert_eq!(Cancel::find(id), Some(cancel.clone()));
        drop((cancel, clone));
        assert_eq!(
            Cancel::find(id),
            None,
            "a dropped handle leaves the registry"
        );
    }
}
