//! The policies: each is one folder with its configuration types, its
//! validation, the state it keeps and the hooks the pass calls (ADR 0023).
//!
//! | policy | configuration | gates and keys it gives the pass |
//! |---|---|---|
//! | [`budgets`] | `borrowBudget` | safe admission of borrowers; stops and wakes when spent |
//! | [`classes`] | `workloadClasses` | why a job may not borrow (its bar) |
//! | [`drills`] | a class's resume drill | subjects due to stop |
//! | [`environments`] | a queue's environment | none: runs between the queues' passes |
//! | [`fair_share`] | `idleResourceAssignmentStrategy` | claims: which borrower goes first |
//! | [`groups`] | `shareGroups` | the group's borrow limit; lending in the group first |
//! | [`protections`] | `protections` | the re-borrow cool-down; the minimum run before preemption |
//! | [`runtimes`] | what nodes offer | free instances on nodes that offer a job's runtime |
//!
//! A policy's folder spans layers (`tests/layers.rs`): its `mod.rs` holds
//! plain types, `validate.rs` sits with validation, and `hooks.rs` sits
//! above the cluster state and below the pass, which calls the hooks at
//! its fixed phases (`pass/mod.rs`). Hooks read the state and the pass's
//! projection; they never change the cluster and never import the pass.
//! Adding a policy: a folder here, its line in the layer table, its hooks
//! built in [`hooks::Hooks::new`] and called where its phase is.

pub mod budgets;
pub mod classes;
pub mod drills;
pub mod environments;
pub mod fair_share;
pub mod groups;
pub mod hooks;
pub mod protections;
pub mod runtimes;
pub mod view;
