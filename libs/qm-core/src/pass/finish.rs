//! Finishing a pass: admissions become starts with their placement (nodes
//! and slots, see `nodes.rs`), or wait for the instances of jobs still
//! stopping; types that decided nothing are marked settled.
//!
//! Decides: which admitted jobs start now (those that fit the actual state,
//! where jobs being stopped still hold their instances) and where.
//!
//! Guarantees afterwards: no instance is promised twice; capacity promised
//! to a job is not used by another while its victims stop (a RESERVE share's
//! idle instance stays idle even for a few seconds); a job admitted earlier
//! in a pass and taken back by a later step simply does not start.

use super::*;

impl Pass<'_> {
    /// Records the admission of `id` with its victims.
    pub(super) fn admit(&mut self, id: JobId, cross: &[Victim], own: &[Victim]) {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        for v in own.iter().chain(cross.iter()) {
            self.remove_from_projection(v, t);
            if self.admitted.remove(&v.key.job) {
                // Admitted earlier in this pass and not started: it simply
                // does not start (no preemption), and waits in line again
                // (if a reclaim took its place back: to borrow, until the
                // next pass; within its quota, once more in this one).
                if v.kind != PreemptionKind::InShare && !self.barred.insert(v.key.job) {
                    self.barred_again.insert(v.key.job);
                }
                self.removed.remove(&v.key.job);
                let taken_back = self.job(v.key.job);
                self.hooks.runtimes.promise(self.c, taken_back, true);
                self.hooks.budgets.give_back(taken_back);
                self.admitted_order.retain(|(j, _)| *j != v.key.job);
                if let Some(keys) = self.added.get_mut(&(v.share, t)) {
                    keys.retain(|k| k.job != v.key.job);
                }
                continue;
            }
            self.preemptions.push(Preemption {
                job: v.key.job,
                kind: v.kind,
                for_job: id,
            });
            self.committed.insert(id);
        }
        self.admissions += 1;
        self.hooks.runtimes.promise(self.c, job, false);
        let view = &self.views[t.index()];
        let (used, entitlement) = (view.used[s.index()], view.entitlement[s.index()]);
        let need = self.hooks.budgets.promise(self, job, used, entitlement);
        self.hooks.budgets.take(job, need);
        self.views[t.index()].used[s.index()] += count;
        self.admitted.insert(id);
        self.admitted_order.push((id, count));
        self.added.entry((s, t)).or_default().push(RunKey {
            priority: std::cmp::Reverse(job.spec.priority),
            started: self.now,
            job: id,
            count,
            may_borrow: job.borrow_bar.is_none(),
        });
    }

    /// Whether an admitted job is on borrowed capacity by the contract's
    /// classification (a prefix of (priority desc, start asc) order).
    pub(super) fn classify_borrowed(&self, id: JobId) -> bool {
        let job = self.job(id);
        let (s, t) = (job.spec.share, job.spec.instance_type);
        let entitlement = self.views[t.index()].entitlement[s.index()];
        borrowed_jobs(&self.projected_running(s, t), entitlement)
            .iter()
            .any(|k| k.job == id)
    }

    pub(super) fn finish(mut self) -> Plan {
        let borrowed_at_start: HashSet<JobId> = self
            .admitted_order
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| self.classify_borrowed(*id))
            .collect();
        let mut plan = Plan {
            now: self.now,
            timeouts: self.timeouts,
            checkpoint_deadlines: self.checkpoint_deadlines,
            drill_stops: self.drill_stops,
            budget_stops: self.budget_stops,
            preemptions: self.preemptions,
            wake_at: self.wake_at,
            ..Plan::default()
        };
        // A job admitted in the projection starts only once it fits the actual
        // state, where jobs being stopped still hold their instances: the
        // capacity it was promised is not used by anyone else meanwhile (a
        // RESERVE share's idle instance stays idle even for a few seconds).
        let mut actual: Vec<TypeView> = self.views.clone();
        for (t, view) in actual.iter_mut().enumerate() {
            for (i, slot) in self.c.shares.iter().enumerate() {
                let st = &slot.types[t];
                view.used[i] = st.running_usage + st.stopping_usage;
            }
        }
        let mut started_barred: BTreeMap<(ShareIdx, TypeIdx), u32> = BTreeMap::new();
        // Free slots per node, per type a start needs (taken as starts are placed).
        let mut free: Vec<Option<BTreeMap<NodeId, FreeCursor<'_>>>> =
            (0..self.c.types.len()).map(|_| None).collect();
        // Jobs that would borrow at this moment start after those that fit
        // their share's entitlement now, whatever their admission order:
        // within-quota work before borrowing, also in the room being freed
        // (`semantics.md` section 4).
        let mut order = std::mem::take(&mut self.admitted_order);
        let mut deferred: Vec<(JobId, u32)> = Vec::new();
        for phase in 0..2 {
            let list = std::mem::take(if phase == 0 {
                &mut order
            } else {
                &mut deferred
            });
            for (id, count) in list {
                let job = &self.c.jobs[&id];
                let (s, t) = (job.spec.share, job.spec.instance_type);
                let view = &mut actual[t.index()];
                let max_holding = self.c.shares[s.index()]
                    .config
                    .max_holding(view.entitlement[s.index()]);
                let within_max = view.used[s.index()] + count <= max_holding;
                // While jobs of its own share are still stopping, a job admitted
                // within quota may for a moment exceed the entitlement: that moment
                // is borrowing, and must pass the borrowing gates too.
                let borrows_now = view.used[s.index()] + count > view.entitlement[s.index()];
                if phase == 0 && borrows_now {
                    deferred.push((id, count));
                    continue;
                }
                let barred = || {
                    let st = self.c.st(s, t);
                    let running: u32 = st
                        .running
                        .iter()
                        .filter(|k| !k.may_borrow)
                        .map(|k| k.count)
                        .sum();
                    running + st.stopping_barred + started_barred.get(&(s, t)).copied().unwrap_or(0)
                };
                let blocked = if !within_max {
                    Some(WaitReason::BorrowLimitReached {
                        used: view.used[s.index()],
                        max_holding,
                    })
                } else if let Some(Err(reason)) =
                    borrows_now.then(|| borrow_gates(self.c, job, self.now, barred))
                {
                    Some(reason)
                } else {
                    view.check(&self.lends, s.index(), count).err()
                };
                // Only a preemption's beneficiary holds a claim on the room
                // being freed and is told it waits for it; a job the pass
                // fitted into room still held by stopping jobs is told what
                // holds it now, and may be overtaken (`semantics.md` 4).
                let beneficiary = self.committed.contains(&id) || self.c.claims.contains(&id);
                let told = |reason| {
                    if beneficiary {
                        WaitReason::WaitingForRelease
                    } else {
                        reason
                    }
                };
                if let Some(reason) = blocked {
                    plan.waiting_for_release.push(id);
                    plan.reasons.push((id, told(reason)));
                    continue;
                }
                let node_free = free[t.index()].get_or_insert_with(|| self.c.free_cursors(t));
                let placement = match place_job(self.c, node_free, id, job, count) {
                    Ok(placement) => placement,
                    Err(reason) => {
                        plan.waiting_for_release.push(id);
                        plan.reasons.push((id, told(reason)));
                        continue;
                    }
                };
                if job.borrow_bar.is_some() {
                    *started_barred.entry((s, t)).or_default() += count;
                }
                let borrowed = if borrowed_at_start.contains(&id) {
                    count
                } else {
                    0
                };
                view.used[s.index()] += count;
                if let Some(secs) = job.spec.attempt_timeout_secs {
                    let deadline = self.now.plus_secs(secs);
                    plan.wake_at = Some(plan.wake_at.map_or(deadline, |w| w.min(deadline)));
                }
                plan.starts.push(Start {
                    job: id,
                    share: s,
                    instance_type: t,
                    count,
                    borrowed,
                    placement,
                });
            }
        }
        self.hooks.budgets.wakes_after(self.c, self.now, &mut plan);
        plan.settled = settled_types(self.c, &self.active, &plan);
        plan.reasons.extend(
            self.reasons
                .into_iter()
                .filter(|(id, _)| !self.admitted.contains(id)),
        );
        plan.reasons.sort_by_key(|(id, _)| *id);
        plan
    }
}

/// Places the `count` instances of admitted job `id` on free slots of nodes
/// offering its runtime, or says why it waits (their instances are busy).
fn place_job(
    c: &Cluster,
    node_free: &mut BTreeMap<NodeId, FreeCursor<'_>>,
    id: JobId,
    job: &Job,
    count: u32,
) -> Result<Ranks, WaitReason> {
    let t = job.spec.instance_type;
    let names = |n: NodeId| c.nodes[n.index()].name.as_str();
    let runtime = job.spec.runtime;
    let fit = |n: NodeId| {
        let runtimes = c.nodes[n.index()].runtimes;
        runtimes.contains(runtime).then(|| runtimes.len() - 1)
    };
    let placement = place(node_free, &names, &fit, count).map(|ranks| {
        ranks
            .into_iter()
            .map(|(node, k)| {
                let cursor = node_free.get_mut(&node).expect("placed node");
                Rank {
                    node,
                    slots: cursor.take(k),
                }
            })
            .collect::<Ranks>()
    });
    let Some(placement) = placement else {
        // A job whose runtime only some nodes offer, whose free
        // instances there a job that may run anywhere took first:
        // it tries again next pass. For any other job this cannot
        // happen while every holder holds slots on live nodes (the
        // fleet is their sum); waiting is the safe answer.
        let free_there: u32 = node_free
            .iter()
            .filter(|(n, _)| fit(**n).is_some())
            .map(|(_, f)| f.left)
            .sum();
        let reason = WaitReason::RuntimeInstancesBusy {
            runtime,
            free: free_there,
        };
        debug_assert!(
            c.nodes_of_type[t.index()].iter().any(|n| {
                let node = &c.nodes[n.index()];
                node.live && !node.runtimes.contains(runtime)
            }),
            "{id} fits the fleet but not its nodes"
        );
        return Err(reason);
    };
    Ok(placement)
}

/// Types this pass looked at (`active`) and decided nothing for.
fn settled_types(c: &Cluster, active: &[bool], plan: &Plan) -> Vec<TypeIdx> {
    let mut decided = vec![false; c.types.len()];
    let type_of = |id: &JobId| c.jobs[id].spec.instance_type.index();
    for id in plan
        .starts
        .iter()
        .map(|s| &s.job)
        .chain(plan.preemptions.iter().map(|p| &p.job))
        .chain(plan.timeouts.iter())
        .chain(plan.budget_stops.iter())
        .chain(plan.waiting_for_release.iter())
    {
        decided[type_of(id)] = true;
    }
    (0..c.types.len())
        .filter(|&t| active[t] && !decided[t])
        .map(|t| TypeIdx(t as u16))
        .collect()
}
