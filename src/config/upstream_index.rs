//! The typed position of a managed upstream, handed out where the list is built.

/// Which managed upstream, by its position: a configured upstream's place in
/// [`Settings::upstreams`](super::Settings::upstreams), or a learned host's slot after them
/// (`upstream::learned`). An *index*, not an id: it is valid only for the life of one engine
/// (the queue's `UpstreamId` is the upstream's name, which is what survives a restart and a
/// config edit), and the word keeps the two from being read one for the other.
///
/// It lives here, beside the configured list, rather than in `upstream`: `accounts`, a layer
/// below `upstream`, names the `github-api` upstream by it too, and `upstream` imports
/// `accounts`. It is made only where a list is built or searched
/// ([`Settings::upstream_for`](super::Settings::upstream_for), `Settings::upstream_named`,
/// `Upstreams::configured`, the learned slots) and has no arithmetic: the learned slots'
/// `configured + slot` is the one sum, done on the position before an index is made.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct UpstreamIndex(u32);

impl UpstreamIndex {
    /// The upstream at `position` in the list being built. Positions are small (the configured
    /// upstreams and a few learned slots); one past `u32::MAX` cannot be built in memory.
    pub(crate) fn at(position: usize) -> UpstreamIndex {
        match u32::try_from(position) {
            Ok(p) => UpstreamIndex(p),
            Err(_) => unreachable!("upstream position {position} past u32::MAX"),
        }
    }

    /// The position, for the few places that index a list by it (the upstreams' own lists, a
    /// per-upstream table). Nothing that outlives the process holds it: stored keys hash the
    /// upstream's name.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for UpstreamIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
