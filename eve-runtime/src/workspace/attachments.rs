//! Files staged in a session's workspace: a user's uploads and the images and files tools return,
//! under `.eve/attachments/<sha256>/<name>`.
//!
//! eve writes and reads these in its own process (as root when eve runs as root) while the
//! session's tools may be changing the same workspace: a tool can plant a symlink at
//! `.eve/attachments` (or at one of its folders, or at the file's name) pointing out of the
//! workspace. So nothing here goes by path. The workspace is opened once as a [`Beneath`] handle
//! and every folder and file is taken from the handle before it, one name at a time, with
//! `O_NOFOLLOW`: a planted symlink fails the staging (`ELOOP`/`ENOTDIR`) instead of being
//! followed, whenever it appears. A file is created with `O_EXCL`; one already there is kept when
//! its bytes hash to its folder's name and replaced otherwise (a write cut short by a crash, or a
//! tool's edit). Reading checks the same hash, so a reference can only ever yield the bytes it
//! names.

use std::io::{Read, Write};
use std::path::Path;

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::model::Attachment;
use crate::tools::Beneath;

/// The folder of staged files in a workspace.
pub(crate) const ATTACHMENTS_DIR: &str = ".eve/attachments";

/// A file as a channel or a tool hands it over, before it is staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// IANA media type as sent.
    pub media_type: String,
    /// The name it was sent with, if any.
    pub filename: Option<String>,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Stages `upload` in the workspace at `workspace` (created when missing), race-free (see the
/// module); returns its reference.
pub fn stage(workspace: &Path, upload: &Upload) -> std::io::Result<Attachment> {
    std::fs::create_dir_all(workspace)?;
    let root = Beneath::open(workspace)?;
    let sha = hex::encode(Sha256::digest(&upload.bytes));
    let name = safe_name(upload.filename.as_deref(), &upload.media_type);
    let dir = root
        .mkdirs_plain(&[".eve", "attachments", sha.as_str()])?
        .ok_or_else(|| std::io::Error::other("no folder was made"))?;
    for _ in 0..3 {
        match dir.create_plain(&[name.as_str()], 0o644) {
            Ok(mut file) => {
                file.write_all(&upload.bytes)?;
                file.sync_all()?;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if hash_of(&dir, &name).is_ok_and(|h| h == sha) {
                    break;
                }
                dir.remove_plain(&name)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Attachment {
        path: format!("{ATTACHMENTS_DIR}/{sha}/{name}"),
        media_type: upload.media_type.clone(),
        filename: upload.filename.clone().filter(|f| !f.is_empty()),
        size: upload.bytes.len() as u64,
        sha256: sha,
        data: None,
    })
}

/// The bytes of a staged file, read race-free, after checking that `attachment.path` is a staged
/// file's path and that the bytes hash to the name of its folder.
pub fn load(workspace: &Path, attachment: &Attachment) -> std::io::Result<Vec<u8>> {
    let invalid = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
    let rest = attachment
        .path
        .strip_prefix(ATTACHMENTS_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| invalid("not a staged file's path"))?;
    let (sha, name) = rest
        .split_once('/')
        .ok_or_else(|| invalid("not a staged file's path"))?;
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) || name.contains('/') {
        return Err(invalid("not a staged file's path"));
    }
    let root = Beneath::open(workspace)?;
    let mut file = root.open_plain(&[".eve", "attachments", sha, name])?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    if hex::encode(Sha256::digest(&bytes)) != sha {
        return Err(invalid("the staged file was changed"));
    }
    Ok(bytes)
}

/// [`load`], base64.
pub(crate) fn load_base64(workspace: &Path, attachment: &Attachment) -> std::io::Result<String> {
    load(workspace, attachment).map(|b| base64::engine::general_purpose::STANDARD.encode(b))
}

fn hash_of(dir: &Beneath, name: &str) -> std::io::Result<String> {
    let mut file = dir.open_plain(&[name])?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// A file name that is one plain entry: letters, digits, `.`, `-` and `_` kept, anything else
/// `_`, no leading dot, at most 100 bytes; `file.<ext>` when nothing usable was sent.
pub(crate) fn safe_name(filename: Option<&str>, media_type: &str) -> String {
    let base = filename
        .map(|f| f.rsplit(['/', '\\']).next().unwrap_or(f))
        .unwrap_or("");
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name_trimmed = name.trim_start_matches('.').to_owned();
    name = name_trimmed;
    if name.len() > 100 {
        name = name[name.len() - 100..].to_owned();
    }
    if name.is_empty() || name.chars().all(|c| c == '_' || c == '.') {
        name = format!("file{}", extension(media_type));
    }
    name
}

fn extension(media_type: &str) -> &'static str {
    match media_type.to_ascii_lowercase().as_str() {
        "image/png" => ".png",
        "image/jpeg" | "image/jpg" => ".jpg",
        "image/gif" => ".gif",
        "image/webp" => ".webp",
        "application/pdf" => ".pdf",
        "text/plain" => ".txt",
        "application/json" => ".json",
        "text/csv" => ".csv",
        _ => ".bin",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_one_plain_entry() {
        assert_eq!(safe_name(Some("../../etc/passwd"), "text/plain"), "passwd");
        assert_eq!(safe_name(Some(".hidden"), "text/plain"), "hidden");
        assert_eq!(safe_name(Some("a b?.png"), "image/png"), "a_b_.png");
        assert_eq!(safe_name(None, "application/pdf"), "file.pdf");
        assert_eq!(safe_name(Some(".."), "image/png"), "file.png");
    }

    #[test]
    fn stages_loads_and_refuses_a_changed_file() {
        let dir = tempfile::tempdir().unwrap();
        let upload = Upload {
            media_type: "text/plain".into(),
            filename: Some("n.txt".into()),
            bytes: b"hello".to_vec(),
        };
        let a = stage(dir.path(), &upload).unwrap();
        assert_eq!(a.size, 5);
        assert_eq!(load(dir.path(), &a).unwrap(), b"hello");
        // Staged twice: the same file.
        assert_eq!(stage(dir.path(), &upload).unwrap(), a);
        std::fs::write(dir.path().join(&a.path), b"changed").unwrap();
        assert!(load(dir.path(), &a).is_err());
        // Staging again repairs it.
        stage(dir.path(), &upload).unwrap();
        assert_eq!(load(dir.path(), &a).unwrap(), b"hello");
        let mut forged = a.clone();
        forged.path = "../outside".into();
        assert!(load(dir.path(), &forged).is_err());
    }
}
