//! What people do to alerts, shared by the portal and the JSON API:
//! acknowledge or snooze one (authorised, audited), and count the ones
//! that ask for someone now (the navigation's badge).

use super::audit::Audited;
use super::quota_ops::{records_scope, tree_for, ChangeError};
use super::ServiceError;
use crate::authz::{self, Principal};
use crate::store::alerts::AlertFilter;
use crate::store::audit::action;

/// How long an alert may be snoozed, in hours: the choices people have.
pub const SNOOZE_HOURS: [i64; 4] = [1, 4, 24, 168];

/// What quieting an alert does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    Ack,
    /// For so many hours, one of [`SNOOZE_HOURS`].
    Snooze(i64),
}

impl Quiet {
    /// A snooze of `hours`, if it is one of the choices.
    pub fn snooze(hours: i64) -> Result<Quiet, String> {
        if SNOOZE_HOURS.contains(&hours) {
            Ok(Quiet::Snooze(hours))
        } else {
            Err(format!(
                "snooze for {hours} hours is not offered: 1, 4, 24 or 168 hours"
            ))
        }
    }
}

/// Open alerts on the quotas `p` may see that ask for someone now (not
/// acknowledged, not snoozed): one COUNT, whatever the size of the tree.
pub async fn open_count(a: &Audited, p: &Principal) -> Result<usize, ServiceError> {
    let f = AlertFilter {
        open: Some(true),
        quotas_in: records_scope(&a.service, p).await?,
        loud_at: Some(a.service.now()),
        ..AlertFilter::default()
    };
    Ok(a.sql.count_alerts(&f).await? as usize)
}

/// Acknowledges or snoozes alert `id` for `p`, audited; the sentence that
/// says what was done. Who may: an admin, or an owner of the alert's quota
/// (who may also set its rules); anyone else who may see it is refused
/// (403), anyone who may not gets 404 as for no such alert. A resolved
/// alert is a conflict (409): there is nothing left to quiet.
pub async fn quiet(a: &Audited, p: &Principal, id: i64, how: Quiet) -> Result<String, ChangeError> {
    let missing = || ServiceError::NotFound(format!("alert {id} not found"));
    let alert = a
        .sql
        .alert(id)
        .await
        .map_err(ServiceError::from)?
        .ok_or_else(missing)?;
    if !p.is_admin {
        let tree = tree_for(a, p).await?;
        if !authz::can_view(p, &alert.quota, &tree) {
            return Err(missing().into());
        }
        if !authz::can_set_alert_rules(p, &alert.quota, &tree) {
            return Err(ChangeError::Forbidden(format!(
                "only an owner of {} (or an admin) may acknowledge or snooze its alerts",
                alert.quota
            )));
        }
    }
    let now = a.service.now();
    let actor = p.actor().to_string();
    let (done, what, sentence) = match how {
        Quiet::Ack => (
            a.sql.ack_alert(id, &actor, now).await,
            action::ALERT_ACK,
            format!("alert {id} on {} acknowledged", alert.quota),
        ),
        Quiet::Snooze(hours) => {
            let until = now + hours * 3_600_000;
            (
                a.sql.snooze_alert(id, &actor, until).await,
                action::ALERT_SNOOZE,
                format!(
                    "alert {id} on {} snoozed until {}",
                    alert.quota,
                    quota::time::format_when(until)
                ),
            )
        }
    };
    if !done.map_err(ServiceError::from)? {
        return Err(ServiceError::Conflict(format!(
            "alert {id} is resolved: there is nothing to acknowledge or snooze"
        ))
        .into());
    }
    a.audit(
        p,
        what,
        &alert.quota,
        None,
        Some(serde_json::json!({"alert": id, "message": alert.message})),
        &sentence,
    )
    .await;
    Ok(sentence)
}
