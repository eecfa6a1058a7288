//! What keeps one box from making another fail: a uid per box, a cgroup per box, and the
//! workspace quota watched during the call.
//!
//! The kernel counts processes (and inotify instances, queued signals, message queues) per uid on
//! the whole host, and `setrlimit` memory limits per process; so with every box on one uid and no
//! cgroup, one session holding its processes made every other session's tools fail, and three
//! processes under a per-process memory limit passed it together. Here each isolated launch
//! gets, when eve is root, a uid of its own leased from `EVE_SANDBOX_UIDS`
//! (`eve_sandbox::isolate::Uids`), and, where the host offers cgroups (v1 or v2), a cgroup of its
//! own bounding its processes and its memory in total (`eve_sandbox::isolate::Cgroups`); the
//! session workspace gets a quota (`EVE_WORKSPACE_MAX_BYTES`) watched while the call runs. What
//! the host cannot enforce is said by [`enforced`], which `eve info` and the servers' start-up
//! print.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use eve_compile::SandboxLimits;
use eve_sandbox::isolate::{
    self, BoxCgroup, Cgroups, Mechanism, Policy, Quota, UidLease, UidRange, Uids,
};
use serde::Serialize;

use super::{ExecConfig, ExecError, IsolatedSpec};

/// The per-box protections of one executor.
#[derive(Debug)]
pub(super) struct Fate {
    range: Result<UidRange, String>,
    uids: OnceLock<Result<Option<Arc<Uids>>, String>>,
    quota: Option<u64>,
    /// Tests only: every box on one uid, without cgroup or quota (the behaviour before).
    shared: AtomicBool,
}

/// What one box holds for its life: its uid and (on the cold path) its cgroup.
#[derive(Debug, Default)]
pub(super) struct BoxFate {
    pub(super) uid: Option<UidLease>,
    pub(super) cgroup: Option<BoxCgroup>,
}

impl Fate {
    pub(super) fn new(config: &ExecConfig) -> Fate {
        Fate {
            range: config.uids.clone(),
            uids: OnceLock::new(),
            quota: config.workspace_quota,
            shared: AtomicBool::new(false),
        }
    }

    pub(super) fn set_shared(&self, shared: bool) {
        self.shared.store(shared, Ordering::Relaxed);
    }

    pub(super) fn shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// The cgroups boxes get (`None`: none here, or the test-only shared fate).
    pub(super) fn cgroups(&self) -> Option<&'static Cgroups> {
        let c = Cgroups::shared();
        (!self.shared() && c.available()).then_some(c)
    }

    /// The leases of uids, when eve is root and the range can be used.
    fn uids(&self) -> Result<Option<Arc<Uids>>, String> {
        self.uids
            .get_or_init(|| {
                if !nix::unistd::geteuid().is_root() {
                    return Ok(None);
                }
                let range = self.range.clone()?;
                range.check_mapped()?;
                Uids::new(range, isolate::uid_lock_dir())
                    .map(Some)
                    .map_err(|e| format!("cannot lock sandbox uids: {e}"))
            })
            .clone()
    }

    /// Gives the launch `spec`'s policy its uid, its quota and (for the cold path) its own
    /// cgroup, limited by the policy's limits.
    pub(super) fn apply(
        &self,
        policy: &mut Policy,
        spec: &IsolatedSpec,
    ) -> Result<BoxFate, ExecError> {
        let mut held = BoxFate::default();
        if self.shared() {
            return Ok(held);
        }
        if let Ok(Some(uids)) = self.uids() {
            let lease = uids
                .lease(&policy.read_write)
                .map_err(|e| ExecError::Policy(e.to_string()))?;
            policy.uid = Some(lease.uid());
            held.uid = Some(lease);
        }
        if let (Some(max), Some(ws)) = (self.quota, &spec.workspace)
            && policy.read_write.contains(ws)
        {
            policy.quota = Some(Quota {
                path: ws.clone(),
                max_bytes: max,
                setting: Some(crate::env_vars::EVE_WORKSPACE_MAX_BYTES.to_owned()),
            });
        }
        if let Some(cgroups) = self.cgroups() {
            let made = cgroups
                .create()
                .map_err(|e| ExecError::Policy(format!("cannot create the box's cgroup: {e}")))?;
            if let Some(mut cgroup) = made {
                cgroup
                    .limit(policy.limits.processes, policy.limits.memory)
                    .map_err(|e| {
                        ExecError::Policy(format!("cannot set the box's cgroup limits: {e}"))
                    })?;
                policy.cgroup = Some(cgroup.spec());
                if let Some(lease) = &held.uid {
                    cgroup.hold_until_removed(Box::new(lease.clone()));
                }
                held.cgroup = Some(cgroup);
            }
        }
        Ok(held)
    }

    /// What is enforced for boxes with `limits`, in words.
    pub(super) fn enforced(&self, limits: &SandboxLimits) -> Enforced {
        let shared = self.shared();
        let uids = if shared {
            Err("every box on one uid (a test's shared fate)".to_owned())
        } else {
            self.uids()
        };
        enforced_with(limits, self.quota.filter(|_| !shared), !shared, uids)
    }
}

/// What the sandbox enforces on this machine for isolated calls with `limits`, one line each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enforced {
    /// Processes per call.
    pub processes: String,
    /// Memory per call and per process.
    pub memory: String,
    /// The uids boxes run as.
    pub uids: String,
    /// The session workspace's quota.
    pub workspace: String,
    /// The socket families a box may open.
    pub sockets: String,
}

impl Enforced {
    /// One line: `processes: …; memory: …; uids: …; workspace: …; sockets: …`.
    pub fn line(&self) -> String {
        format!(
            "processes: {}; memory: {}; uids: {}; workspace: {}; sockets: {}",
            self.processes, self.memory, self.uids, self.workspace, self.sockets
        )
    }
}

/// What this machine enforces for isolated calls with `limits`, eve's environment read through
/// `env` (`EVE_SANDBOX_UIDS`, `EVE_WORKSPACE_MAX_BYTES`), as this process would run them.
pub fn enforced(limits: &SandboxLimits, env: &dyn Fn(&str) -> Option<String>) -> Enforced {
    let config = ExecConfig::from_env(Path::new("").into(), Path::new("").into(), env);
    Fate::new(&config).enforced(limits)
}

fn enforced_with(
    limits: &SandboxLimits,
    quota: Option<u64>,
    cgroups_on: bool,
    uids: Result<Option<Arc<Uids>>, String>,
) -> Enforced {
    let cgroups = Cgroups::shared().enforcement();
    let how = |m: &Mechanism, controller: &str| match m {
        Mechanism::V1 => format!("cgroup v1 {controller}"),
        Mechanism::V2 => format!("cgroup v2 {controller}"),
    };
    let off = || Err("cgroups are off".to_owned());
    let (procs, mem) = if cgroups_on {
        (cgroups.processes.clone(), cgroups.memory.clone())
    } else {
        (off(), off())
    };
    let root = nix::unistd::geteuid().is_root();
    let processes = match &procs {
        Ok(m) => format!("{}, {} per call", how(m, "pids"), limits.processes),
        Err(why) => format!(
            "not bounded per call: only RLIMIT_NPROC, {} per {} ({why})",
            limits.processes,
            match (root, &uids) {
                (false, _) => "box (its own user namespace)",
                (true, Ok(Some(_))) => "box (its own uid)",
                (true, _) => "uid over the whole host, which every box shares",
            }
        ),
    };
    let memory = match &mem {
        Ok(m) => format!(
            "{}, {} per call in total{}; {} per process (RLIMIT_DATA)",
            how(m, "memory"),
            bytes(limits.memory),
            if cgroups.swap {
                ", swap included"
            } else {
                " (swap is not counted on this host)"
            },
            bytes(limits.memory)
        ),
        Err(why) => format!(
            "not bounded per call: only RLIMIT_DATA, {} per process ({why})",
            bytes(limits.memory)
        ),
    };
    let uids = match uids {
        Ok(Some(u)) => format!(
            "one per box from {} ({})",
            u.range(),
            crate::env_vars::EVE_SANDBOX_UIDS
        ),
        Ok(None) => "eve's own: eve is not root, so uids cannot be chosen".to_owned(),
        Err(why) => format!(
            "not one per box, every box runs as {}: {why}",
            isolate::DEFAULT_UID
        ),
    };
    let workspace = match quota {
        Some(q) => format!(
            "{} per session, watched while each call runs ({})",
            bytes(q),
            crate::env_vars::EVE_WORKSPACE_MAX_BYTES
        ),
        None => "no quota".to_owned(),
    };
    Enforced {
        processes,
        memory,
        uids,
        workspace,
        sockets: "unix, inet, inet6 and netlink (route, sock_diag) only".to_owned(),
    }
}

/// `4 GiB`, `512 MiB`, `1.5 GiB`, `300 bytes`.
fn bytes(n: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let unit = |u: u64, name: &str| {
        if n.is_multiple_of(u) {
            format!("{} {name}", n / u)
        } else {
            format!("{:.1} {name}", n as f64 / u as f64)
        }
    };
    match n {
        n if n >= GIB => unit(GIB, "GiB"),
        n if n >= MIB => unit(MIB, "MiB"),
        n if n >= KIB => unit(KIB, "KiB"),
        n => format!("{n} bytes"),
    }
}
