//! What a controller remembers of the passes that had nothing to do: the digest of
//! the inputs each read, so that an event that leaves them as they were (a label, a
//! finalizer, a cluster's report) is passed over without planning again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// The inputs of the last quiet pass of each key.
#[derive(Debug)]
pub struct Settled<K>(Mutex<HashMap<K, u64>>);

impl<K> Default for Settled<K> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + Hash> Settled<K> {
    /// Whether the last pass of `key` was quiet and read these same `inputs`.
    pub fn unchanged(&self, key: &K, inputs: u64) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key) == Some(&inputs)
    }

    /// Records a pass of `key` that read `inputs`: remembered if it was quiet (wrote
    /// nothing), forgotten if it wrote, since its writes change what the next one reads.
    pub fn record(&self, key: K, inputs: u64, quiet: bool) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if quiet {
            map.insert(key, inputs);
        } else {
            map.remove(&key);
        }
    }

    /// Forgets `key` (its object is gone).
    pub fn forget(&self, key: &K) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_quiet_pass_with_the_same_inputs_is_passed_over() {
        let s = Settled::default();
        assert!(!s.unchanged(&"a", 1));
        s.record("a", 1, true);
        assert!(s.unchanged(&"a", 1) && !s.unchanged(&"a", 2));
        s.record("a", 1, false);
        assert!(!s.unchanged(&"a", 1), "a pass that wrote is not remembered");
        s.record("a", 3, true);
        s.forget(&"a");
        assert!(!s.unchanged(&"a", 3));
    }
}
