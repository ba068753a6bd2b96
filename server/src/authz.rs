//! Who may do what on the quota tree. Pure functions of a [`Principal`] and
//! the tree's shape ([`Tree`]: names → parents); no I/O. Every page and
//! every JSON API route asks these, so a rule lives in one place.
//!
//! - **admin**: everything.
//! - **owner** of X: sees X's subtree; creates, edits and deletes X's
//!   descendants (each carved from its parent's hard by the tree rules),
//!   but may not change X's own spec: raising one's own hard is for the
//!   owner of an ancestor, or an admin.
//! - **member** of X: sees X's subtree, changes nothing.
//!
//! A binding on X reaches X and every descendant of X; nothing above X.

use quota::lineage::Forest;
use quota::Quota;
use std::collections::BTreeSet;

/// A role on a quota's subtree. Ordered: `Owner` is more than `Member`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Member,
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Owner => "owner",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "member" => Some(Role::Member),
            "owner" => Some(Role::Owner),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who gave a role or an admin flag: by hand (an admin on `/users`, an
/// owner inviting) or by the group mapping of an identity provider
/// (`identity::mapping`), which adds and removes only its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Hand,
    Mapping,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Hand => "hand",
            Source::Mapping => "mapping",
        }
    }

    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "hand" => Some(Source::Hand),
            "mapping" => Some(Source::Mapping),
            _ => None,
        }
    }
}

/// A role on one quota (and so on its subtree).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    pub quota: String,
    pub role: Role,
}

/// How a principal proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// A portal session (cookie).
    Session,
    /// A personal API token; its id.
    Token(i64),
    /// The bootstrap admin token (`--admin-token`).
    AdminToken,
}

/// Who is asking: a user with its bindings, or the admin token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// None for the admin token, which is no user.
    pub user_id: Option<i64>,
    /// The username; `admin-token` for the admin token. Written to the
    /// audit log as the actor.
    pub username: String,
    pub is_admin: bool,
    pub bindings: Vec<Binding>,
    pub via: Credential,
}

/// The audit actor of the admin token.
pub const ADMIN_TOKEN_ACTOR: &str = "admin-token";

/// The audit actor of bizrq's own work: transfers it carries out, the
/// group mapping, sign-in and refresh, cleanup when a quota goes, the
/// price list reloaded, the bootstrap admin.
pub const SYSTEM_ACTOR: &str = "bizrq";

impl Principal {
    /// The bootstrap admin token: an admin with no user behind it.
    pub fn admin_token() -> Principal {
        Principal {
            user_id: None,
            username: ADMIN_TOKEN_ACTOR.to_string(),
            is_admin: true,
            bindings: Vec::new(),
            via: Credential::AdminToken,
        }
    }

    /// The name written to the audit log.
    pub fn actor(&self) -> &str {
        &self.username
    }
}

/// The longest portal username.
pub const MAX_USERNAME: usize = 64;

/// Names the audit log gives to actors that are not people
/// ([`SYSTEM_ACTOR`], [`ADMIN_TOKEN_ACTOR`]). No account may take one, or
/// its changes would read as the system's (docs/oidc.md).
pub const RESERVED_USERNAMES: [&str; 2] = [SYSTEM_ACTOR, ADMIN_TOKEN_ACTOR];

/// Whether `name` is one of [`RESERVED_USERNAMES`].
pub fn reserved_username(name: &str) -> bool {
    RESERVED_USERNAMES.contains(&name)
}

/// A portal username: 1–64 of lower-case letters, digits, '.', '_', '-'
/// and at most one '@' (an identity provider's email-like names), starting
/// with a letter or digit. Every username is a path segment of `/users/…`
/// and an audit target as it is.
pub fn valid_username(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_USERNAME
        && b[0].is_ascii_alphanumeric()
        && b.iter().filter(|c| **c == b'@').count() <= 1
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-@".contains(c))
}

/// The tree's shape: each quota's parent ("" for a root).
#[derive(Clone, Debug, Default)]
pub struct Tree {
    forest: Forest,
}

impl Tree {
    pub fn new<N: Into<String>, P: Into<String>>(pairs: impl IntoIterator<Item = (N, P)>) -> Tree {
        Tree {
            forest: Forest::new(pairs),
        }
    }

    pub fn from_quotas<'a>(quotas: impl IntoIterator<Item = &'a Quota>) -> Tree {
        Tree {
            forest: Forest::from_quotas(quotas),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.forest.contains(name)
    }

    /// The parent of a quota; None for a root or an unknown name.
    pub fn parent(&self, name: &str) -> Option<&str> {
        self.forest.parent(name)
    }

    /// The quota itself, then its parent, and so on up to a root; a
    /// corrupt cycle ends the walk (see `quota::lineage`).
    pub fn lineage<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.forest.line(name).names.into_iter()
    }

    /// Every quota name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.forest.names()
    }
}

/// The strongest role `p` holds on `quota` through a binding on it or on an
/// ancestor. Admins hold no role as such (see the `can_*` functions).
pub fn role_on(p: &Principal, quota: &str, tree: &Tree) -> Option<Role> {
    if p.bindings.is_empty() {
        return None;
    }
    tree.lineage(quota)
        .filter_map(|q| {
            p.bindings
                .iter()
                .filter(|b| b.quota == q)
                .map(|b| b.role)
                .max()
        })
        .max()
}

/// `p` held to the subtrees of `scope` (an API token's scope): on each
/// scope quota the role `p` has there (an admin's: owner), and `p`'s
/// bindings on quotas inside those subtrees; never an admin, nothing
/// outside. `tree` needs the lineage of the scope's quotas and of `p`'s
/// bindings only. A scope quota `p` holds no role on gives nothing.
pub fn scoped(p: &Principal, scope: &[String], tree: &Tree) -> Principal {
    let mut bindings: Vec<Binding> = Vec::new();
    for q in scope {
        let role = if p.is_admin {
            Some(Role::Owner)
        } else {
            role_on(p, q, tree)
        };
        if let Some(role) = role {
            bindings.push(Binding {
                quota: q.clone(),
                role,
            });
        }
    }
    for b in &p.bindings {
        let inside = tree
            .lineage(&b.quota)
            .skip(1)
            .any(|q| scope.iter().any(|s| s == q));
        if inside && !bindings.iter().any(|x| x.quota == b.quota) {
            bindings.push(b.clone());
        }
    }
    Principal {
        user_id: p.user_id,
        username: p.username.clone(),
        is_admin: false,
        bindings,
        via: p.via,
    }
}

/// May `p` see `quota` (its spec, status, audit entries)?
pub fn can_view(p: &Principal, quota: &str, tree: &Tree) -> bool {
    p.is_admin || role_on(p, quota, tree).is_some()
}

/// May `p` create, edit and delete children of `parent` (within the
/// parent's hard, which the tree rules enforce)? Owners of `parent` or of
/// an ancestor may; only admins may create roots (`parent` "").
pub fn can_manage_children(p: &Principal, parent: &str, tree: &Tree) -> bool {
    if p.is_admin {
        return true;
    }
    !parent.is_empty() && role_on(p, parent, tree) == Some(Role::Owner)
}

/// May `p` change `quota`'s spec (its hard, its max) or delete it? Only an
/// admin or the owner of a strict ancestor: an owner of `quota` itself may
/// not raise its own hard.
pub fn can_edit_hard(p: &Principal, quota: &str, tree: &Tree) -> bool {
    if p.is_admin {
        return true;
    }
    tree.parent(quota)
        .is_some_and(|parent| can_manage_children(p, parent, tree))
}

/// May `p` set `quota`'s alert rules? Its owners (also through an
/// ancestor) and admins: thresholds change who is told, not what is held.
pub fn can_set_alert_rules(p: &Principal, quota: &str, tree: &Tree) -> bool {
    p.is_admin || role_on(p, quota, tree) == Some(Role::Owner)
}

/// May `p` delete `quota`? The same as changing its spec.
pub fn can_delete(p: &Principal, quota: &str, tree: &Tree) -> bool {
    can_edit_hard(p, quota, tree)
}

/// May `p` give `role` on `quota` to someone (or take it away)? Admins
/// may give anything. An owner may give what it holds, below itself:
/// `member` anywhere in its subtree, `owner` on strict descendants only.
pub fn can_grant(p: &Principal, quota: &str, role: Role, tree: &Tree) -> bool {
    match role {
        Role::Member => can_manage_children(p, quota, tree),
        Role::Owner => can_edit_hard(p, quota, tree),
    }
}

/// May `p` set `user`'s role on `quota` to `new` when it holds `held`
/// there now? Both the role given and the one replaced must be `p`'s to
/// grant: an owner of X cannot turn a co-owner of X into a member (that
/// takes an admin or an owner of an ancestor of X).
pub fn can_replace(p: &Principal, quota: &str, held: Option<Role>, new: Role, tree: &Tree) -> bool {
    can_grant(p, quota, new, tree) && held.is_none_or(|old| can_grant(p, quota, old, tree))
}

/// May `p` see a transfer from `from` (None: from `to`'s parent) to `to`?
/// Those who see either end do (the parent's viewers see `to` too).
pub fn can_view_transfer(p: &Principal, from: Option<&str>, to: &str, tree: &Tree) -> bool {
    p.is_admin || from.is_some_and(|f| can_view(p, f, tree)) || can_view(p, to, tree)
}

/// May `p` ask for a transfer? It must own what pays: `from` (or an
/// ancestor of it), whatever the destination; asking `to`'s parent for
/// more (`from` None) takes an owner of `to`. Admins may ask anything.
pub fn can_request_transfer(p: &Principal, from: Option<&str>, to: &str, tree: &Tree) -> bool {
    p.is_admin || role_on(p, from.unwrap_or(to), tree) == Some(Role::Owner)
}

/// May `p` ask `to`'s parent for more budget (a top-up from the parent's
/// budget)? Anyone who sees `to`, a member too: a request moves nothing
/// until an owner of the parent (or an admin) approves it, and the
/// request caps (`MAX_OPEN_REQUESTS`, per hour) hold for members as for
/// owners. Moving quota, or a grant of new budget, stays an owner's ask.
pub fn can_ask_for_budget(p: &Principal, to: &str, tree: &Tree) -> bool {
    p.is_admin || can_view(p, to, tree)
}

/// May `p` approve or reject a transfer whose ends meet at `lca`? An admin,
/// or an owner of `lca` or of an ancestor of it (`quota::transfer::
/// approvers_scope`): whoever could move the amount by editing the quotas
/// under `lca` itself. `lca` None (its quotas are gone): admins only.
pub fn can_decide_transfer(p: &Principal, lca: Option<&str>, tree: &Tree) -> bool {
    p.is_admin || lca.is_some_and(|l| role_on(p, l, tree) == Some(Role::Owner))
}

/// The names of the quotas `p` may see.
pub fn visible_names(p: &Principal, tree: &Tree) -> BTreeSet<String> {
    tree.names()
        .filter(|q| can_view(p, q, tree))
        .map(str::to_string)
        .collect()
}

/// The quotas of `all` that `p` may see, in their order.
pub fn visible(p: &Principal, all: Vec<Quota>) -> Vec<Quota> {
    if p.is_admin {
        return all;
    }
    let tree = Tree::from_quotas(&all);
    all.into_iter()
        .filter(|q| can_view(p, q.name(), &tree))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_token_acts_only_inside_its_quotas_and_never_as_admin() {
        let t = tree();
        let p = user(&[
            ("ai", Role::Member),
            ("nlp-a", Role::Owner),
            ("ops", Role::Owner),
        ]);
        let s = scoped(&p, &["nlp".to_string()], &t);
        assert!(!s.is_admin);
        assert_eq!(
            role_on(&s, "nlp", &t),
            Some(Role::Member),
            "its role there, through ai"
        );
        assert_eq!(
            role_on(&s, "nlp-a1", &t),
            Some(Role::Owner),
            "a stronger binding inside"
        );
        assert!(!can_view(&s, "ai", &t) && !can_view(&s, "cv", &t) && !can_view(&s, "ops", &t));
        let mut admin = user(&[]);
        admin.is_admin = true;
        let s = scoped(&admin, &["cv".to_string(), "nope".to_string()], &t);
        assert!(!s.is_admin);
        assert_eq!(role_on(&s, "cv-a", &t), Some(Role::Owner));
        assert!(
            !can_edit_hard(&s, "cv", &t),
            "an admin's token on cv is an owner of cv"
        );
        assert!(!can_view(&s, "nlp", &t));
        // A quota the user holds no role on gives nothing.
        assert!(
            scoped(&user(&[("cv", Role::Member)]), &["nlp".to_string()], &t)
                .bindings
                .is_empty()
        );
    }

    #[test]
    fn usernames_are_plain_lower_case_names() {
        for ok in [
            "admin",
            "alice",
            "a.b-c_d",
            "7",
            "alice@example.com",
            "x".repeat(64).as_str(),
        ] {
            assert!(valid_username(ok), "{ok}");
        }
        for bad in [
            "",
            "Alice",
            "-x",
            ".x",
            "@x",
            "a@b@c",
            "a b",
            "a/b",
            "a+b@example.com",
            "é",
            "x".repeat(65).as_str(),
        ] {
            assert!(!valid_username(bad), "{bad}");
        }
    }

    /// ai ─┬─ nlp ─┬─ nlp-a ── nlp-a1
    ///     │       └─ nlp-b
    ///     └─ cv ──── cv-a
    /// ops (a second root)
    fn tree() -> Tree {
        Tree::new([
            ("ai", ""),
            ("nlp", "ai"),
            ("nlp-a", "nlp"),
            ("nlp-a1", "nlp-a"),
            ("nlp-b", "nlp"),
            ("cv", "ai"),
            ("cv-a", "cv"),
            ("ops", ""),
        ])
    }

    fn user(bindings: &[(&str, Role)]) -> Principal {
        Principal {
            user_id: Some(7),
            username: "u".into(),
            is_admin: false,
            bindings: bindings
                .iter()
                .map(|(q, r)| Binding {
                    quota: q.to_string(),
                    role: *r,
                })
                .collect(),
            via: Credential::Session,
        }
    }

    fn admin() -> Principal {
        Principal {
            is_admin: true,
            ..user(&[])
        }
    }

    const ALL: [&str; 8] = ["ai", "nlp", "nlp-a", "nlp-a1", "nlp-b", "cv", "cv-a", "ops"];

    fn allowed(f: impl Fn(&str) -> bool) -> Vec<&'static str> {
        ALL.into_iter().filter(|q| f(q)).collect()
    }

    #[test]
    fn an_owner_replaces_only_roles_it_could_grant() {
        let t = tree();
        let nlp_owner = user(&[("nlp", Role::Owner)]);
        let ai_owner = user(&[("ai", Role::Owner)]);
        use Role::*;
        assert!(can_replace(&nlp_owner, "nlp", None, Member, &t));
        assert!(can_replace(&nlp_owner, "nlp-a", Some(Member), Owner, &t));
        assert!(can_replace(&nlp_owner, "nlp-a", Some(Owner), Member, &t));
        assert!(
            !can_replace(&nlp_owner, "nlp", Some(Owner), Member, &t),
            "no demoting a co-owner"
        );
        assert!(!can_replace(&nlp_owner, "nlp", Some(Member), Owner, &t));
        assert!(can_replace(&ai_owner, "nlp", Some(Owner), Member, &t));
        assert!(can_replace(&admin(), "ai", Some(Owner), Member, &t));
    }

    #[test]
    fn lineage_walks_up_to_the_root_and_survives_cycles() {
        let t = tree();
        assert_eq!(
            t.lineage("nlp-a1").collect::<Vec<_>>(),
            ["nlp-a1", "nlp-a", "nlp", "ai"]
        );
        assert_eq!(t.lineage("ghost").collect::<Vec<_>>(), ["ghost"]);
        let cyclic = Tree::new([("a", "b"), ("b", "a")]);
        assert!(cyclic.lineage("a").count() <= 3);
    }

    #[test]
    fn admin_may_do_everything_including_roots() {
        let (t, p) = (tree(), admin());
        assert_eq!(allowed(|q| can_view(&p, q, &t)), ALL);
        assert_eq!(allowed(|q| can_edit_hard(&p, q, &t)), ALL);
        assert!(can_manage_children(&p, "", &t), "admins create roots");
        assert!(can_grant(&p, "ai", Role::Owner, &t));
        assert!(can_view(&p, "ghost", &t));
    }

    #[test]
    fn owner_sees_and_manages_its_subtree_only() {
        let (t, p) = (tree(), user(&[("nlp", Role::Owner)]));
        assert_eq!(
            allowed(|q| can_view(&p, q, &t)),
            ["nlp", "nlp-a", "nlp-a1", "nlp-b"]
        );
        assert_eq!(
            allowed(|q| can_manage_children(&p, q, &t)),
            ["nlp", "nlp-a", "nlp-a1", "nlp-b"]
        );
        assert!(!can_manage_children(&p, "", &t), "only admins create roots");
    }

    #[test]
    fn owner_may_not_change_its_own_hard_but_may_change_its_childrens() {
        let (t, p) = (tree(), user(&[("nlp", Role::Owner)]));
        assert_eq!(
            allowed(|q| can_edit_hard(&p, q, &t)),
            ["nlp-a", "nlp-a1", "nlp-b"]
        );
        assert!(!can_delete(&p, "nlp", &t));
        assert!(can_delete(&p, "nlp-b", &t));
        // Owning the root gives no one the root's own spec.
        let root_owner = user(&[("ai", Role::Owner)]);
        assert!(!can_edit_hard(&root_owner, "ai", &t));
        assert!(can_edit_hard(&root_owner, "nlp", &t));
    }

    #[test]
    fn member_sees_its_subtree_and_changes_nothing() {
        let (t, p) = (tree(), user(&[("cv", Role::Member)]));
        assert_eq!(allowed(|q| can_view(&p, q, &t)), ["cv", "cv-a"]);
        assert!(allowed(|q| can_manage_children(&p, q, &t)).is_empty());
        assert!(allowed(|q| can_edit_hard(&p, q, &t)).is_empty());
        assert!(!can_view(&p, "nlp", &t), "a member of cv cannot see nlp");
        assert!(!can_view(&p, "ai", &t), "nor cv's parent");
    }

    #[test]
    fn the_strongest_binding_on_the_lineage_wins() {
        let t = tree();
        let p = user(&[("nlp-a", Role::Member), ("nlp", Role::Owner)]);
        assert_eq!(role_on(&p, "nlp-a1", &t), Some(Role::Owner));
        let p = user(&[("nlp", Role::Member), ("nlp-a", Role::Owner)]);
        assert_eq!(role_on(&p, "nlp-b", &t), Some(Role::Member));
        assert_eq!(role_on(&p, "nlp-a1", &t), Some(Role::Owner));
        assert!(can_edit_hard(&p, "nlp-a1", &t));
        assert!(!can_edit_hard(&p, "nlp-a", &t));
        assert_eq!(role_on(&p, "cv", &t), None);
    }

    #[test]
    fn grants_stay_below_the_granter() {
        let (t, p) = (tree(), user(&[("nlp", Role::Owner)]));
        assert!(can_grant(&p, "nlp", Role::Member, &t));
        assert!(
            !can_grant(&p, "nlp", Role::Owner, &t),
            "no second owner of itself"
        );
        assert!(can_grant(&p, "nlp-a", Role::Owner, &t));
        assert!(!can_grant(&p, "cv", Role::Member, &t));
        let m = user(&[("cv", Role::Member)]);
        assert!(!can_grant(&m, "cv-a", Role::Member, &t));
    }

    #[test]
    fn transfers_are_asked_by_the_payer_and_decided_at_the_common_ancestor() {
        let t = tree();
        let owner = user(&[("nlp", Role::Owner)]);
        let member = user(&[("cv", Role::Member)]);
        // Giving out of what one owns, to anyone; not out of another's.
        assert!(can_request_transfer(&owner, Some("nlp"), "cv", &t));
        assert!(can_request_transfer(&owner, Some("nlp-a"), "nlp-b", &t));
        assert!(!can_request_transfer(&owner, Some("cv"), "nlp", &t));
        assert!(!can_request_transfer(&member, Some("cv"), "nlp", &t));
        // More from the parent: an owner of the destination.
        assert!(can_request_transfer(&owner, None, "nlp", &t));
        assert!(!can_request_transfer(&owner, None, "cv", &t));
        assert!(!can_request_transfer(&member, None, "cv", &t));
        assert!(can_request_transfer(&admin(), Some("cv"), "ops", &t));
        // More budget from the parent: whoever sees the quota may ask.
        assert!(can_ask_for_budget(&member, "cv", &t));
        assert!(!can_ask_for_budget(&member, "nlp", &t));
        assert!(can_ask_for_budget(&owner, "nlp-a", &t));
        // Deciding: owners of the LCA or above, never a mere end.
        assert!(
            !can_decide_transfer(&owner, Some("ai"), &t),
            "nlp→cv meets at ai"
        );
        assert!(
            can_decide_transfer(&owner, Some("nlp"), &t),
            "nlp-a→nlp-b meets at nlp"
        );
        assert!(can_decide_transfer(&owner, Some("nlp-a"), &t));
        assert!(!can_decide_transfer(&member, Some("cv"), &t));
        assert!(can_decide_transfer(
            &user(&[("ai", Role::Owner)]),
            Some("nlp"),
            &t
        ));
        assert!(!can_decide_transfer(&owner, None, &t));
        assert!(can_decide_transfer(&admin(), None, &t));
        // Seeing: either end.
        assert!(can_view_transfer(&owner, Some("nlp"), "cv", &t));
        assert!(can_view_transfer(&member, Some("nlp"), "cv", &t));
        assert!(can_view_transfer(&member, None, "cv-a", &t));
        assert!(!can_view_transfer(&member, Some("nlp"), "nlp-b", &t));
        assert!(!can_view_transfer(&owner, None, "cv", &t));
    }

    #[test]
    fn visible_filters_and_keeps_order() {
        let quotas: Vec<Quota> = ALL
            .iter()
            .map(|n| {
                let parent = tree().parent(n).unwrap_or("").to_string();
                Quota::new(
                    n,
                    quota::QuotaSpec {
                        parent,
                        ..Default::default()
                    },
                )
            })
            .collect();
        let names = |v: Vec<Quota>| v.iter().map(|q| q.name().to_string()).collect::<Vec<_>>();
        let member = user(&[("cv", Role::Member)]);
        assert_eq!(names(visible(&member, quotas.clone())), ["cv", "cv-a"]);
        assert_eq!(names(visible(&admin(), quotas.clone())), ALL);
        assert!(visible(&user(&[]), quotas.clone()).is_empty());
        assert_eq!(
            visible_names(&member, &tree())
                .into_iter()
                .collect::<Vec<_>>(),
            ["cv", "cv-a"]
        );
    }
}
