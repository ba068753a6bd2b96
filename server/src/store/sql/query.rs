//! Placeholders and encodings every SQL statement of the store shares: a
//! statement's parameter lists for either database (`Params`,
//! `values_list`, `params_list`) and how a QoS class is stored
//! (`qos_text`).

use super::pool::Backend;
use quota::usage::QosClass;

/// How a statement writes its parameters on the database at hand. `$n`
/// serves both, but SQLite finds a named parameter by walking the list of
/// all of them, and sqlx asks it for every parameter's name as it binds:
/// a statement of n `$n` parameters costs O(n²) to bind, which dominates
/// the ledger benchmark's profile at thousands a statement
/// (`sqlite3_bind_parameter_name`; docs/benchmarks.md, "Budget ledger and reports"). Anonymous `?`, which PostgreSQL
/// refuses, are bound by position at no such cost; sqlx numbers them
/// apart from `$n`, so they serve only a statement whose every parameter
/// is in the one list (`values_list`, `Params::list`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) enum Params {
    Numbered,
    Anonymous,
}

impl Params {
    pub(in crate::store) fn of(conn: &sqlx::AnyConnection) -> Params {
        if conn.backend_name().eq_ignore_ascii_case("sqlite") {
            Params::Anonymous
        } else {
            Params::Numbered
        }
    }

    pub(in crate::store) fn on(backend: Backend) -> Params {
        match backend {
            Backend::Sqlite => Params::Anonymous,
            Backend::Postgres => Params::Numbered,
        }
    }

    /// `$1, $2, $3` (or `?, ?, ?`): a statement's only parameters.
    pub(in crate::store) fn list(self, n: usize) -> String {
        match self {
            Params::Numbered => params_list(1, n),
            Params::Anonymous => vec!["?"; n].join(", "),
        }
    }
}

/// `($1, $2, $3), ($4, $5, $6)` for 2 rows of 3 columns (`?` each on
/// SQLite: `Params`), a statement's only parameters.
/// Not `sqlx::QueryBuilder::push_values`: through the `Any` driver it
/// writes `?` placeholders whatever the database, which PostgreSQL refuses.
pub(in crate::store) fn values_list(params: Params, rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            match params {
                Params::Numbered => {
                    out.push('$');
                    out.push_str(&(r * cols + c + 1).to_string());
                }
                Params::Anonymous => out.push('?'),
            }
        }
        out.push(')');
    }
    out
}

/// `$4, $5, $6` for 3 parameters from the 4th.
pub(in crate::store) fn params_list(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(in crate::store) fn qos_text(q: QosClass) -> &'static str {
    match q {
        QosClass::Guaranteed => "Guaranteed",
        QosClass::Burstable => "Burstable",
        QosClass::BestEffort => "BestEffort",
    }
}
