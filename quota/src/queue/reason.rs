//! Why a queued entry waits, as people read it in `status.queue`, Events
//! and the portal (docs/queueing.md §5): `waits for 4 ×
//! requests.nvidia.com/gpu.A100: 2 free, 6 needed`, `waits for card-hours
//! of cash/requests.nvidia.com/gpu: needs 24, 20 left`. Amounts go through
//! `readable`.

use crate::budget::BudgetDenial;
use crate::object::queue::Waiting;
use crate::quantity::Quantity;
use crate::readable;
use std::fmt;

/// One key an entry is short of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub key: String,
    /// What admission could still give on the key: its ceiling − used
    /// (free now and borrowable together).
    pub free: Quantity,
    /// The part of `free` that is a loan: beyond hard, up to the ceiling
    /// its queue plans on (`quota::rollup`'s "borrowable now"); zero when
    /// the quota does not borrow.
    pub borrowable: Quantity,
    /// What the entry asks of the key.
    pub needed: Quantity,
}

impl Need {
    /// needed − free: what must free up first.
    pub fn short(&self) -> Quantity {
        self.needed.saturating_sub(self.free).max(Quantity::ZERO)
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = readable::amount(&self.key, self.short());
        // `4 × nvidia.com/gpu`, but `4 GiB of requests.memory`.
        let joint = if short.ends_with(" GiB") { "of" } else { "×" };
        let amount = |q: Quantity| readable::amount(&self.key, q);
        write!(f, "waits for {short} {joint} {}: ", self.key)?;
        // Free now and borrowable as the quota's page shows them: `2 free
        // now, 4 more to borrow`, not `6 free` where the card says 2 left.
        let borrowable = self.borrowable.max(Quantity::ZERO).min(self.free);
        if borrowable.nanos() > 0 {
            write!(
                f,
                "{} free now, {} more to borrow",
                amount(self.free.saturating_sub(borrowable)),
                amount(borrowable)
            )?;
        } else {
            write!(f, "{} free", amount(self.free))?;
        }
        write!(f, ", {} needed", amount(self.needed))
    }
}

/// Why an entry waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Short of these keys.
    Quota(Vec<Need>),
    /// A budget refuses it for now.
    Budget(BudgetDenial),
    /// It would fit, but `head` is ahead of it, does not fit and blocks.
    Turn { head: String },
    /// It can never be admitted as things stand (see `Waiting::Never`).
    Never(String),
    /// It would fit on a loan, but a sibling waits with a smaller share
    /// of the parent's idle capacity and the room cannot hold both
    /// (fair sharing, `crate::fair::allot`).
    Fair(FairTurn),
}

/// Why a borrowing entry leaves the idle room to a sibling, for people:
/// `waits for its fair turn: research-cv would hold 1.6× its fair share
/// of requests.cpu with it; vision goes first (smaller share)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FairTurn {
    /// The quota the entry waits in.
    pub quota: String,
    /// Its dominant key once the entry is admitted.
    pub key: String,
    /// How many times its fair line (lendable × weight ÷ Σ weights) it
    /// would hold, in tenths; none when it cannot be told (weight 0).
    pub times_tenths: Option<u128>,
    /// The sibling whose head goes first.
    pub rival: String,
}

impl fmt::Display for FairTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "waits for its fair turn: {} would hold ", self.quota)?;
        match self.times_tenths {
            Some(t) => write!(f, "{}.{}× its fair share", t / 10, t % 10)?,
            None => f.write_str("more than its fair share (weight 0 borrows last)")?,
        }
        write!(
            f,
            " of {} with it; {} goes first (smaller share)",
            self.key, self.rival
        )
    }
}

impl Reason {
    pub fn waiting(&self) -> Waiting {
        match self {
            Reason::Quota(_) => Waiting::Quota,
            Reason::Budget(_) => Waiting::Budget,
            Reason::Turn { .. } | Reason::Fair(_) => Waiting::Turn,
            Reason::Never(_) => Waiting::Never,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Quota(needs) => {
                for (i, n) in needs.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{n}")?;
                }
                Ok(())
            }
            Reason::Budget(d) => budget(f, d),
            Reason::Turn { head } => write!(f, "waits its turn behind {head}"),
            Reason::Never(why) => write!(f, "cannot be admitted: {why}"),
            Reason::Fair(t) => write!(f, "{t}"),
        }
    }
}

/// `waits for card-hours of cash/…: needs 24, 20 left`: which budget, in
/// its unit, so a wait for budget never reads like a wait for quota.
fn budget(f: &mut fmt::Formatter<'_>, d: &BudgetDenial) -> fmt::Result {
    let n = match d {
        BudgetDenial::Short(n) | BudgetDenial::Cap(n) | BudgetDenial::Spent(n) => n,
        // Not a wait (see admit.rs), but say it plainly if shown.
        BudgetDenial::NoRunTime { .. } => return write!(f, "{d}"),
    };
    write!(
        f,
        "waits for {} of {}: ",
        crate::keys::cash_unit(&n.key),
        n.key
    )?;
    let num = |q: Quantity| readable::grouped(q.max(Quantity::ZERO));
    match d {
        BudgetDenial::Short(_) => write!(f, "needs {}, {} left", num(n.needs), num(n.left)),
        BudgetDenial::Cap(_) => write!(
            f,
            "needs {}, open reservations hold {} of the {} they may hold at once",
            num(n.needs),
            num(n.reserved),
            num(n.cap)
        ),
        _ => write!(
            f,
            "nothing left of {} ({} spent, {} reserved)",
            num(n.available),
            num(n.spent),
            num(n.reserved)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(key: &str, free: i64, needed: i64) -> Need {
        Need {
            key: key.into(),
            free: Quantity::from_units(free),
            borrowable: Quantity::ZERO,
            needed: Quantity::from_units(needed),
        }
    }

    #[test]
    fn quota_reasons_read_as_the_issue_writes_them() {
        let r = Reason::Quota(vec![need("requests.nvidia.com/gpu.A100", 2, 6)]);
        assert_eq!(
            r.to_string(),
            "waits for 4 × requests.nvidia.com/gpu.A100: 2 free, 6 needed"
        );
        let mem = Need {
            key: "requests.memory".into(),
            free: Quantity::from_units(2 << 30),
            borrowable: Quantity::ZERO,
            needed: Quantity::from_units(6 << 30),
        };
        let r = Reason::Quota(vec![need("requests.cpu", 0, 1500), mem]);
        assert_eq!(
            r.to_string(),
            "waits for 1,500 × requests.cpu: 0 free, 1,500 needed; \
             waits for 4 GiB of requests.memory: 2 GiB free, 6 GiB needed"
        );
        assert_eq!(r.waiting(), Waiting::Quota);
    }

    /// Issue 31: the room a borrower has is said as the page says it, free
    /// now and borrowable apart, never one "14 free" where the card shows
    /// 6 left.
    #[test]
    fn a_borrower_reads_free_now_and_more_to_borrow() {
        let n = Need {
            borrowable: Quantity::from_units(8),
            ..need("requests.nvidia.com/gpu.A100", 14, 16)
        };
        assert_eq!(
            n.to_string(),
            "waits for 2 × requests.nvidia.com/gpu.A100: 6 free now, 8 more to borrow, \
             16 needed"
        );
        // Over hard already (borrowing): nothing free now, the rest a loan.
        let n = Need {
            borrowable: Quantity::from_units(3),
            ..need("requests.nvidia.com/gpu", 3, 4)
        };
        assert_eq!(
            n.to_string(),
            "waits for 1 × requests.nvidia.com/gpu: 0 free now, 3 more to borrow, 4 needed"
        );
    }

    #[test]
    fn a_fair_turn_says_whose_share_and_who_goes_first() {
        let r = Reason::Fair(FairTurn {
            quota: "research-cv".into(),
            key: "requests.cpu".into(),
            times_tenths: Some(16),
            rival: "vision".into(),
        });
        assert_eq!(
            r.to_string(),
            "waits for its fair turn: research-cv would hold 1.6× its fair share of \
             requests.cpu with it; vision goes first (smaller share)"
        );
        assert_eq!(r.waiting(), Waiting::Turn);
    }

    #[test]
    fn budget_reasons_say_which_wait() {
        use crate::budget::reserve::Numbers;
        let n = Numbers {
            quota: "nlp".into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            needs: Quantity::from_units(24),
            left: Quantity::from_units(20),
            ..Default::default()
        };
        let r = Reason::Budget(BudgetDenial::Short(Box::new(n)));
        assert_eq!(
            r.to_string(),
            "waits for card-hours of cash/requests.nvidia.com/gpu: needs 24, 20 left"
        );
        assert_eq!(r.waiting(), Waiting::Budget);
    }
}
