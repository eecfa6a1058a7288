//! A file in a conversation (a user's upload, a tool's image) as the model clients see it: a
//! reference to its copy in the session's workspace, with its bytes only for the call that sends
//! them.

use serde::{Deserialize, Serialize};

/// A file in a conversation: a user's upload or a tool's image, staged in the session's
/// workspace under `.eve/attachments/<sha256>/<name>`. History and events keep this reference
/// only; `data` (the bytes, base64) is filled for the one model call that sends the file as the
/// provider's own image or document part (`features::attachments`), and never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Path in the workspace: `.eve/attachments/<sha256>/<name>`.
    pub path: String,
    /// IANA media type (`image/png`, `application/pdf`).
    pub media_type: String,
    /// The name it was sent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the bytes, hex (also the folder it is staged in).
    pub sha256: String,
    /// The bytes, base64, for the model call that sends them natively; never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// What kind of native part a provider takes a file as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    /// An image (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
    Image,
    /// A PDF document.
    Pdf,
}

impl Attachment {
    /// Whether OpenAI's and Anthropic's APIs take this file as a native part, and as which.
    pub(crate) fn native_kind(&self) -> Option<NativeKind> {
        match self.media_type.to_ascii_lowercase().as_str() {
            "image/png" | "image/jpeg" | "image/jpg" | "image/gif" | "image/webp" => {
                Some(NativeKind::Image)
            }
            "application/pdf" => Some(NativeKind::Pdf),
            _ => None,
        }
    }

    /// `data:<media type>;base64,<data>`, when the bytes are loaded.
    pub(crate) fn data_url(&self) -> Option<String> {
        self.data
            .as_ref()
            .map(|d| format!("data:{};base64,{d}", self.media_type))
    }

    /// The name to show: the filename, else the staged file's name.
    pub(crate) fn name(&self) -> &str {
        self.filename
            .as_deref()
            .unwrap_or_else(|| self.path.rsplit('/').next().unwrap_or(&self.path))
    }
}
