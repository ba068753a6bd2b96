//! Group commit: many decisions on one quota made one after another, in
//! the order they arrived, on one copy of its latest version, then written
//! as one compare-and-swap (the service's per-quota batcher does the I/O).
//!
//! Two rules make a batch decide exactly what the one-at-a-time path would
//! for the same order (`tests/all/batch.rs` holds them as properties):
//!
//! - each decision sees what the ones before it left, and a refused one
//!   leaves the quota as it found it. The rules this is run with
//!   (`admission::charge_within`, `borrow::charge_or_request`,
//!   `admission::release`) check before they change anything, so a refusal
//!   needs no copy of the quota (a copy per decision would cost as much as
//!   the ledger is long);
//! - nobody is answered before the write is known: when it fails, every
//!   decision of the batch gets the failure, and no one is told allowed.

/// One decision: whether it changed the quota, and what its caller is
/// told; or its refusal.
pub type Verdict<A, E> = Result<(bool, A), E>;

/// What a batch decided, in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Decided<A, E> {
    pub verdicts: Vec<Verdict<A, E>>,
}

impl<A, E> Decided<A, E> {
    /// Whether any decision changed the quota (then there is a write).
    pub fn changed(&self) -> bool {
        self.verdicts.iter().any(|v| matches!(v, Ok((true, _))))
    }

    /// Whether any decision was a refusal.
    pub fn refused(&self) -> bool {
        self.verdicts.iter().any(Result::is_err)
    }

    /// The answers, once the write is known. `written` is `Ok` when the
    /// batch's write is durable, or when there was none to make and the
    /// version decided on was read fresh; then each caller gets its own
    /// verdict. Otherwise every caller gets the failure (`same` makes one
    /// copy of it each): a decision not to change anything, or a refusal,
    /// made on a version the write did not prove current is not an answer
    /// either.
    pub fn answer(self, written: Result<(), E>, same: impl Fn(&E) -> E) -> Vec<Result<A, E>> {
        match written {
            Ok(()) => self
                .verdicts
                .into_iter()
                .map(|v| v.map(|(_, a)| a))
                .collect(),
            Err(e) => self.verdicts.iter().map(|_| Err(same(&e))).collect(),
        }
    }
}

/// Decides `jobs` in order on `quota`, each on what the ones before it
/// left. `decide` must leave the quota as it found it when it refuses (see
/// the module's doc); what it changes when it accepts is kept for the next.
pub fn decide_in_order<T, J, A, E>(
    quota: &mut T,
    jobs: &mut [J],
    mut decide: impl FnMut(&mut J, &mut T) -> Verdict<A, E>,
) -> Decided<A, E> {
    Decided {
        verdicts: jobs.iter_mut().map(|j| decide(j, quota)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_answers_every_caller_with_the_failure() {
        let mut n = 0;
        let mut jobs = [1, 2, 100, 3];
        let d = decide_in_order(&mut n, &mut jobs, |j, n| {
            if *n + *j > 10 {
                return Err("full".to_string());
            }
            *n += *j;
            Ok((true, *n))
        });
        assert_eq!(
            d.verdicts,
            vec![
                Ok((true, 1)),
                Ok((true, 3)),
                Err("full".into()),
                Ok((true, 6))
            ]
        );
        assert!(d.changed() && d.refused());
        let answers = d.answer(Err("disk".to_string()), |e| e.clone());
        assert_eq!(answers, vec![Err("disk".to_string()); 4]);
    }

    #[test]
    fn a_durable_write_answers_each_caller_its_own_verdict() {
        let mut n = 0;
        let mut jobs = [4, 7, 2];
        let d = decide_in_order(&mut n, &mut jobs, |j, n| {
            if *n + *j > 10 {
                return Err(*j);
            }
            *n += *j;
            Ok((true, *n))
        });
        assert_eq!(n, 6);
        assert_eq!(d.answer(Ok(()), |e| *e), vec![Ok(4), Err(7), Ok(6)]);
    }
}
