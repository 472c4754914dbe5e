//! What the attribute tells a user who got something wrong: several errors reported together,
//! and the name they probably meant. Both the option parser and the key template checks use it.

/// Several errors reported as one `syn::Error`.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }

    /// Whether nothing was reported.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

/// The candidate closest to `wanted` by edit distance, when it is close enough to be the
/// likely intent (a typo, not a different word).
pub(crate) fn closest<'a>(
    wanted: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (wanted.chars().count() / 3).max(1);
    candidates
        .map(|c| (edit_distance(&wanted.to_lowercase(), &c.to_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(
            closest("ordr", ["order", "user"].into_iter()),
            Some("order")
        );
        assert_eq!(closest("tll", ["key", "ttl"].into_iter()), Some("ttl"));
        assert_eq!(closest("xyz", ["order"].into_iter()), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
