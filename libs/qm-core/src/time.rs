//! Virtual or wall time, as the caller sees it. The core never reads a clock:
//! every function that needs "now" takes a [`Time`].

use std::fmt;

/// A point in time in milliseconds since an epoch the caller chooses (the
/// simulator starts at 0, the live scheduler uses the Unix epoch).
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
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(1000))
    }

    pub fn from_secs_f64(secs: f64) -> Time {
        Time((secs.max(0.0) * 1000.0).round() as u64)
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// `self + secs`, saturating.
    pub fn plus_secs(self, secs: u64) -> Time {
        Time(self.0.saturating_add(secs.saturating_mul(1000)))
    }

    pub fn plus_millis(self, millis: u64) -> Time {
        Time(self.0.saturating_add(millis))
    }

    /// Milliseconds from `earlier` to `self`, 0 if `earlier` is later.
    pub fn millis_since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}s", self.0 / 1000)
        } else {
            write!(f, "{:.3}s", self.as_secs_f64())
        }
    }
}
