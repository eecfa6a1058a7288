//! The one message a warm box receives: a call's spec with its three stdio descriptors.
//!
//! A warm box (see [`super::pool`]) was started before the call existed, so what the cold path
//! passes by argv, environment, working folder and inherited stdio travels here instead, over a
//! Unix socket: a length-prefixed JSON [`Call`] and, attached to its first bytes, the call's
//! stdin, stdout and stderr (`SCM_RIGHTS`). Stage 1 receives it from the runtime and hands the
//! same bytes and descriptors on to its init. The socket is private to the two processes at each
//! end, so the environment (which may hold secrets) never appears in an argv.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use serde::{Deserialize, Serialize};

use super::Policy;

/// Largest spec accepted (policy, argv and environment together).
const MAX_CALL: usize = 16 << 20;

/// What one call asks of a warm box: everything the cold path gives stage 1 by argv, environment
/// and working folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Call {
    pub(crate) policy: Policy,
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    /// The command's complete environment.
    pub(crate) env: Vec<(String, String)>,
    /// The command's working folder (inside the view).
    pub(crate) cwd: PathBuf,
}

/// Sends `bytes` (length-prefixed) with `fds` attached.
pub(crate) fn send(socket: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|n| (*n as usize) <= MAX_CALL)
        .ok_or_else(|| io::Error::other("the call's spec is too large for a warm box"))?;
    let header = len.to_le_bytes();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let iov = [IoSlice::new(&header), IoSlice::new(bytes)];
    let sent = sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL)?;
    let total = header.len() + bytes.len();
    if sent < total {
        // The descriptors went with the first bytes; the rest is plain data.
        let mut rest = Vec::with_capacity(total - sent);
        rest.extend_from_slice(&header);
        rest.extend_from_slice(bytes);
        (&*socket).write_all(&rest[sent..])?;
    }
    Ok(())
}

/// Receives one message sent by [`send`]: its bytes and descriptors. `Ok(None)` when the peer
/// closed the socket without sending.
pub(crate) fn recv(socket: &UnixStream) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut first = vec![0u8; 64 << 10];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        let mut iov = [IoSliceMut::new(&mut first)];
        match recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(m) => break m.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    if got == 0 {
        return Ok(None);
    }
    first.truncate(got);
    while first.len() < 4 {
        let mut b = [0u8; 1];
        (&*socket).read_exact(&mut b)?;
        first.push(b[0]);
    }
    let len = u32::from_le_bytes([first[0], first[1], first[2], first[3]]) as usize;
    if len > MAX_CALL {
        return Err(io::Error::other("the call's spec is too large"));
    }
    let mut bytes = first.split_off(4);
    if bytes.len() > len {
        return Err(io::Error::other(
            "more than one call was sent to a warm box",
        ));
    }
    let have = bytes.len();
    bytes.resize(len, 0);
    (&*socket).read_exact(&mut bytes[have..])?;
    Ok(Some((bytes, fds)))
}

/// Writes one status line (`ready`, or `error: …`) on `socket`.
pub(crate) fn say(mut socket: &UnixStream, line: &str) -> io::Result<()> {
    let mut text = line.replace('\n', " ");
    text.push('\n');
    socket.write_all(text.as_bytes())
}

/// Reads one status line written by [`say`]; `None` at end of stream. The protocol never sends
/// anything after a status line before the other side has answered it, so a read that takes more
/// than the line loses nothing.
pub(crate) fn hear(mut socket: &UnixStream) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match socket.read(&mut buf) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(0) => break,
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if let Some(end) = line.iter().position(|b| *b == b'\n') {
                    line.truncate(end);
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if line.len() > 4096 {
            break;
        }
    }
    Ok(Some(String::from_utf8_lossy(&line).into_owned()))
}
