//! Runtimes: *how* an executor launches an attempt, and the placement rule
//! that follows from them.
//!
//! An executor offers one or more runtimes: `process` (a host command) and
//! `container` (an OCI image through the Docker Engine API). A job needs
//! exactly one: `container` when it names an image, `process` otherwise.
//!
//! Rule: a job is placed only on nodes that offer its runtime. A job whose
//! runtime no live node of its type offers in the number it asks for waits
//! with [`crate::WaitReason::NoExecutorOffersRuntime`] (it can never start
//! until such executors register). Where every live node of the type offers
//! the job's runtime (the usual deployment: one kind of executor per type),
//! nothing else changes. Where only some do (a *mixed* type), the quota
//! arithmetic, which counts a type's instances as interchangeable, does not
//! hold for that job's room on the nodes: it is tried only while nodes
//! offering its runtime have enough instances free now, and then fitted as
//! any job (a reclaim for it restores the quota; the room is already
//! there). It never preempts to free a particular node's instances: it
//! waits for them with [`crate::WaitReason::RuntimeInstancesBusy`]
//! (`docs/semantics-decisions.md`).
//!
//! Placement prefers, for every job, the nodes that offer the fewest
//! runtimes beyond the job's own, so that jobs that may run anywhere leave
//! the nodes with the rarer runtime free.
//!
//! | part | where |
//! |---|---|
//! | configuration | here: [`Runtime`], [`Runtimes`] (what a node offers, what a job needs) |
//! | validation | the executor's registration and the job's spec |
//! | state | what each node offers (`crate::nodes`) |
//! | hooks | `hooks.rs`: the runtime gate (free instances on nodes that offer it), promises |

pub mod hooks;

/// How an attempt is launched.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// A host command, argv without a shell.
    #[default]
    Process,
    /// An OCI image, through the container engine.
    Container,
}

impl Runtime {
    pub const ALL: [Runtime; 2] = [Runtime::Process, Runtime::Container];

    /// The name used in settings, on the wire and in reasons.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Process => "process",
            Runtime::Container => "container",
        }
    }

    /// The runtime of this name (`process`, `container`).
    pub fn from_name(name: &str) -> Option<Runtime> {
        Runtime::ALL.into_iter().find(|r| r.name() == name)
    }

    fn bit(self) -> u8 {
        match self {
            Runtime::Process => 1,
            Runtime::Container => 2,
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The runtimes a node offers (a small set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Runtimes(u8);

impl Default for Runtimes {
    /// What a node offers when it does not say: host processes (every
    /// executor before runtimes existed ran only those).
    fn default() -> Self {
        Runtimes::only(Runtime::Process)
    }
}

impl Runtimes {
    pub const NONE: Runtimes = Runtimes(0);

    pub fn only(r: Runtime) -> Runtimes {
        Runtimes(r.bit())
    }

    pub fn all() -> Runtimes {
        Runtime::ALL.into_iter().collect()
    }

    pub fn contains(self, r: Runtime) -> bool {
        self.0 & r.bit() != 0
    }

    pub fn insert(&mut self, r: Runtime) {
        self.0 |= r.bit();
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many runtimes the set holds.
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    pub fn iter(self) -> impl Iterator<Item = Runtime> {
        Runtime::ALL.into_iter().filter(move |r| self.contains(*r))
    }
}

impl FromIterator<Runtime> for Runtimes {
    fn from_iter<I: IntoIterator<Item = Runtime>>(iter: I) -> Self {
        let mut set = Runtimes::NONE;
        for r in iter {
            set.insert(r);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sets_hold_what_was_put_in() {
        for r in Runtime::ALL {
            assert_eq!(Runtime::from_name(r.name()), Some(r));
        }
        assert_eq!(Runtime::from_name("docker"), None);
        let set: Runtimes = [Runtime::Container].into_iter().collect();
        assert!(set.contains(Runtime::Container) && !set.contains(Runtime::Process));
        assert_eq!(set.len(), 1);
        assert_eq!(Runtimes::all().len(), 2);
        assert!(Runtimes::default().contains(Runtime::Process));
        assert!(!Runtimes::default().contains(Runtime::Container));
        assert_eq!(
            Runtimes::all().iter().collect::<Vec<_>>(),
            vec![Runtime::Process, Runtime::Container]
        );
    }
}
