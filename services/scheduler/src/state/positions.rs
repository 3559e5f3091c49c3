//! Replay and event positions: how a new leader rebuilds the state from the
//! stored log in exactly the order the old one applied it, and numbers the
//! events so that it republishes only those never published.

use std::collections::BTreeMap;

use qm_wire::system::LogEntry;

use super::{Effect, State};

/// Where an event was produced in the order the leader applied entries:
/// (`a`, `b`, `i`) with `a` the input's sequence (or a decision's
/// `Qm-After`), `b` 0 for an input (else the decision's sequence), `i` the
/// event's index among that entry's events. Ordered like the application.
pub type Position = (u64, u64, u64);

/// Numbers events by [`Position`]: the live leader and a replay use this
/// one type, so a replay finds the positions the leader published.
#[derive(Clone, Copy, Debug, Default)]
pub struct Positions(Position);

impl Positions {
    /// Numbering continues at `p` (its next event is `p`).
    pub fn at(p: Position) -> Positions {
        Positions(p)
    }

    /// The input stored at `seq` is applied next.
    pub fn input(&mut self, seq: u64) {
        self.0 = (seq, 0, 0);
    }

    /// The decision stored at `seq`, decided after input `after`, is
    /// applied next.
    pub fn decision(&mut self, after: u64, seq: u64) {
        self.0 = (after, seq, 0);
    }

    /// The position of the next event.
    pub fn next_event(&mut self) -> Position {
        let p = self.0;
        self.0 .2 += 1;
        p
    }
}

/// One stored log entry as a replay reads it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub seq: u64,
    /// For a decision: the sequence of the last input its leader had
    /// applied when it decided (`Qm-After`); None for an input.
    pub after: Option<u64>,
    pub entry: LogEntry,
    /// The stored time, milliseconds since the Unix epoch.
    pub at: u64,
}

impl State {
    /// Rebuilds the state from a stored log (in stream order), applying each
    /// decision right after the input its leader had last applied, in the
    /// order they were stored: exactly the order the leader applied them.
    /// Returns the events produced after position `published` (none when
    /// `published` is None), for a new leader to republish.
    pub fn replay(
        &mut self,
        log: Vec<Logged>,
        published: Option<Position>,
    ) -> Vec<(Position, Effect)> {
        let mut inputs = Vec::new();
        let mut decisions: BTreeMap<u64, Vec<Logged>> = BTreeMap::new();
        for l in log {
            match l.after {
                Some(after) => decisions.entry(after).or_default().push(l),
                None => inputs.push(l),
            }
        }
        let mut out = Vec::new();
        let mut positions = Positions::default();
        let mut apply = |state: &mut State, a: u64, l: Logged| {
            match l.after {
                Some(_) => positions.decision(a, l.seq),
                None => positions.input(l.seq),
            }
            let fx = state.apply(l.entry, l.at);
            let Some(published) = published else { return };
            for e in fx.into_iter().filter(Effect::is_event) {
                let position = positions.next_event();
                if position > published {
                    out.push((position, e));
                }
            }
        };
        for d in decisions.remove(&0).unwrap_or_default() {
            apply(self, 0, d);
        }
        for l in inputs {
            let seq = l.seq;
            apply(self, seq, l);
            for d in decisions.remove(&seq).unwrap_or_default() {
                apply(self, seq, d);
            }
        }
        // Decisions after inputs that are gone (never: the stream keeps all).
        for (after, list) in decisions {
            for d in list {
                apply(self, after, d);
            }
        }
        out
    }
}
