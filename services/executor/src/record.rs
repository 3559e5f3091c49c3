//! What ended on this executor, kept for a retention (by age, oldest out
//! first) rather than cleared wholesale: within it a repeated start of an
//! ended attempt is ignored and a stop for one reports its end again. A
//! running attempt is never here (it is in the executor's attempts), so a
//! resent start is refused while its attempt lives whatever the retention.
//! Starts are also fenced by the lease's epoch, so after a failover an old
//! leader's resends are refused before this record is consulted.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// At most this many entries whatever their age (a backstop on memory for
/// a node ending thousands of attempts a minute): the oldest go first.
pub(crate) const MOST: usize = 1_000_000;

pub(crate) struct Ended<K, V> {
    entries: HashMap<K, V>,
    /// Keys in the order they ended (each once), with when.
    order: VecDeque<(Instant, K)>,
    retention: Duration,
    most: usize,
}

impl<K: Clone + Eq + Hash, V> Ended<K, V> {
    pub(crate) fn new(retention: Duration, most: usize) -> Self {
        Ended {
            entries: HashMap::new(),
            order: VecDeque::new(),
            retention,
            most: most.max(1),
        }
    }

    /// Records `key` as ended at `now` (a second record of the same key
    /// replaces the value and keeps its age), then forgets what is older
    /// than the retention or beyond the bound.
    pub(crate) fn insert(&mut self, now: Instant, key: K, value: V) {
        if self.entries.insert(key.clone(), value).is_none() {
            self.order.push_back((now, key));
        }
        self.prune(now);
    }

    pub(crate) fn prune(&mut self, now: Instant) {
        while let Some((at, key)) = self.order.front() {
            let old = now.saturating_duration_since(*at) > self.retention;
            if !old && self.entries.len() <= self.most {
                break;
            }
            self.entries.remove(key);
            self.order.pop_front();
        }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_ended_within_the_retention_and_forgets_it_after() {
        let t0 = Instant::now();
        let mut e = Ended::new(Duration::from_secs(60), 100);
        e.insert(t0, "a", 1);
        e.insert(t0 + Duration::from_secs(30), "b", 2);
        assert!(e.contains(&"a") && e.contains(&"b"));
        // At 61 s "a" is past its retention; "b" (31 s old) stays.
        e.insert(t0 + Duration::from_secs(61), "c", 3);
        assert!(!e.contains(&"a"), "aged out");
        assert_eq!(e.get(&"b"), Some(&2));
        assert_eq!(e.len(), 2);
        e.prune(t0 + Duration::from_secs(200));
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn past_the_bound_the_oldest_go_first_never_all_at_once() {
        let t0 = Instant::now();
        let mut e = Ended::new(Duration::from_secs(3600), 3);
        for (i, k) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            e.insert(t0 + Duration::from_millis(i as u64), *k, i);
        }
        assert_eq!(e.len(), 3);
        assert!(!e.contains(&"a") && !e.contains(&"b"));
        assert!(e.contains(&"c") && e.contains(&"d") && e.contains(&"e"));
    }

    #[test]
    fn a_second_record_of_a_key_keeps_its_first_age() {
        let t0 = Instant::now();
        let mut e = Ended::new(Duration::from_secs(60), 10);
        e.insert(t0, "a", 1);
        e.insert(t0 + Duration::from_secs(50), "a", 2);
        assert_eq!(e.get(&"a"), Some(&2));
        e.prune(t0 + Duration::from_secs(61));
        assert!(!e.contains(&"a"));
        assert_eq!(e.order.len(), 0, "no stale order entries");
    }
}
