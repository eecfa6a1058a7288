//! Name rules: which entries discovery skips, how a file name splits into stem and extension
//! (the stem is the name), how paths and folder labels are written in diagnostics, the slot
//! folders an agent folder may hold, and typo suggestions (the known name closest to one that is
//! not known). Every crate that says "did you mean" (a misnamed folder here, fields and providers
//! in eve-compile) uses [`closest`].

/// True for names discovery skips silently: `_x`, `.x`, and `*.test.*`.
pub fn is_ignored(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('.') || name.contains(".test.")
}

/// Splits `name.ext` into stem and extension (the last dot; a leading dot does not count).
pub fn split_ext(name: &str) -> (&str, Option<&str>) {
    match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], Some(&name[i + 1..])),
        _ => (name, None),
    }
}

/// `dir/name`, or `name` at the root: the path of an entry relative to the root agent folder.
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// `dir/` for a folder in a diagnostic (`.` for the root).
pub(crate) fn dir_label(dir: &str) -> String {
    if dir.is_empty() {
        ".".to_owned()
    } else {
        format!("{dir}/")
    }
}

/// The slot folders of an agent folder, for "did you mean" on a misnamed one.
pub(crate) const SLOT_FOLDERS: [&str; 9] = [
    "instructions",
    "tools",
    "skills",
    "subagents",
    "schedules",
    "hooks",
    "connections",
    "channels",
    "sandbox",
];

/// The known name closest to `name`, if it is close enough to be a typo.
pub fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (levenshtein(name, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}
