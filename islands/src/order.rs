//! How a sort-table orders rows: pure, so the host's tests check what the
//! browser does. Numbers compare by their exact value (`data-sort-value`
//! holds an integer: nano-units, milliseconds, a percent), text by its
//! lower case; empty cells ("—", "") go last in either direction.

use std::cmp::Ordering;

/// A cell's sort key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortKey {
    Num(i128),
    Text(String),
    Missing,
}

impl SortKey {
    /// The key of a cell of a `num` or `text` column.
    pub fn of(numeric: bool, value: &str) -> SortKey {
        let v = value.trim();
        if v.is_empty() || v == "—" {
            return SortKey::Missing;
        }
        if numeric {
            if let Ok(n) = v.parse::<i128>() {
                return SortKey::Num(n);
            }
        }
        // ASCII case only: Unicode's tables would weigh more than the
        // whole sort (quota and user names are ASCII).
        SortKey::Text(v.to_ascii_lowercase())
    }
}

/// A stable insertion sort: the tables hold hundreds of rows, and the
/// standard library's sorts cost kilobytes of WASM per use.
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && cmp(&v[j - 1], &v[j]) == Ordering::Greater {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// `a` before `b`? In `desc` the values go largest first; missing cells
/// stay last either way.
pub fn compare(a: &SortKey, b: &SortKey, desc: bool) -> Ordering {
    use SortKey::*;
    let o = match (a, b) {
        (Missing, Missing) => return Ordering::Equal,
        (Missing, _) => return Ordering::Greater,
        (_, Missing) => return Ordering::Less,
        (Num(x), Num(y)) => x.cmp(y),
        (Text(x), Text(y)) => x.cmp(y),
        (Num(_), Text(_)) => Ordering::Less,
        (Text(_), Num(_)) => Ordering::Greater,
    };
    if desc {
        o.reverse()
    } else {
        o
    }
}

/// The rows of a tree (`depths` in depth-first order) reordered so that
/// each level's siblings follow `cmp` and every row stays under its
/// parent: the new order as indices into the old.
pub fn tree_order(depths: &[usize], cmp: impl Fn(usize, usize) -> Ordering) -> Vec<usize> {
    // Children of each row (None: the top level), in document order.
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); depths.len()];
    let mut top: Vec<usize> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    for (i, &d) in depths.iter().enumerate() {
        while stack.last().is_some_and(|&p| depths[p] >= d) {
            stack.pop();
        }
        match stack.last() {
            Some(&p) => kids[p].push(i),
            None => top.push(i),
        }
        stack.push(i);
    }
    sort_by(&mut top, |a, b| cmp(*a, *b));
    for k in kids.iter_mut() {
        sort_by(k, |a, b| cmp(*a, *b));
    }
    let mut out = Vec::with_capacity(depths.len());
    let mut todo: Vec<usize> = top.into_iter().rev().collect();
    while let Some(i) = todo.pop() {
        out.push(i);
        todo.extend(kids[i].iter().rev());
    }
    out
}

/// The `open` or `closed` list of a tree address (comma-separated) with
/// `name` added or removed, as `TreeQuery::toggled` does on the server;
/// at most `max` names.
pub fn toggle_list(list: &str, name: &str, add: bool, max: usize) -> String {
    let mut names: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != name)
        .collect();
    if add && names.len() < max {
        names.push(name);
    }
    sort_by(&mut names, |a, b| a.cmp(b));
    names.dedup();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_sort_by_exact_value_and_blanks_go_last() {
        // 2^53 + 1 and 2^53 differ exactly, though a JS number would not.
        let big = SortKey::of(true, "9007199254740993");
        let less = SortKey::of(true, "9007199254740992");
        assert_eq!(compare(&less, &big, false), Ordering::Less);
        assert_eq!(compare(&less, &big, true), Ordering::Greater);
        // "1,024" as text would come before "9"; the values do not.
        let mut keys = [
            SortKey::of(true, "1024000000000"),
            SortKey::of(true, "—"),
            SortKey::of(true, "9000000000"),
        ];
        keys.sort_by(|a, b| compare(a, b, false));
        assert_eq!(keys[0], SortKey::Num(9_000_000_000));
        assert_eq!(keys[2], SortKey::Missing);
        keys.sort_by(|a, b| compare(a, b, true));
        assert_eq!(keys[0], SortKey::Num(1_024_000_000_000));
        assert_eq!(keys[2], SortKey::Missing, "blank last in both directions");
        assert_eq!(SortKey::of(false, " NLP "), SortKey::Text("nlp".into()));
        let mut v = [(2, 'a'), (1, 'b'), (2, 'c'), (0, 'd')];
        sort_by(&mut v, |x, y| x.0.cmp(&y.0));
        assert_eq!(v, [(0, 'd'), (1, 'b'), (2, 'a'), (2, 'c')], "stable");
    }

    #[test]
    fn a_tree_sorts_within_each_level_and_children_stay_under_their_parent() {
        // ai(0) ─ nlp(1) ─ nlp-a(2), nlp-b(3); ai ─ cv(4); root2(5)
        let names = ["ai", "nlp", "nlp-b", "nlp-a", "cv", "root2"];
        let depths = [0, 1, 2, 2, 1, 0];
        let value = [5, 1, 7, 9, 3, 8];
        // Largest first.
        let order = tree_order(&depths, |a, b| value[b].cmp(&value[a]));
        let got: Vec<&str> = order.iter().map(|&i| names[i]).collect();
        assert_eq!(got, ["root2", "ai", "cv", "nlp", "nlp-a", "nlp-b"]);
    }

    #[test]
    fn toggles_edit_the_address_lists_as_the_server_does() {
        assert_eq!(toggle_list("", "nlp", true, 50), "nlp");
        assert_eq!(toggle_list("cv,nlp", "nlp", false, 50), "cv");
        assert_eq!(toggle_list("cv", "ai", true, 50), "ai,cv");
        assert_eq!(toggle_list("cv", "ai", true, 1), "cv");
    }
}
