//! Network: none reaches nothing of the host; the proxy forwarder is the only way out.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;

use eve_sandbox::isolate::Network;

use super::{Fixture, LIMIT, run};

/// A TCP server on the host's loopback that answers each connection with a line.
fn tcp_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            let _ = c.write_all(b"HOST-LOOPBACK\n");
        }
    });
    port
}

fn connect(port: u16) -> String {
    format!(
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && head -n1 <&3' && echo CONNECTED || echo REFUSED"
    )
}

#[test]
fn network_none_cannot_reach_the_hosts_loopback() {
    let f = Fixture::new();
    let port = tcp_server();
    let host = run(f.host(&connect(port)), LIMIT);
    assert!(
        host.stdout.contains("HOST-LOOPBACK"),
        "unconfined: {host:?}"
    );
    let iso = run(f.isolated(&f.policy(), &connect(port)), LIMIT);
    assert!(iso.stdout.contains("REFUSED"), "isolated: {iso:?}");
    assert!(!iso.stdout.contains("HOST-LOOPBACK"), "isolated: {iso:?}");
}

#[test]
fn the_sandbox_has_its_own_loopback() {
    let f = Fixture::new();
    let script = "python3 -c '
import socket, threading
s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept(); a.sendall(b\"own-lo\")
print(c.recv(10).decode())'";
    let iso = run(f.isolated(&f.policy(), script), LIMIT);
    assert!(iso.stdout.contains("own-lo"), "isolated: {iso:?}");
}

#[test]
fn the_proxy_port_reaches_the_proxy_socket_and_nothing_else_does() {
    let f = Fixture::new();
    let sock = f.root.join("egress.sock");
    let l = UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let mut c = c;
                let _ = c.write_all(format!("proxy saw {line}").as_bytes());
            });
        }
    });
    let direct = tcp_server();
    let mut policy = f.policy();
    policy.network = Network::Proxy {
        socket: sock.clone(),
        port: 3128,
    };
    let script = format!(
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128; echo CONNECT x:443 >&3; head -n1 <&3'; {}",
        connect(direct)
    );
    let iso = run(f.isolated(&policy, &script), LIMIT);
    assert!(
        iso.stdout.contains("proxy saw CONNECT x:443"),
        "isolated: {iso:?}"
    );
    assert!(iso.stdout.contains("REFUSED"), "isolated: {iso:?}");
    assert!(!iso.stdout.contains("HOST-LOOPBACK"), "isolated: {iso:?}");
    // Without the proxy policy the same port leads nowhere.
    let iso = run(
        f.isolated(
            &f.policy(),
            "bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128' && echo CONNECTED || echo REFUSED",
        ),
        LIMIT,
    );
    assert!(iso.stdout.contains("REFUSED"), "isolated: {iso:?}");
}
