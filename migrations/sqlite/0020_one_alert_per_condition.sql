-- One alert per quota and condition: a usage threshold, over quota, a
-- budget's forecast or an allocation notice crossed on several keys at
-- once is one alert that lists its keys (`keys`, a JSON array, GPUs first
-- once the engine has written it), identified while open by kind, quota
-- and level (the key left out of its fingerprint).
--
-- Open alerts of one quota, kind and level that were one per key become
-- one new alert: opened when the first of them opened, its keys theirs,
-- acknowledged only if every one was (by the latest acknowledgement),
-- else snoozed only if every one not acknowledged was (until the first of
-- them wakes). Each old alert is kept as it was, acknowledgement and
-- snooze included, resolved now with `merged_into` naming the new one;
-- the engine's next evaluation rewrites the new alert's title and figures.
-- A condition with one open alert keeps it (its id too), and resolved
-- alerts stay as history, both under the new fingerprint. The open ones,
-- new or kept, name no key (`key` empty) until that evaluation names the
-- worst: it always finds them changed, so none keeps the figures of the
-- one key it was, and (no worst named) the rewrite asks nobody again.
ALTER TABLE alerts ADD COLUMN keys TEXT NOT NULL DEFAULT '[]';
ALTER TABLE alerts ADD COLUMN merged_into BIGINT NULL;

-- An open alert of these kinds without a key already has the new
-- fingerprint; beside other open alerts of its condition it would take the
-- merged alert's place in the unique index of open fingerprints and stop
-- this migration. It is merged like them (its fingerprint made its own
-- until then, its empty key left out of the merged alert's keys).
UPDATE alerts SET fingerprint = fingerprint || '#' || CAST(id AS TEXT)
WHERE resolved_at IS NULL AND key = ''
  AND kind IN ('threshold', 'over_quota', 'cash_forecast', 'allocation')
  AND EXISTS (SELECT 1 FROM alerts o WHERE o.resolved_at IS NULL AND o.kind = alerts.kind
      AND o.quota = alerts.quota AND o.level = alerts.level AND o.id <> alerts.id);

UPDATE alerts SET keys = json_array(key),
    key = CASE WHEN resolved_at IS NULL THEN '' ELSE key END, fingerprint = kind || '|' || quota || '||' || level
WHERE kind IN ('threshold', 'over_quota', 'cash_forecast', 'allocation') AND key <> ''
  AND (resolved_at IS NOT NULL
       OR (SELECT COUNT(*) FROM alerts o WHERE o.resolved_at IS NULL AND o.kind = alerts.kind
           AND o.quota = alerts.quota AND o.level = alerts.level) = 1);

INSERT INTO alerts (fingerprint, kind, quota, key, level, message, numbers, opened_at,
    opened_seen_at, keys, acked_by, acked_at, snoozed_until, snoozed_by)
SELECT g.kind || '|' || g.quota || '||' || g.level, g.kind, g.quota, '', g.level,
    g.message, '{}', g.opened_at, g.seen_at, g.keys,
    CASE WHEN g.acked = g.n THEN (SELECT m.acked_by FROM alerts m WHERE m.resolved_at IS NULL
        AND m.kind = g.kind AND m.quota = g.quota AND m.level = g.level
        ORDER BY m.acked_at DESC, m.id DESC LIMIT 1) END,
    CASE WHEN g.acked = g.n THEN g.last_ack END,
    CASE WHEN g.acked < g.n AND g.acked + g.snoozed = g.n THEN g.wakes END,
    CASE WHEN g.acked < g.n AND g.acked + g.snoozed = g.n THEN (SELECT m.snoozed_by
        FROM alerts m WHERE m.resolved_at IS NULL AND m.kind = g.kind AND m.quota = g.quota
        AND m.level = g.level AND m.acked_at IS NULL ORDER BY m.snoozed_until, m.id LIMIT 1) END
FROM (SELECT kind, quota, level, COUNT(*) AS n, COUNT(acked_at) AS acked,
        SUM(CASE WHEN acked_at IS NULL AND snoozed_until IS NOT NULL THEN 1 ELSE 0 END) AS snoozed,
        MIN(CASE WHEN acked_at IS NULL THEN snoozed_until END) AS wakes,
        MAX(acked_at) AS last_ack, MIN(opened_at) AS opened_at,
        MAX(COALESCE(opened_seen_at, opened_at)) AS seen_at,
        CAST(COUNT(*) AS TEXT) || ' keys: ' || group_concat(message, '; ') AS message,
        json_group_array(key) FILTER (WHERE key <> '') AS keys
      FROM alerts
      WHERE resolved_at IS NULL AND kind IN ('threshold', 'over_quota', 'cash_forecast', 'allocation')
      GROUP BY kind, quota, level
      HAVING COUNT(*) > 1) g;

UPDATE alerts SET
    merged_into = (SELECT n.id FROM alerts n WHERE n.resolved_at IS NULL
        AND n.fingerprint = alerts.kind || '|' || alerts.quota || '||' || alerts.level),
    resolved_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000,
    resolved_seen_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000
WHERE resolved_at IS NULL AND kind IN ('threshold', 'over_quota', 'cash_forecast', 'allocation')
  AND fingerprint <> kind || '|' || quota || '||' || level;
