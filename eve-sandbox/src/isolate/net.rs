//! The sandbox's network: its own loopback, and the forwarder that is the proxy's door in.
//!
//! A new network namespace has only a `lo` that is down. Stage 2 brings it up (one
//! `RTM_NEWLINK` netlink message: no `ioctl`, so no `unsafe`), so programs can talk to themselves
//! on 127.0.0.1; the host's loopback stays unreachable. With [`super::Network::Proxy`], stage 2
//! listens on `127.0.0.1:PORT` and relays each connection to eve's egress proxy over its Unix
//! socket: that relay, running in the sandbox's PID 1 outside the command's reach, is the only
//! path out.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

use super::helper::{Failure, Result};

const RTM_NEWLINK: u16 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const IFF_UP: u32 = 1;
/// `lo` is always interface 1 in a fresh network namespace.
const LO_INDEX: i32 = 1;

/// Sets `lo` up in the current network namespace.
pub(crate) fn loopback_up() -> Result<()> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Failure::new(format!(
            "cannot bring up the sandbox's loopback ({what}): {e}"
        ))
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| fail("socket", &e))?;
    // struct nlmsghdr (16 bytes) + struct ifinfomsg (16 bytes), native endian.
    let mut msg = Vec::with_capacity(32);
    msg.extend_from_slice(&32u32.to_ne_bytes());
    msg.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence number
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    msg.push(0); // ifi_family: AF_UNSPEC
    msg.push(0); // padding
    msg.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    msg.extend_from_slice(&LO_INDEX.to_ne_bytes());
    msg.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
    msg.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change
    let kernel = NetlinkAddr::new(0, 0);
    sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &msg,
        &kernel,
        MsgFlags::empty(),
    )
    .map_err(|e| fail("send", &e))?;
    let mut buf = [0u8; 256];
    let n = recv(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &mut buf,
        MsgFlags::empty(),
    )
    .map_err(|e| fail("receive", &e))?;
    // The ack is an NLMSG_ERROR message whose error field (after the header) is 0 on success.
    if n >= 20 && u16::from_ne_bytes([buf[4], buf[5]]) == NLMSG_ERROR {
        let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        if code != 0 {
            return Err(fail(
                "RTM_NEWLINK",
                &io::Error::from_raw_os_error(code.saturating_neg()),
            ));
        }
        return Ok(());
    }
    Err(fail("RTM_NEWLINK", &"unexpected answer from the kernel"))
}

/// Connections relayed at once; more wait in the listen backlog. Bounds the threads a command
/// can make the sandbox's init start.
const MAX_RELAYS: usize = 128;

/// Listens on `127.0.0.1:port` in the sandbox's network namespace (before privileges go, so a
/// port under 1024 works too).
pub(crate) fn listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port)).map_err(|e| {
        Failure::new(format!(
            "cannot listen on 127.0.0.1:{port} in the sandbox for the egress proxy: {e}"
        ))
    })
}

/// Relays every connection of `listener` to the Unix socket at `socket`, in background threads
/// of stage 2 (they end with it).
pub(crate) fn start_forwarder(listener: TcpListener, socket: &str) -> Result<()> {
    let socket = PathBuf::from(socket);
    let active = Arc::new(AtomicUsize::new(0));
    thread::Builder::new()
        .name("egress-forwarder".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                while active.load(Ordering::Acquire) >= MAX_RELAYS {
                    thread::park_timeout(std::time::Duration::from_millis(10));
                }
                active.fetch_add(1, Ordering::AcqRel);
                let socket = socket.clone();
                let done = Arc::clone(&active);
                let spawned = thread::Builder::new().spawn(move || {
                    relay(conn, &socket);
                    done.fetch_sub(1, Ordering::AcqRel);
                });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })
        .map_err(|e| Failure::new(format!("cannot start the egress forwarder: {e}")))?;
    Ok(())
}

fn relay(tcp: TcpStream, socket: &PathBuf) {
    let Ok(unix) = UnixStream::connect(socket) else {
        // The proxy is gone: the client sees the connection close.
        return;
    };
    let (Ok(tcp_r), Ok(unix_w)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let up = thread::Builder::new().spawn(move || {
        pump(tcp_r, unix_w, |s| s.shutdown(Shutdown::Write));
    });
    pump(unix, tcp, |s| s.shutdown(Shutdown::Write));
    if let Ok(up) = up {
        let _ = up.join();
    }
}

/// Copies `from` to `to` until end of stream, then half-closes `to`.
fn pump<R: Read, W: Write>(mut from: R, mut to: W, close: impl FnOnce(&W) -> io::Result<()>) {
    let _ = io::copy(&mut from, &mut to);
    let _ = close(&to);
}
