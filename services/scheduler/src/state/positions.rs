//! Replay and event positions: how a new leader rebuilds the state from the
//! stored log in exactly the order the old one applied it, and numbers the
//! events so that it republishes only those never published.

use qm_wire::system::LogEntry;

use super::{Effect, State};

/// Where an event was produced in the order the leader applied entries:
/// (`a`, `b`, `i`) with `a` the input's sequence (or a decision's
/// `Qm-After`), `b` 0 for an input (else the decision's sequence), `i` the
/// event's index among that entry's events. Ordered like the application.
pub type Position = (u64, u64, u64);

/// Numbers events by [`Position`]: the live leader and a replay use this
/// one type, so a replay finds the positions the leader published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Where a snapshot was cut: it holds every input up to `after` and every
/// decision up to `sched` (a live leader's state at any moment is such a
/// cut: it applies inputs in stream order and its own decisions as it
/// stores them, and every decision still to come is decided after `after`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Cut {
    pub after: u64,
    pub sched: u64,
}

/// A replay in progress: stored entries go in one at a time, in stream
/// order, and come out applied in the order their leader applied them. An
/// input waits only until the next decision shows it was not applied before
/// that decision (decisions' `Qm-After` never go backwards), so a replay
/// holds no more than the inputs stored between two decisions, not the log.
pub struct Replay {
    /// Entries the state already holds (a snapshot's cut; zero: none).
    from: Cut,
    /// Inputs read and not applied yet, in stream order.
    waiting: std::collections::VecDeque<Logged>,
    positions: Positions,
    published: Option<Position>,
    republish: Vec<(Position, Effect)>,
}

impl Replay {
    /// A replay onto a state that holds everything up to `from` (a
    /// snapshot's cut, or the default for an empty state) and whose event
    /// numbering is at `positions`. Events after `published` are kept for a
    /// new leader to republish (none when `published` is None).
    pub fn new(from: Cut, positions: Positions, published: Option<Position>) -> Replay {
        Replay {
            from,
            waiting: Default::default(),
            positions,
            published,
            republish: Vec::new(),
        }
    }

    fn apply(&mut self, state: &mut State, a: u64, l: Logged) {
        match l.after {
            Some(_) => self.positions.decision(a, l.seq),
            None => self.positions.input(l.seq),
        }
        let fx = state.apply(l.entry, l.at);
        let Some(published) = self.published else {
            return;
        };
        for e in fx.into_iter().filter(Effect::is_event) {
            let position = self.positions.next_event();
            if position > published {
                self.republish.push((position, e));
            }
        }
    }

    /// The next stored entry, in stream order.
    pub fn push(&mut self, state: &mut State, l: Logged) {
        match l.after {
            None if l.seq <= self.from.after => {}
            None => self.waiting.push_back(l),
            Some(_) if l.seq <= self.from.sched => {}
            Some(after) => {
                while self.waiting.front().is_some_and(|w| w.seq <= after) {
                    let input = self.waiting.pop_front().expect("checked");
                    self.apply(state, input.seq, input);
                }
                self.apply(state, after, l);
            }
        }
    }

    /// The stored events end at `published`: the events kept so far at or
    /// before it need no republishing, nor do events produced later at or
    /// before it (a follower behind the leader). None: none is known to be
    /// missing, so none kept so far is. Events are published in the order
    /// produced, so nothing after a stored one was stored before it.
    pub fn prune(&mut self, published: Option<Position>) {
        match published {
            Some(p) => {
                self.republish.retain(|(q, _)| *q > p);
                if let Some(floor) = &mut self.published {
                    *floor = (*floor).max(p);
                }
            }
            None => self.republish.clear(),
        }
    }

    /// Whether any event is kept for republishing.
    pub fn keeps_events(&self) -> bool {
        !self.republish.is_empty()
    }

    /// [`Replay::finish`] for a replay that kept its events while the
    /// stored events grew: returns only those after `published`, the
    /// newest stored one now (None: none).
    pub fn finish_after(
        mut self,
        state: &mut State,
        published: Option<Position>,
    ) -> (Vec<(Position, Effect)>, Positions) {
        self.prune(published);
        if published.is_none() {
            self.published = None;
        }
        self.finish(state)
    }

    /// The log has been read to its end: the inputs no decision followed
    /// are applied. Returns the events to republish and where event
    /// numbering continues.
    pub fn finish(mut self, state: &mut State) -> (Vec<(Position, Effect)>, Positions) {
        while let Some(input) = self.waiting.pop_front() {
            self.apply(state, input.seq, input);
        }
        (self.republish, self.positions)
    }
}

#[cfg(test)]
impl State {
    /// Rebuilds the state from a whole stored log (in stream order): see
    /// [`Replay`]. Returns the events produced after position `published`
    /// (none when `published` is None), for a new leader to republish.
    pub fn replay(
        &mut self,
        log: Vec<Logged>,
        published: Option<Position>,
    ) -> Vec<(Position, Effect)> {
        let mut replay = Replay::new(Cut::default(), Positions::default(), published);
        for l in log {
            replay.push(self, l);
        }
        replay.finish(self).0
    }
}
