//! The hash of a JSON value in canonical form (object keys sorted, no whitespace): tool schema
//! hashes in the manifest and for built-in tools, so equal schemas hash equally whatever their
//! key order.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 (hex) of a JSON value in canonical form (object keys sorted, no whitespace).
pub fn json_hash(value: &Value) -> String {
    let mut h = HashWriter(Sha256::new());
    canonical(value, &mut h);
    hex::encode(h.0.finalize())
}

/// Feeds serialised JSON straight into the hash, without building strings first.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn canonical(value: &Value, h: &mut HashWriter) {
    match value {
        Value::Object(m) => {
            h.0.update(b"{");
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    h.0.update(b",");
                }
                // Writing into the hash cannot fail, and a string always serialises.
                let _ = serde_json::to_writer(&mut *h, k);
                h.0.update(b":");
                canonical(v, h);
            }
            h.0.update(b"}");
        }
        Value::Array(items) => {
            h.0.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    h.0.update(b",");
                }
                canonical(v, h);
            }
            h.0.update(b"]");
        }
        other => {
            let _ = serde_json::to_writer(&mut *h, other);
        }
    }
}
