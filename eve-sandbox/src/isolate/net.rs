//! The sandbox's network: its own loopback, and the forwarder that is the proxy's door in.
//!
//! A new network namespace has only a `lo` that is down. Stage 1 brings it up (one
//! `RTM_NEWLINK` netlink message: no `ioctl`, so no `unsafe`), so programs can talk to themselves
//! on 127.0.0.1; the host's loopback stays unreachable. With [`super::Network::Proxy`], stage 1
//! listens on `127.0.0.1:PORT` and relays each connection to eve's egress proxy over its Unix
//! socket: that relay, running in stage 1 (outside the sandbox's PID namespace, so out of the
//! command's sight and reach), is the only path out.

use std::io;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

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

/// Connections relayed at once; more wait in the listen backlog. Bounds the memory a command can
/// make stage 1 spend.
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

/// Runs `init` (the sandbox's PID 1), then `spawned` (which drops what the relays do not need),
/// and relays every connection of `listener` to the Unix socket at `socket` until `init` exits;
/// returns its exit status.
///
/// One thread only: stage 1 has unshared its PID namespace, and the kernel refuses new threads to
/// such a process (`clone(CLONE_THREAD)` gives `EINVAL`), so the relays are tasks of a
/// current-thread tokio runtime, which starts no thread for sockets and child processes.
pub(crate) fn forward_while(
    listener: TcpListener,
    socket: &str,
    init: std::process::Command,
    spawned: impl FnOnce() -> Result<()>,
) -> Result<std::process::ExitStatus> {
    let fail = |what: &str, e: io::Error| Failure::new(format!("egress forwarder: {what}: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| fail("cannot start its event loop", e))?;
    let socket = PathBuf::from(socket);
    rt.block_on(async move {
        let listener = register(listener)?;
        let mut child = tokio::process::Command::from(init)
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start the sandbox's init process: {e}")))?;
        spawned()?;
        relay_until(listener, socket, &mut child).await
    })
}

/// Relays every connection of `listener` to the Unix socket at `socket` until `child` (the
/// sandbox's init) exits; returns its exit status. Must run on a current-thread runtime (see
/// [`forward_while`]).
pub(crate) async fn relay_until(
    listener: tokio::net::TcpListener,
    socket: PathBuf,
    child: &mut tokio::process::Child,
) -> Result<std::process::ExitStatus> {
    let fail = |what: &str, e: io::Error| Failure::new(format!("egress forwarder: {what}: {e}"));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_RELAYS));
    let accept = async {
        loop {
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let socket = socket.clone();
            tokio::spawn(async move {
                relay(tcp, &socket).await;
                drop(permit);
            });
        }
    };
    tokio::select! {
        status = child.wait() => {
            status.map_err(|e| fail("waiting for the sandbox's init process", e))
        }
        () = accept => Err(Failure::new("egress forwarder: the listener closed")),
    }
}

/// Registers a bound listener with the current (current-thread) runtime.
pub(crate) fn register(listener: TcpListener) -> Result<tokio::net::TcpListener> {
    let fail = |what: &str, e: io::Error| Failure::new(format!("egress forwarder: {what}: {e}"));
    listener
        .set_nonblocking(true)
        .map_err(|e| fail("set_nonblocking", e))?;
    tokio::net::TcpListener::from_std(listener).map_err(|e| fail("register", e))
}

async fn relay(mut tcp: tokio::net::TcpStream, socket: &PathBuf) {
    let Ok(mut unix) = tokio::net::UnixStream::connect(socket).await else {
        // The proxy is gone: the client sees the connection close.
        return;
    };
    // Copies both ways, half-closing each side at its end of stream.
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
}
