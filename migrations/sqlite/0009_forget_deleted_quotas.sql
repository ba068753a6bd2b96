-- A deleted quota takes its role bindings and alert rules with it, in the
-- deleting transaction, so a later quota of the same name starts with none.
-- Each removal is audited (actor 'bizrq'), as the controller does in
-- cluster mode (`SqlStore::forget_quota`), where quotas are not rows here.
CREATE TRIGGER quotas_forget_deleted AFTER DELETE ON quotas
BEGIN
    INSERT INTO audit_log (at_ms, actor, action, target, before, after, detail)
        SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), 'bizrq', 'role.remove',
               b.quota, json_object('quota', b.quota, 'role', b.role, 'user', u.username), NULL,
               u.username || ' is no longer ' || b.role || ' of ' || b.quota || ': the quota was deleted'
          FROM role_bindings b JOIN users u ON u.id = b.user_id
         WHERE b.quota = OLD.name
         ORDER BY u.username;
    DELETE FROM role_bindings WHERE quota = OLD.name;
    INSERT INTO audit_log (at_ms, actor, action, target, before, after, detail)
        SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), 'bizrq', 'alert.rule',
               r.quota, json_object('crit_percent', r.crit_percent,
                                    'forecast_horizon_hours', r.forecast_horizon_hours,
                                    'key', r.key, 'quota', r.quota, 'warn_percent', r.warn_percent),
               NULL, 'alert rule for ' || r.key || ' on ' || r.quota || ' removed: the quota was deleted'
          FROM alert_rules r
         WHERE r.quota = OLD.name
         ORDER BY r.key;
    DELETE FROM alert_rules WHERE quota = OLD.name;
END;
