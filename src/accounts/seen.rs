//! What this thread last read of the account table for a few credentials: the record (or its
//! absence) and, once asked, the sharing identity made of it.
//!
//! Why: every credentialed request to a managed upstream asked the table for its credential
//! two or three times (counted, then its mapping's age looked at, then its sharing identity),
//! each a read of the table's `RwLock` (two atomic writes to a line every worker shares) and a
//! SipHash of 32 bytes; and a credential with an account that shares had its sharing identity
//! made again by a keyed blake3 hash per request. A client sends the same credential again and
//! again, so the answers are kept per thread and given again while the table is unchanged.
//!
//! "Unchanged": each table (an [`super::Accounts`], numbered when made) counts its changes
//! (its `generation`, raised after each insert or removal); a kept answer holds the count it
//! was read under, loaded before the read, and is given again only under that same count. A
//! change made after that load raises the count first, so nothing read before it is used
//! after it: a 401's dropped mapping, or a new one, is seen by the next request, as before.

use super::AccountRecord;
use crate::identity::Identity;
use std::cell::RefCell;
use std::sync::Arc;

/// Credentials a thread keeps (a developer's editor, `gh` and browser, each its own token).
const SLOTS: usize = 4;

struct Seen {
    accounts: u64,
    generation: u64,
    id: Identity,
    record: Option<Arc<AccountRecord>>,
    /// The sharing identity, made the first time it is asked.
    sharing: Option<Identity>,
}

#[derive(Default)]
struct Slots {
    kept: [Option<Seen>; SLOTS],
    next: usize,
}

thread_local! {
    static SEEN: RefCell<Slots> = RefCell::default();
}

/// `f` of `id`'s record in table `accounts` at `generation` (`look` reads it when this thread
/// has not kept it) and of the slot for its sharing identity.
pub(super) fn with<R>(
    accounts: u64,
    generation: u64,
    id: &Identity,
    look: impl FnOnce() -> Option<Arc<AccountRecord>>,
    f: impl FnOnce(Option<&AccountRecord>, &mut Option<Identity>) -> R,
) -> R {
    let mut f = Some(f);
    let mut look = Some(look);
    let kept = SEEN.try_with(|slots| {
        let Ok(mut slots) = slots.try_borrow_mut() else {
            return None;
        };
        let found = slots.kept.iter().position(|s| {
            s.as_ref().is_some_and(|s| {
                s.id == *id && s.accounts == accounts && s.generation == generation
            })
        });
        let at = match found {
            Some(at) => at,
            None => {
                let at = slots.next;
                slots.next = (at + 1) % SLOTS;
                slots.kept[at] = Some(Seen {
                    accounts,
                    generation,
                    id: *id,
                    record: (look.take()?)(),
                    sharing: None,
                });
                at
            }
        };
        let seen = slots.kept[at].as_mut()?;
        Some((f.take()?)(seen.record.as_deref(), &mut seen.sharing))
    });
    match (kept, f) {
        (Ok(Some(r)), _) => r,
        // No thread-local (the thread is ending) or a nested call (none is made): read as before.
        (_, Some(f)) => {
            let record = look.and_then(|look| look());
            f(record.as_deref(), &mut None)
        }
        // `f` ran, so its answer was returned above.
        (_, None) => unreachable!("the kept answer was returned"),
    }
}
