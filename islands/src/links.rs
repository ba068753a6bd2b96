//! Links that follow a chart section's range: the quota page's links to its
//! other keys' charts (`/quotas/{name}/charts?key=…&range=…`, marked
//! `data-follows-range`) name the range shown, which a range click changes
//! without a reload. Pure, tested on the host.

/// `href` with its `range` parameter set to `range` (added when it has
/// none), the rest of its query and its fragment kept as they are.
pub fn with_range(href: &str, range: &str) -> String {
    let (before_fragment, fragment) = match href.split_once('#') {
        Some((h, f)) => (h, Some(f)),
        None => (href, None),
    };
    let (path, query) = match before_fragment.split_once('?') {
        Some((p, q)) => (p, q),
        None => (before_fragment, ""),
    };
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && *p != "range" && !p.starts_with("range="))
        .map(str::to_string)
        .collect();
    params.push(format!("range={range}"));
    let mut out = format!("{path}?{}", params.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_range;

    #[test]
    fn a_link_takes_the_range_shown_and_keeps_the_rest() {
        assert_eq!(
            with_range("/quotas/nlp/charts?key=requests.cpu&range=7d", "30d"),
            "/quotas/nlp/charts?key=requests.cpu&range=30d"
        );
        assert_eq!(
            with_range("/quotas/nlp/charts?range=7d", "1y"),
            "/quotas/nlp/charts?range=1y"
        );
        assert_eq!(
            with_range("/quotas/nlp/charts", "24h"),
            "/quotas/nlp/charts?range=24h"
        );
        assert_eq!(
            with_range(
                "/quotas/a%26b/charts?range=7d&key=limits.cpu.A4#charts",
                "90d"
            ),
            "/quotas/a%26b/charts?key=limits.cpu.A4&range=90d#charts"
        );
        // A key whose name holds "range=" is another parameter's value.
        assert_eq!(
            with_range("/q/charts?key=x.range%3D1&range=7d", "30d"),
            "/q/charts?key=x.range%3D1&range=30d"
        );
    }
}
