//! [`Lru`]: a map whose entries each weigh some bytes, kept within a byte budget by evicting the
//! least recently used entry that nobody else holds. The plan cache's memory tier is one; the
//! bookkeeping lives here, apart from cuDNN, so that its rules are tested on their own (with
//! thousands of entries, which planning with cuDNN could not afford).
//!
//! The rules:
//! - Every `get`, `update` and `insert` makes its entry the most recently used.
//! - After an `insert` or an `update` the map evicts, oldest first, until its bytes are within
//!   the budget, passing over *pinned* entries (those another owner still holds, see
//!   [`Weigh::pinned`]) and the entry just touched. Evicting a pinned entry would free nothing, and
//!   a plan that a CUDA graph replays is pinned by the graph's borrow of it.
//! - An entry heavier than the whole budget is not kept (the caller still has its value).
//! - The bytes can exceed the budget only by pinned entries and the entry just touched.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

/// What an [`Lru`] needs of its values.
pub(crate) trait Weigh {
    /// The bytes the value accounts for.
    fn bytes(&self) -> usize;
    /// Whether another owner holds the value's contents, so that evicting it would free nothing.
    fn pinned(&self) -> bool;
}

struct Slot<V> {
    value: V,
    bytes: usize,
    tick: u64,
}

/// A map of weighed values within a byte budget, least recently used evicted first (see the
/// module documentation for the rules).
pub(crate) struct Lru<K, V> {
    slots: HashMap<K, Slot<V>>,
    /// Keys by the tick of their last use: the first is the least recently used.
    order: BTreeMap<u64, K>,
    tick: u64,
    bytes: usize,
    budget: usize,
}

/// What one `insert` or `update` evicted.
pub(crate) struct Evicted<K, V> {
    /// The evicted keys, values and their bytes, oldest first.
    pub(crate) entries: Vec<(K, V, usize)>,
}

impl<K, V> Evicted<K, V> {
    /// Adds the entries to `counter` and traces each: `"{cache} eviction"` with the key's
    /// `fingerprint` and the bytes it held.
    pub(crate) fn count(&self, counter: &AtomicU64, cache: &str, fingerprint: impl Fn(&K) -> u64) {
        counter.fetch_add(self.entries.len() as u64, Ordering::Relaxed);
        for (key, _, bytes) in &self.entries {
            tracing::debug!(fingerprint = format_args!("{:#018x}", fingerprint(key)), bytes, "{cache} eviction");
        }
    }
}

impl<K: Hash + Eq + Clone, V: Weigh> Lru<K, V> {
    /// An empty map that keeps at most `budget` bytes of unpinned entries.
    pub(crate) fn new(budget: usize) -> Self {
        Lru { slots: HashMap::new(), order: BTreeMap::new(), tick: 0, bytes: 0, budget }
    }

    /// The budget in bytes.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// The bytes of every entry held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The bytes of the entries held that are pinned now.
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.slots.values().filter(|s| s.value.pinned()).map(|s| s.bytes).sum()
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.slots.contains_key(key)
    }

    /// The keys, least recently used first.
    #[cfg(test)]
    pub(crate) fn keys_by_age(&self) -> Vec<K> {
        self.order.values().cloned().collect()
    }

    fn touch(&mut self, key: &K) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(slot) = self.slots.get_mut(key) {
            self.order.remove(&slot.tick);
            slot.tick = tick;
            self.order.insert(tick, key.clone());
        }
    }

    /// The value of `key`, made the most recently used.
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        self.touch(key);
        self.slots.get(key).map(|s| &s.value)
    }

    /// Changes the value of `key` with `f`, makes it the most recently used, weighs it again and
    /// evicts what no longer fits.
    pub(crate) fn update<R>(&mut self, key: &K, f: impl FnOnce(&mut V) -> R) -> Option<(R, Evicted<K, V>)> {
        self.touch(key);
        let slot = self.slots.get_mut(key)?;
        let out = f(&mut slot.value);
        let bytes = slot.value.bytes();
        self.bytes = self.bytes - slot.bytes + bytes;
        slot.bytes = bytes;
        Some((out, self.evict(key)))
    }

    /// Inserts (or replaces) `key`'s value as the most recently used and evicts what no longer
    /// fits. A value heavier than the budget is not kept: it comes back as evicted.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Evicted<K, V> {
        self.remove(&key);
        let bytes = value.bytes();
        if bytes > self.budget {
            return Evicted { entries: vec![(key, value, bytes)] };
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.slots.insert(key.clone(), Slot { value, bytes, tick: self.tick });
        self.bytes += bytes;
        self.evict(&key)
    }

    /// Removes `key`'s entry.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self.slots.remove(key)?;
        self.order.remove(&slot.tick);
        self.bytes -= slot.bytes;
        Some(slot.value)
    }

    /// Removes every entry.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// Evicts unpinned entries other than `keep`, least recently used first, until the bytes are
    /// within the budget or nothing evictable is left.
    fn evict(&mut self, keep: &K) -> Evicted<K, V> {
        let mut entries = Vec::new();
        if self.bytes <= self.budget {
            return Evicted { entries };
        }
        let mut victims = Vec::new();
        let mut freed = 0;
        for key in self.order.values() {
            if self.bytes - freed <= self.budget {
                break;
            }
            let slot = &self.slots[key];
            if key != keep && !slot.value.pinned() {
                freed += slot.bytes;
                victims.push(key.clone());
            }
        }
        for key in victims {
            if let Some(value) = self.remove(&key) {
                let bytes = value.bytes();
                entries.push((key, value, bytes));
            }
        }
        Evicted { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use std::rc::Rc;

    /// A value of fixed weight, pinned while a clone of its holder lives elsewhere (as a cached
    /// plan is pinned while a caller holds its `Arc`).
    struct Item {
        bytes: usize,
        holder: Rc<()>,
    }

    impl Weigh for Item {
        fn bytes(&self) -> usize {
            self.bytes
        }
        fn pinned(&self) -> bool {
            Rc::strong_count(&self.holder) > 1
        }
    }

    fn item(bytes: usize) -> Item {
        Item { bytes, holder: Rc::new(()) }
    }

    fn evicted(e: Evicted<u32, Item>) -> Vec<u32> {
        e.entries.into_iter().map(|(k, _, _)| k).collect()
    }

    #[test]
    fn the_least_recently_used_go_first() {
        let mut lru = Lru::new(100);
        for k in 0..4 {
            assert!(evicted(lru.insert(k, item(25))).is_empty());
        }
        assert_eq!(lru.bytes(), 100);
        // A use makes 0 the most recently used: 1 is now the oldest.
        assert!(lru.get(&0).is_some());
        assert_eq!(lru.keys_by_age(), [1, 2, 3, 0]);
        assert_eq!(evicted(lru.insert(4, item(25))), [1]);
        // An entry of 60 needs three 25s gone: 2, 3 and 0, oldest first.
        assert_eq!(evicted(lru.insert(5, item(60))), [2, 3, 0]);
        assert_eq!(lru.keys_by_age(), [4, 5]);
        assert_eq!(lru.bytes(), 85);
        // Growing an entry by an update evicts the others, never the entry itself.
        let (_, e) = lru.update(&4, |v| v.bytes = 50).unwrap();
        assert_eq!(evicted(e), [5]);
        assert_eq!((lru.bytes(), lru.len()), (50, 1));
        // Replacing an entry replaces its bytes.
        assert!(evicted(lru.insert(4, item(10))).is_empty());
        assert_eq!(lru.bytes(), 10);
    }

    #[test]
    fn pinned_entries_stay_and_are_evicted_once_let_go() {
        let mut lru = Lru::new(100);
        lru.insert(0, item(40));
        let pin = lru.get(&0).unwrap().holder.clone();
        lru.insert(1, item(40));
        // 0 is the oldest but pinned: 1 goes instead.
        assert_eq!(lru.keys_by_age(), [0, 1]);
        assert_eq!(evicted(lru.insert(2, item(40))), [1]);
        assert_eq!(lru.pinned_bytes(), 40);
        // 2 goes for 3; 0 stays though the bytes are over budget, by the pinned bytes only.
        assert_eq!(evicted(lru.insert(3, item(70))), [2]);
        assert_eq!(lru.keys_by_age(), [0, 3]);
        assert_eq!(lru.bytes(), 110);
        assert!(lru.bytes() - lru.pinned_bytes() <= lru.budget());
        // Let go, it is the first to go.
        drop(pin);
        assert_eq!(lru.pinned_bytes(), 0);
        assert_eq!(evicted(lru.insert(4, item(30))), [0]);
        assert_eq!(lru.keys_by_age(), [3, 4]);
    }

    #[test]
    fn an_entry_heavier_than_the_budget_is_not_kept() {
        let mut lru = Lru::new(100);
        lru.insert(0, item(50));
        assert_eq!(evicted(lru.insert(1, item(101))), [1]);
        assert_eq!(lru.keys_by_age(), [0]);
        assert_eq!(lru.bytes(), 50);
    }

    #[test]
    fn ten_thousand_random_shapes_stay_within_the_budget() {
        // Sizes of real plan payloads (7–60 KiB), 10 000 draws from 10 000 shapes with a hot set
        // of 32, a few held by a caller at a time (as a live CUDA graph holds its plan).
        let budget = 1 << 20;
        let mut lru = Lru::new(budget);
        let mut rng = SplitMix64::new(19);
        let mut held: Vec<Rc<()>> = Vec::new();
        let (mut inserted, mut evictions, mut hits) = (0u64, 0u64, 0u64);
        for step in 0..10_000u32 {
            let key = if rng.below(4) == 0 { rng.below(32) as u32 } else { 32 + step };
            if lru.get(&key).is_some() {
                hits += 1;
            } else {
                let bytes = 7 * 1024 + rng.below(53 * 1024);
                let out = lru.insert(key, item(bytes));
                inserted += 1;
                assert!(out.entries.iter().all(|(k, v, _)| *k != key && !v.pinned()), "step {step}");
                evictions += out.entries.len() as u64;
            }
            if rng.below(50) == 0 {
                held.push(lru.get(&key).unwrap().holder.clone());
            }
            if held.len() > 4 || (rng.below(20) == 0 && !held.is_empty()) {
                held.remove(0);
            }
            let unpinned = lru.bytes() - lru.pinned_bytes();
            assert!(unpinned <= budget, "step {step}: {unpinned} unpinned bytes over {budget}");
            let sum: usize = lru.slots.values().map(|s| s.bytes).sum();
            assert_eq!(sum, lru.bytes(), "step {step}: the byte count drifted");
            assert_eq!(lru.order.len(), lru.slots.len());
        }
        assert_eq!(inserted - evictions, lru.len() as u64, "every insert is held or was evicted once");
        assert!(evictions > 9_000 && hits > 400, "{evictions} evictions, {hits} hits");
    }
}
