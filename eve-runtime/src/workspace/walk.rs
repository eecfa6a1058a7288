//! The walk a workspace checkpoint takes: every regular file and empty folder of a workspace,
//! read without ever following a symlink.
//!
//! A checkpoint runs in eve's process (as root when eve is root) while a tool of the session may
//! still be changing the workspace (a task). Walked by path, a folder swapped for a symlink to `/`
//! between its `lstat` and its listing (or its files' reads) would put the host's files into the
//! store. Here every step is taken from a folder handle already open, one name at a time, with
//! `O_NOFOLLOW` ([`Beneath`]): a symlink is never followed, whenever it appears. An entry that
//! vanished or changed kind under the walk is left out ([`gone`]).

use std::ffi::OsString;

use crate::tools::Beneath;
use crate::tools::beneath::{Kind, is_escape};

/// A file as found on disk now.
pub(super) struct Found {
    pub(super) rel: String,
    /// The names leading to it, as on disk (`rel` is their lossy UTF-8 join).
    pub(super) parts: Vec<OsString>,
    pub(super) size: u64,
    pub(super) mtime_ns: i128,
    pub(super) ctime_ns: i128,
    pub(super) inode: u64,
    pub(super) mode: u32,
}

/// Every regular file and every empty folder under `root` (symbolic links are skipped, and
/// never followed).
pub(super) fn scan(root: &Beneath) -> std::io::Result<(Vec<Found>, Vec<String>)> {
    let mut files = Vec::new();
    let mut empty = Vec::new();
    let mut stack: Vec<(Option<Beneath>, Vec<OsString>)> = vec![(None, Vec::new())];
    while let Some((dir, parts)) = stack.pop() {
        let at = dir.as_ref().unwrap_or(root);
        let entries = at.entries()?;
        for (name, meta) in &entries {
            let mut path = parts.clone();
            path.push(name.clone());
            match meta.kind {
                Kind::Dir => match at.child(name) {
                    Ok(child) => stack.push((Some(child), path)),
                    // Swapped for a symlink or removed since it was listed: not followed.
                    Err(e) if gone(&e) => {}
                    Err(e) => return Err(e),
                },
                Kind::File => files.push(Found {
                    rel: join(&path),
                    parts: path,
                    size: meta.size,
                    mtime_ns: meta.mtime_ns,
                    ctime_ns: meta.ctime_ns,
                    inode: meta.inode,
                    mode: meta.mode,
                }),
                Kind::Symlink | Kind::Other => {}
            }
        }
        if entries.is_empty() && !parts.is_empty() {
            empty.push(join(&parts));
        }
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    empty.sort();
    Ok((files, empty))
}

/// `a/b/c` of the names `[a, b, c]`.
fn join(parts: &[OsString]) -> String {
    parts
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether an entry changed under a walk: removed, or no longer what it was (a symlink now, or
/// another kind of file).
pub(super) fn gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{InvalidInput, NotADirectory, NotFound};
    matches!(e.kind(), NotFound | NotADirectory | InvalidInput) || is_escape(e)
}

/// The contents of the regular file at `parts` under `ws`, following no symlink.
pub(super) fn read_plain(ws: &Beneath, parts: &[OsString]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    ws.open_plain(parts)?.read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::Path;

    use super::*;

    /// The walk of checkpoints before they held folder handles: names joined into paths, each
    /// checked with `lstat`, then listed or read by path. Returns the contents it read.
    fn naive_scan(dir: &Path, out: &mut Vec<Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            match std::fs::symlink_metadata(entry.path()) {
                Ok(m) if m.is_dir() => naive_scan(&entry.path(), out),
                Ok(m) if m.is_file() => out.extend(std::fs::read(entry.path()).ok()),
                _ => {}
            }
        }
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_mid_checkpoint_is_not_read() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let deep = "d1/d2/d3";
        std::fs::create_dir_all(ws.path().join("sub").join(deep)).unwrap();
        std::fs::create_dir_all(outside.path().join(deep)).unwrap();
        for i in 0..8 {
            let name = format!("{deep}/f{i}");
            std::fs::write(ws.path().join("sub").join(&name), "inside").unwrap();
            std::fs::write(outside.path().join(&name), "OUTSIDE-SECRET").unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), ws.path().join("alt")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flips = {
            let (a, b, stop) = (ws.path().join("sub"), ws.path().join("alt"), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &a,
                        rustix::fs::CWD,
                        &b,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                }
            })
        };
        let secret = |data: &[u8]| String::from_utf8_lossy(data).contains("OUTSIDE-SECRET");
        let (mut rounds, mut leaked, mut naive_leaked) = (0, 0, 0);
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(10)
            && (rounds < 300 || naive_leaked == 0)
        {
            // What a checkpoint does: the walk, then a read of every file it found.
            let root = Beneath::open(ws.path()).unwrap();
            if let Ok((found, _)) = scan(&root) {
                leaked += found
                    .iter()
                    .filter_map(|f| read_plain(&root, &f.parts).ok())
                    .filter(|d| secret(d))
                    .count();
            }
            let mut read = Vec::new();
            naive_scan(ws.path(), &mut read);
            naive_leaked += read.iter().filter(|d| secret(d)).count();
            rounds += 1;
        }
        stop.store(true, Ordering::Relaxed);
        flips.join().unwrap();
        eprintln!(
            "checkpoint race: {rounds} walks: {leaked} secret files read by the checkpoint, \
             {naive_leaked} by the naive walk"
        );
        assert_eq!(leaked, 0, "the checkpoint read through the swapped symlink");
        assert!(
            naive_leaked > 0,
            "the naive walk never won: the race is not real here"
        );
    }
}
