//! Heartbeat acknowledgements, answered beside the leader's loop.
//!
//! An executor fences itself when no heartbeat is acknowledged for
//! `fenceAfterSeconds` (ADR 0007). Acknowledging in the loop made that
//! depend on how busy the loop is: under a large backlog on a loaded host
//! the loop fell behind, heartbeats waited unanswered, and a whole healthy
//! fleet fenced itself (found by the fleet benchmark). So a task answers
//! them at once, from a view of the registrations the loop keeps current,
//! and only while the lease is surely held; the loop still gets every
//! heartbeat to note who was seen and what each executor holds.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use qm_wire::system::{Heartbeat, HeartbeatAck};

use crate::state::State;
use crate::tenure::Tenure;

/// What an acknowledgement says: the epoch, and each live executor's
/// incarnation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub epoch: u64,
    pub live: HashMap<String, String>,
}

impl View {
    pub fn of(state: &State) -> View {
        View {
            epoch: state.epoch,
            live: state
                .executors
                .iter()
                .filter(|(_, e)| e.live)
                .map(|(id, e)| (id.clone(), e.registration.incarnation.clone()))
                .collect(),
        }
    }

    pub fn knows(&self, hb: &Heartbeat) -> bool {
        self.live.get(&hb.executor_id) == Some(&hb.incarnation)
    }
}

pub type Shared = Arc<RwLock<View>>;

/// Answers every heartbeat on `subscription` from `view` while `tenure`
/// holds, and passes it on to the loop. Ends when the loop is gone.
pub async fn answer(
    client: async_nats::Client,
    mut subscription: async_nats::Subscriber,
    view: Shared,
    tenure: Tenure,
    to_loop: tokio::sync::mpsc::UnboundedSender<(Heartbeat, bool)>,
) {
    while let Some(msg) = subscription.next().await {
        let Ok(hb) = serde_json::from_slice::<Heartbeat>(&msg.payload) else {
            continue;
        };
        // Only an executor's own subject speaks for it (NATS lets each
        // executor publish only there): a heartbeat naming another
        // executor is dropped, unanswered.
        if !heartbeat_fits(msg.subject.as_str(), &hb) {
            tracing::warn!(subject = %msg.subject, executor = %hb.executor_id, "heartbeat for another executor dropped");
            continue;
        }
        let (known, epoch) = match view.read() {
            Ok(v) => (v.knows(&hb), v.epoch),
            Err(_) => continue,
        };
        if let (Some(reply), true) = (msg.reply, tenure.current()) {
            if let Ok(body) = serde_json::to_vec(&HeartbeatAck { known, epoch }) {
                let _ = client.publish(reply, body.into()).await;
            }
        }
        if to_loop.send((hb, known)).is_err() {
            return;
        }
    }
}

/// Whether `hb` came on its own executor's heartbeat subject.
fn heartbeat_fits(subject: &str, hb: &Heartbeat) -> bool {
    qm_wire::subjects::executor_heartbeat(&hb.executor_id).is_ok_and(|own| own == subject)
}

#[cfg(test)]
mod subject_tests {
    use super::*;

    #[test]
    fn a_heartbeat_counts_only_on_its_own_executors_subject() {
        let hb = Heartbeat {
            executor_id: "node-2".into(),
            incarnation: "i".into(),
            attempts: Vec::new(),
        };
        let own = qm_wire::subjects::executor_heartbeat("node-2").expect("subject");
        let other = qm_wire::subjects::executor_heartbeat("node-1").expect("subject");
        assert!(heartbeat_fits(&own, &hb));
        assert!(
            !heartbeat_fits(&other, &hb),
            "node-1 cannot keep node-2 alive"
        );
    }
}
