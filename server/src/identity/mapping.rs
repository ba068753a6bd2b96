//! Groups become roles (pure): the rules (`team-nlp` → member of `nlp`,
//! `nlp-leads` → owner of `nlp`, `ml-platform-admins` → admin), what a
//! person's groups give by them, and the changes that bring a person's
//! roles there.
//!
//! A role has a source: given by hand (an admin on `/users`, an owner
//! inviting) or by the mapping. The mapping adds and removes only its own:
//! a role given by hand on a quota stands whatever the groups say (the
//! mapping neither raises nor lowers it), and an admin made by hand stays
//! one. So removing someone from a group takes away exactly what the group
//! gave, and nothing an admin decided.
//!
//! The rules come from two places, applied together: those admins keep in
//! the portal (`/groups`) and those of a file (`--oidc-group-roles`, a
//! ConfigMap for GitOps), read-only in the portal.

use crate::authz::{Role, Source};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The longest group name a rule may name (as `oidc::claims::MAX_GROUP`).
pub const MAX_GROUP: usize = 256;
/// Rules a file may hold.
pub const MAX_RULES: usize = 10_000;

/// What a group gives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grant {
    Admin,
    On { quota: String, role: Role },
}

impl Grant {
    /// `admin`, `owner`, `member`.
    pub fn role_name(&self) -> &'static str {
        match self {
            Grant::Admin => "admin",
            Grant::On { role, .. } => role.as_str(),
        }
    }

    /// The quota, "" for admin.
    pub fn quota(&self) -> &str {
        match self {
            Grant::Admin => "",
            Grant::On { quota, .. } => quota,
        }
    }

    /// From a role name and a quota ("" for admin), checked.
    pub fn parse(role: &str, quota: &str) -> Result<Grant, String> {
        let quota = quota.trim();
        match role {
            "admin" if quota.is_empty() => Ok(Grant::Admin),
            "admin" => Err("an admin rule names no quota: admins hold every quota".into()),
            r => {
                let role = Role::parse(r)
                    .ok_or_else(|| format!("'{r}' is not a role: admin, owner or member"))?;
                if quota.is_empty() {
                    return Err(format!("a {role} rule names its quota"));
                }
                quota::tree::validate_name(quota).map_err(|e| e.to_string())?;
                Ok(Grant::On {
                    quota: quota.to_string(),
                    role,
                })
            }
        }
    }
}

/// One rule: members of `group` get `grant`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    pub group: String,
    pub grant: Grant,
}

/// A group name as a rule may hold it: 1–256 bytes, no control character.
pub fn check_group(group: &str) -> Result<&str, String> {
    let g = group.trim();
    if g.is_empty() || g.len() > MAX_GROUP {
        return Err(format!("a group name has 1 to {MAX_GROUP} bytes"));
    }
    if let Some(c) = quota::text::hostile_char(g) {
        return Err(format!(
            "the group name holds {}, which no group name holds",
            quota::text::describe(c)
        ));
    }
    Ok(g)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRule {
    group: String,
    role: String,
    #[serde(default)]
    quota: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    group_roles: Vec<FileRule>,
}

/// The rules of a file (YAML or JSON):
///
/// ```yaml
/// groupRoles:
///   - {group: ml-platform-admins, role: admin}
///   - {group: team-nlp, role: member, quota: nlp}
///   - {group: nlp-leads, role: owner, quota: nlp}
/// ```
///
/// Refused whole, naming the rule, when any rule is wrong: a half-read
/// file would take roles away.
pub fn parse_file(text: &str) -> Result<Vec<Rule>, String> {
    let f: File = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if f.group_roles.len() > MAX_RULES {
        return Err(format!("more than {MAX_RULES} rules"));
    }
    let mut rules = Vec::with_capacity(f.group_roles.len());
    for (i, r) in f.group_roles.into_iter().enumerate() {
        let at = |e: String| format!("groupRoles[{i}]: {e}");
        let group = check_group(&r.group).map_err(at)?.to_string();
        let grant = Grant::parse(r.role.trim(), &r.quota).map_err(at)?;
        rules.push(Rule { group, grant });
    }
    rules.sort();
    rules.dedup();
    Ok(rules)
}

/// What a person's groups give by the rules: admin or not (and by which
/// group), and per quota the strongest role with the group that gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    pub admin: Option<String>,
    pub on: BTreeMap<String, (Role, String)>,
}

/// The roles `groups` give by `rules`, on quotas that exist.
pub fn desired<'a>(
    rules: impl IntoIterator<Item = &'a Rule>,
    groups: &[String],
    exists: impl Fn(&str) -> bool,
) -> Desired {
    let mut d = Desired::default();
    for r in rules {
        if !groups.contains(&r.group) {
            continue;
        }
        match &r.grant {
            Grant::Admin => {
                d.admin.get_or_insert_with(|| r.group.clone());
            }
            Grant::On { quota, role } => {
                if !exists(quota) {
                    continue;
                }
                match d.on.get(quota) {
                    Some((have, _)) if have >= role => {}
                    _ => {
                        d.on.insert(quota.clone(), (*role, r.group.clone()));
                    }
                }
            }
        }
    }
    d
}

/// A person's roles as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Current {
    /// Admin, and who made it so.
    pub admin: Option<Source>,
    pub on: BTreeMap<String, (Role, Source)>,
}

/// One change the mapping makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    MakeAdmin {
        group: String,
    },
    DropAdmin,
    Bind {
        quota: String,
        role: Role,
        group: String,
        /// The mapping's role it replaces there.
        before: Option<Role>,
    },
    Unbind {
        quota: String,
        role: Role,
    },
}

/// What brings `current` to `desired`, touching only what the mapping gave.
pub fn changes(current: &Current, desired: &Desired) -> Vec<Change> {
    let mut out = Vec::new();
    match (&desired.admin, current.admin) {
        (Some(group), None) => out.push(Change::MakeAdmin {
            group: group.clone(),
        }),
        (None, Some(Source::Mapping)) => out.push(Change::DropAdmin),
        _ => {}
    }
    for (quota, (role, group)) in &desired.on {
        match current.on.get(quota) {
            None => out.push(Change::Bind {
                quota: quota.clone(),
                role: *role,
                group: group.clone(),
                before: None,
            }),
            Some((had, Source::Mapping)) if had != role => out.push(Change::Bind {
                quota: quota.clone(),
                role: *role,
                group: group.clone(),
                before: Some(*had),
            }),
            _ => {}
        }
    }
    for (quota, (role, source)) in &current.on {
        if *source == Source::Mapping && !desired.on.contains_key(quota) {
            out.push(Change::Unbind {
                quota: quota.clone(),
                role: *role,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<Rule> {
        parse_file(
            "groupRoles:\n\
             - {group: ml-platform-admins, role: admin}\n\
             - {group: team-nlp, role: member, quota: nlp}\n\
             - {group: nlp-leads, role: owner, quota: nlp}\n\
             - {group: team-cv, role: member, quota: cv}\n\
             - {group: team-gone, role: member, quota: gone}\n",
        )
        .unwrap()
    }

    fn groups(g: &[&str]) -> Vec<String> {
        g.iter().map(|s| s.to_string()).collect()
    }

    fn exists(q: &str) -> bool {
        q != "gone"
    }

    #[test]
    fn groups_give_the_strongest_role_per_quota_on_quotas_that_exist() {
        let d = desired(
            &rules(),
            &groups(&["team-nlp", "nlp-leads", "team-gone", "other"]),
            exists,
        );
        assert_eq!(d.admin, None);
        assert_eq!(d.on.len(), 1);
        assert_eq!(d.on["nlp"], (Role::Owner, "nlp-leads".into()));
        let d = desired(
            &rules(),
            &groups(&["ml-platform-admins", "team-cv"]),
            exists,
        );
        assert_eq!(d.admin.as_deref(), Some("ml-platform-admins"));
        assert_eq!(d.on["cv"], (Role::Member, "team-cv".into()));
        assert_eq!(desired(&rules(), &[], exists), Desired::default());
    }

    #[test]
    fn the_mapping_changes_only_what_it_gave() {
        let hand_nlp = Current {
            admin: Some(Source::Hand),
            on: [("nlp".to_string(), (Role::Member, Source::Hand))].into(),
        };
        // Hand roles stand: no raise on nlp, no admin dropped.
        let d = desired(&rules(), &groups(&["nlp-leads"]), exists);
        assert_eq!(changes(&hand_nlp, &d), vec![]);
        assert_eq!(changes(&hand_nlp, &Desired::default()), vec![]);
        // The mapping's own: raised, lowered, removed, admin given and taken.
        let mapped = Current {
            admin: Some(Source::Mapping),
            on: [
                ("nlp".to_string(), (Role::Member, Source::Mapping)),
                ("cv".to_string(), (Role::Member, Source::Mapping)),
            ]
            .into(),
        };
        assert_eq!(
            changes(&mapped, &d),
            vec![
                Change::DropAdmin,
                Change::Bind {
                    quota: "nlp".into(),
                    role: Role::Owner,
                    group: "nlp-leads".into(),
                    before: Some(Role::Member)
                },
                Change::Unbind {
                    quota: "cv".into(),
                    role: Role::Member
                },
            ]
        );
        let d = desired(
            &rules(),
            &groups(&["ml-platform-admins", "team-cv"]),
            exists,
        );
        assert_eq!(
            changes(&Current::default(), &d),
            vec![
                Change::MakeAdmin {
                    group: "ml-platform-admins".into()
                },
                Change::Bind {
                    quota: "cv".into(),
                    role: Role::Member,
                    group: "team-cv".into(),
                    before: None
                },
            ]
        );
        // In step already: nothing.
        let now = Current {
            admin: Some(Source::Mapping),
            on: [("cv".to_string(), (Role::Member, Source::Mapping))].into(),
        };
        assert_eq!(changes(&now, &d), vec![]);
    }

    #[test]
    fn a_file_is_refused_whole_naming_the_wrong_rule() {
        for (text, says) in [
            (
                "groupRoles:\n- {group: a, role: admin, quota: nlp}\n",
                "groupRoles[0]: an admin rule",
            ),
            (
                "groupRoles:\n- {group: a, role: admin}\n- {group: b, role: owner}\n",
                "groupRoles[1]: a owner rule names its quota",
            ),
            (
                "groupRoles:\n- {group: a, role: boss, quota: nlp}\n",
                "'boss' is not a role",
            ),
            (
                "groupRoles:\n- {group: '', role: admin}\n",
                "1 to 256 bytes",
            ),
            (
                "groupRoles:\n- {group: \"a\\u0000\", role: admin}\n",
                "groupRoles[0]: the group name holds",
            ),
            (
                "groupRoles:\n- {group: a, role: member, quota: 'Not A Name'}\n",
                "groupRoles[0]",
            ),
            (
                "groupRoles:\n- {group: a, role: admin, extra: 1}\n",
                "unknown field",
            ),
            ("rules: []\n", "unknown field"),
        ] {
            let e = parse_file(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        // JSON is YAML too; repeats collapse.
        let r = parse_file(r#"{"groupRoles": [{"group": "a", "role": "member", "quota": "nlp"}, {"group": "a", "role": "member", "quota": "nlp"}]}"#).unwrap();
        assert_eq!(r.len(), 1);
    }
}
