//! Random-looking but reproducible name suffixes.
//!
//! Kubernetes names pods `<replicaset>-<5 characters>`, the API server filling in
//! `generateName` with `utilrand.String(5)`. Both that and the pod-template-hash use the
//! alphabet of `k8s.io/apimachinery/pkg/util/rand`, which leaves out vowels (and the digits
//! that look like them) so that generated names never spell words.

pub use apimachinery::template_hash::ALPHANUMS;

/// Length of the random part of a generated pod name (`generateName`'s suffix).
pub const SUFFIX_LEN: usize = 5;

/// A source of name suffixes. Inject your own to control names in tests.
pub trait NameSource {
    /// The next suffix: [`SUFFIX_LEN`] characters of [`ALPHANUMS`].
    fn suffix(&mut self) -> String;
}

/// A deterministic [`NameSource`]: SplitMix64 from a seed. Equal seeds give equal sequences.
#[derive(Debug, Clone)]
pub struct SeededNames {
    state: u64,
}

impl SeededNames {
    /// A sequence from a numeric seed.
    pub fn new(seed: u64) -> Self {
        SeededNames { state: seed }
    }

    /// A sequence seeded from text, such as the cluster name, so that clusters differ.
    pub fn from_seed_text(seed: &str) -> Self {
        SeededNames::new(u64::from(super::template_hash::fnv32a(seed.as_bytes())))
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl NameSource for SeededNames {
    fn suffix(&mut self) -> String {
        let mut r = self.next_u64();
        (0..SUFFIX_LEN)
            .map(|_| {
                let c = ALPHANUMS[(r % ALPHANUMS.len() as u64) as usize];
                r /= ALPHANUMS.len() as u64;
                c as char
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_reproducible_and_use_the_alphabet() {
        let a: Vec<_> = (0..20)
            .map({
                let mut s = SeededNames::new(7);
                move |_| s.suffix()
            })
            .collect();
        let mut s = SeededNames::new(7);
        let b: Vec<_> = (0..20).map(|_| s.suffix()).collect();
        assert_eq!(a, b);
        let mut other = SeededNames::new(8);
        assert_ne!(a[0], other.suffix());
        for x in &a {
            assert_eq!(x.len(), SUFFIX_LEN);
            assert!(x.bytes().all(|c| ALPHANUMS.contains(&c)), "{x}");
        }
        // Twenty draws from 27^5 names should not repeat.
        let unique: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(unique.len(), a.len());
    }
}
