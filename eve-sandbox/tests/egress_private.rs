//! `network: all` is the internet, attacked over real sockets: the host's own addresses off
//! loopback (v4 and v6), private ranges and every IPv6 form that carries a guarded IPv4 address
//! are refused unless a rule lists them, and `CONNECT` is judged on the address it connects to,
//! whatever `Host` the tunnel carries. Each refusal has a twin where a rule lists the address
//! and the same request goes through, so none passes because the address is simply unreachable.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use eve_sandbox::egress::{self, EgressPolicy, Guarded};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixStream};

use super::egress::{
    allow, connect_req, exchange, get_req, http_upstream, proxy, read_exactly, status,
};

/// An address added to this host for one test (root only): on a dummy interface, or where the
/// kernel has no dummy interfaces, on `lo` under a label; removed when dropped.
struct Dummy {
    /// `ip addr del` arguments, or the interface to delete.
    undo: Vec<String>,
}

impl Dummy {
    /// Adds `cidr`; `None` (said on stderr) when this host refuses.
    fn with(cidr: &str) -> Option<Self> {
        Self::named("evt", cidr)
    }

    /// [`Dummy::with`] on an interface (or label) whose name starts with `prefix`.
    fn named(prefix: &str, cidr: &str) -> Option<Self> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}{}x{}",
            std::process::id() % 10_000,
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let ok = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if ok(&["link", "add", &name, "type", "dummy"]) {
            let dummy = Self {
                undo: vec!["link".into(), "del".into(), name.clone()],
            };
            if ok(&["addr", "add", cidr, "dev", &name]) && ok(&["link", "set", &name, "up"]) {
                return Some(dummy);
            }
            eprintln!("cannot put {cidr} on a dummy interface here");
            return None;
        }
        let label = format!("lo:{name}");
        if ok(&["addr", "add", cidr, "dev", "lo", "label", &label]) {
            return Some(Self {
                undo: vec![
                    "addr".into(),
                    "del".into(),
                    cidr.into(),
                    "dev".into(),
                    "lo".into(),
                ],
            });
        }
        eprintln!("cannot add {cidr} to this host (not root, or no `ip`)");
        None
    }
}

impl Drop for Dummy {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(&self.undo).output();
    }
}

/// This host's addresses off loopback (link-local left out), read with `ip -o addr`; when it has
/// none, one is added on a dummy interface (kept alive by the returned guard).
fn host_addresses() -> (Vec<IpAddr>, Option<Dummy>) {
    let read = || -> Vec<IpAddr> {
        let Ok(out) = Command::new("ip").args(["-o", "addr", "show"]).output() else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        // Addresses other tests of this suite add and remove (`evt…`) are not counted.
        text.lines()
            .filter(|line| !line.contains("evt"))
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                words.find(|w| *w == "inet" || *w == "inet6")?;
                words.next()?.split('/').next()?.parse::<IpAddr>().ok()
            })
            .filter(|ip| !ip.is_loopback())
            .filter(|ip| !matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
            .collect()
    };
    let found = read();
    if !found.is_empty() {
        return (found, None);
    }
    let dummy = Dummy::named("evh", "198.51.100.77/32");
    (read(), dummy)
}

/// Relays every connection on `bind` to `to`, counting them.
async fn forwarder(bind: SocketAddr, to: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                }
            });
        }
    });
    (addr, accepted)
}

fn bracketed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

#[tokio::test]
async fn all_refuses_private_ranges_and_every_form_that_carries_them() {
    let p = proxy(EgressPolicy::All, vec![]).await;
    for (target, kind) in [
        ("10.1.2.3:80", "private address 10.1.2.3"),
        ("172.16.0.9:80", "private address 172.16.0.9"),
        ("172.31.255.1:80", "private address 172.31.255.1"),
        ("192.168.1.1:80", "private address 192.168.1.1"),
        ("100.64.0.1:80", "private address 100.64.0.1"),
        ("100.127.255.254:80", "private address 100.127.255.254"),
        ("[fc00::1]:80", "private address fc00::1"),
        ("[fd12:3456::1]:80", "private address fd12:3456::1"),
        ("[fec0::1]:80", "private address fec0::1"),
        ("[::ffff:10.0.0.1]:80", "private address ::ffff:10.0.0.1"),
        ("[::10.0.0.1]:80", "private address ::a00:1"),
        ("[64:ff9b::a00:1]:80", "private address 64:ff9b::a00:1"),
        (
            "[64:ff9b:1::a9fe:a9fe]:80",
            "cloud metadata address 64:ff9b:1::a9fe:a9fe",
        ),
        ("[2002:a00:1::1]:80", "private address 2002:a00:1::1"),
        ("[2002:7f00:1::]:80", "loopback address 2002:7f00:1::"),
        // Teredo: the client's IPv4 address is stored inverted (127.0.0.1 → 80ff:fffe).
        (
            "[2001:0:4136:e378:8000:63bf:80ff:fffe]:80",
            "loopback address 2001:0:4136:e378:8000:63bf:80ff:fffe",
        ),
        ("192.0.0.192:80", "cloud metadata address 192.0.0.192"),
        ("169.254.170.2:80", "cloud metadata address 169.254.170.2"),
        (
            "255.255.255.255:80",
            "multicast or broadcast address 255.255.255.255",
        ),
        ("0.1.2.3:80", "unspecified address 0.1.2.3"),
    ] {
        let resp = exchange(&p.path, &connect_req(target)).await;
        assert_eq!(status(&resp), 403, "{target}: {resp}");
        assert!(
            resp.contains(&format!("{kind} not listed")),
            "{target}: {resp}"
        );
    }
    // Public addresses, v4 and v6 (plain and in each carrying form), are not guarded: the
    // checks above are about ranges, not about refusing everything.
    for public in [
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.1",
        "172.32.0.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ] {
        let ip: IpAddr = public.parse().unwrap();
        assert_eq!(egress::classify(ip), None, "{public}");
    }
    assert_eq!(
        egress::embedded_ipv4("2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().unwrap()),
        Some("192.0.2.45".parse().unwrap()),
        "Teredo's inverted client address"
    );
}

#[tokio::test]
async fn a_private_address_is_reached_only_when_listed() {
    let Some(_dummy) = Dummy::with("10.213.77.9/32") else {
        eprintln!("SKIPPED a_private_address_is_reached_only_when_listed: no dummy interface");
        return;
    };
    let up = super::egress::http_upstream_on("10.213.77.9:0").await;
    let port = up.addr.port();
    let url = format!("http://10.213.77.9:{port}/");
    let all = proxy(EgressPolicy::All, vec![]).await;
    let resp = exchange(&all.path, &get_req(&url)).await;
    assert_eq!(status(&resp), 403, "{resp}");
    assert!(resp.contains("private address 10.213.77.9"), "{resp}");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    // Twin: listed by address, the same request reaches it.
    let listed = proxy(allow(&[&format!("10.213.77.9:{port}")]), vec![]).await;
    let resp = exchange(&listed.path, &get_req(&url)).await;
    assert_eq!(status(&resp), 200, "{resp}");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn all_refuses_this_hosts_own_addresses_and_connect_is_judged_on_them() {
    let (addrs, _dummy) = host_addresses();
    if addrs.is_empty() {
        eprintln!(
            "SKIPPED all_refuses_this_hosts_own_addresses: no address off loopback, and none could be added"
        );
        return;
    }
    // A service that trusts loopback, and a plain TCP forwarder in front of it on each of the
    // host's own addresses: what a sandboxed tool with `network: all` would try to reach.
    let api = http_upstream().await;
    let mut tried = 0;
    for ip in addrs {
        let (fwd, forwarded) = forwarder(SocketAddr::new(ip, 0), api.addr).await;
        let target = format!("{}:{}", bracketed(ip), fwd.port());
        let forged = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            api.addr.port()
        );
        let all = proxy(EgressPolicy::All, vec![]).await;
        let resp = exchange(&all.path, forged.as_bytes()).await;
        assert_eq!(status(&resp), 403, "{target}: {resp}");
        let kind = egress::guard(ip).unwrap();
        assert!(
            matches!(kind, Guarded::Host | Guarded::Private),
            "{ip}: {kind:?}"
        );
        assert!(
            resp.contains(&format!("{} {ip} not listed", kind.describe())),
            "{target}: {resp}"
        );
        // The IPv6 forms of the same IPv4 address are refused too.
        if let IpAddr::V4(v4) = ip {
            let [a, b, c, d] = v4.octets();
            for form in [
                format!("[::ffff:{v4}]:{}", fwd.port()),
                format!(
                    "[64:ff9b::{:x}{:02x}:{:x}{:02x}]:{}",
                    a,
                    b,
                    c,
                    d,
                    fwd.port()
                ),
            ] {
                let resp = exchange(&all.path, &connect_req(&form)).await;
                assert_eq!(status(&resp), 403, "{form}: {resp}");
            }
        }
        assert_eq!(forwarded.load(Ordering::SeqCst), 0, "{target} was reached");

        // Twin: listed by address, the tunnel opens and the forged `Host` reaches the service
        // behind the forwarder; this is the attack `all` now refuses.
        let listed = proxy(allow(&[&target]), vec![]).await;
        let mut conn = UnixStream::connect(&listed.path).await.unwrap();
        conn.write_all(forged.as_bytes()).await.unwrap();
        let established = read_exactly(&mut conn, 39).await;
        assert_eq!(established, "HTTP/1.1 200 Connection established\r\n\r\n");
        conn.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.ends_with("hello"), "{answer}");
        assert_eq!(forwarded.load(Ordering::SeqCst), 1);
        tried += 1;
    }
    eprintln!("refused, then reached when listed, {tried} of this host's own addresses");
    assert!(api.accepted.load(Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn an_address_added_after_start_is_this_hosts_at_once() {
    // The host's addresses are read at each check, not once at start.
    let ip: IpAddr = "198.51.100.213".parse().unwrap();
    assert_eq!(egress::guard(ip), None, "a public address, before");
    let Some(dummy) = Dummy::with("198.51.100.213/32") else {
        eprintln!("SKIPPED an_address_added_after_start: no dummy interface");
        return;
    };
    assert!(egress::is_host_address(ip));
    assert_eq!(egress::guard(ip), Some(Guarded::Host));
    // A socket bound to it is reached only when listed.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip, 0)).unwrap();
    let listener = socket.listen(8).unwrap();
    let port = listener.local_addr().unwrap().port();
    let all = proxy(EgressPolicy::All, vec![]).await;
    let resp = exchange(&all.path, &connect_req(&format!("{ip}:{port}"))).await;
    assert!(
        resp.contains("this host's own address 198.51.100.213"),
        "{resp}"
    );
    drop(listener);
    drop(dummy);
    assert_eq!(egress::guard(ip), None, "a public address again, after");
}
