//! Fair sharing in the controller's queue rounds (docs/queueing.md, "Fair
//! sharing"). The decisions are `quota::queue::share`'s: a borrowing
//! quota whose round would take idle room that a sibling with a smaller
//! share waits for, and that cannot hold both, holds those admissions
//! back and asks the scheduler for the sibling's round; once that round is
//! done, the quota gets a round again (`after_round`).
//!
//! Every admission still goes through `Service::admit_round`'s
//! compare-and-swaps (the loan in the parent, then the charge), so fair
//! sharing only ever admits less than the limits allow, never more. The
//! figures it weighs (the siblings' queues and use) are their stored
//! statuses and may be a little stale; a sibling whose head the room
//! turns out not to hold (a stale status, its own limits) is yielded to
//! at most `MAX_YIELDS` times in a row for the same head, then passed;
//! at once where the sibling's own round took none of the room.

use super::Context;
use quota::object::queue::Queued;
use quota::queue::share::{self, Field};
use quota::queue::Decision;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// How many rounds in a row a quota leaves the room to the same head of
/// the same sibling before it takes the room itself.
pub const MAX_YIELDS: u32 = 3;

#[derive(Default)]
pub(super) struct Yields {
    /// Quotas waiting for a sibling's round, by that sibling, with when
    /// each began to wait.
    waiting: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// (quota, sibling) → (the sibling's head's `since`, rounds yielded).
    streak: Mutex<HashMap<(String, String), (i64, u32)>>,
}

impl Context {
    /// `decisions` with the borrowing admissions a sibling goes before
    /// held back (`share::yield_to_fairer`), and the siblings triggered;
    /// whether any was held back.
    pub(super) fn yield_to_fairer(
        &self,
        name: &str,
        known: &[Queued],
        decisions: Vec<Decision>,
        field: Option<Field>,
    ) -> (Vec<Decision>, bool) {
        let Some(mut field) = field else {
            return (decisions, false);
        };
        loop {
            let y = share::yield_to_fairer(decisions.clone(), known, &field);
            let Some(rival) = y.to.clone() else {
                self.fair
                    .streak
                    .lock()
                    .unwrap()
                    .retain(|(q, _), _| q != name);
                return (y.decisions, false);
            };
            let since = field
                .rivals
                .iter()
                .find(|r| r.sibling.name == rival)
                .and_then(|r| r.heads.first())
                .map_or(0, |h| h.since_ms);
            let passed = {
                let mut streak = self.fair.streak.lock().unwrap();
                let e = streak
                    .entry((name.to_string(), rival.clone()))
                    .or_insert((since, 0));
                if e.0 != since {
                    *e = (since, 0);
                }
                e.1 += 1;
                e.1 > MAX_YIELDS
            };
            if passed {
                // Its head never got the room: the sibling's status was
                // stale, or its own limits hold it. Weigh without it.
                tracing::info!(quota = %name, sibling = %rival, "fair sharing: the sibling's head was left room it did not take (a round of its own that admitted nothing, or {MAX_YIELDS} rounds left to it); passing it");
                field.rivals.retain(|r| r.sibling.name != rival);
                continue;
            }
            self.after_round_of(rival.clone(), name);
            self.schedule(&rival);
            return (y.decisions, true);
        }
    }

    /// `name` gets a round once `sibling`'s is done (`after_round`).
    pub(super) fn after_round_of(&self, sibling: String, name: &str) {
        self.fair
            .waiting
            .lock()
            .unwrap()
            .entry(sibling)
            .or_default()
            .entry(name.to_string())
            .or_insert_with(Instant::now);
    }

    /// `name`'s round is done: the quotas waiting for it (room left to
    /// it, room freed under its parent) get theirs. Where it took none of
    /// the room (`took_none`: the round, begun then, admitted nothing, or
    /// was put off because nothing it reads had changed since a kept
    /// round), each that began to wait before it passes `name`'s head in
    /// its next round, as after `MAX_YIELDS` rounds left to it, instead of
    /// leaving the room to it again: the room was there when the round
    /// read, and that head did not take it. One that began to wait since
    /// may have left room the round never saw.
    pub(super) fn after_round(&self, name: &str, took_none: Option<Instant>) {
        self.scheduler.handed_over(name);
        let waiting = self.fair.waiting.lock().unwrap().remove(name);
        if let Some(begun) = took_none {
            let mut streak = self.fair.streak.lock().unwrap();
            for (y, _) in waiting.iter().flatten().filter(|(_, at)| **at <= begun) {
                if let Some(e) = streak.get_mut(&(y.clone(), name.to_string())) {
                    e.1 = e.1.max(MAX_YIELDS);
                }
            }
        }
        for n in waiting.into_iter().flatten().map(|(n, _)| n) {
            self.schedule(&n);
        }
    }
}
