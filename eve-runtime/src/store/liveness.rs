//! Deciding that a process holding a lease (or owing a reply) is gone.
//!
//! A store records who drives a session (its lease) and who follows a platform reply; when the
//! holder dies without letting go, someone else must take over. Expiry always frees a lease; what
//! else counts as "gone" depends on how processes share the store, not on how rows are stored, so
//! it is a policy the store is given rather than SQL in one backend. [`LocalHost`] is the policy
//! of a store file shared by processes of one machine (SQLite): a process of this host that no
//! longer runs is gone at once. A store shared across machines (PostgreSQL) uses [`ExpiryOnly`]:
//! nobody can tell whether a remote process runs, so only an expired lease is taken (its fencing
//! token then refuses a zombie's writes).

/// A process, as a lease or a reply row names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRef {
    /// Process id.
    pub(crate) pid: u32,
    /// Host name.
    pub(crate) host: String,
}

impl ProcessRef {
    /// This process, named as a runtime of this host names itself in the leases it takes.
    pub(crate) fn this_process() -> Self {
        static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let host = HOST.get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .or_else(|_| std::fs::read_to_string("/etc/hostname"))
                .map(|s| s.trim().to_owned())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "localhost".to_owned())
        });
        Self {
            pid: std::process::id(),
            host: host.clone(),
        }
    }
}

/// Whether a stored lease still holds its session against this process: it has a holder, has
/// not expired, and `liveness` does not call its holder dead. What
/// [`super::Store::sessions_with_work`] leaves out, on every backend.
pub fn lease_is_live(
    liveness: &dyn Liveness,
    holder: &str,
    process: &ProcessRef,
    expires_at: i64,
    now: i64,
) -> bool {
    !holder.is_empty()
        && expires_at >= now
        && !liveness.lease_holder_dead(process, &ProcessRef::this_process())
}

/// When a holder that has not let go counts as gone.
pub trait Liveness: Send + Sync + std::fmt::Debug + 'static {
    /// Whether the unexpired lease of `holder` may be taken by `claimant` (another holder id):
    /// the holder is known to be dead.
    fn lease_holder_dead(&self, holder: &ProcessRef, claimant: &ProcessRef) -> bool;
    /// Whether the replies `owner` follows may be taken over by the process `me`.
    fn reply_owner_gone(&self, owner: &ProcessRef, me: &ProcessRef) -> bool;
}

/// Processes of one host share the store: a holder on this host whose process no longer runs
/// (or that is this very process, under an older holder id: a runtime restarted in-process) is
/// dead. A lease of another host is left to expire. A reply owed by another host is taken (a
/// store file does not span live hosts: that host is a container restarted under a new name).
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalHost;

impl Liveness for LocalHost {
    fn lease_holder_dead(&self, holder: &ProcessRef, claimant: &ProcessRef) -> bool {
        holder.host == claimant.host && (holder.pid == claimant.pid || !pid_alive(holder.pid))
    }

    fn reply_owner_gone(&self, owner: &ProcessRef, me: &ProcessRef) -> bool {
        owner.host != me.host || owner.pid == me.pid || !pid_alive(owner.pid)
    }
}

/// Only expiry frees a lease; a reply's owner is gone only when it is this process (for stores
/// shared by machines that cannot see each other's processes).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExpiryOnly;

impl Liveness for ExpiryOnly {
    fn lease_holder_dead(&self, _holder: &ProcessRef, _claimant: &ProcessRef) -> bool {
        false
    }

    fn reply_owner_gone(&self, owner: &ProcessRef, me: &ProcessRef) -> bool {
        owner == me
    }
}

/// Whether a process with this id runs on this host (a signal-0 probe; a process we may not
/// signal runs).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pid: u32, host: &str) -> ProcessRef {
        ProcessRef {
            pid,
            host: host.to_owned(),
        }
    }

    #[test]
    fn local_host_takes_dead_and_own_processes_only() {
        let me = at(std::process::id(), "here");
        let policy = LocalHost;
        assert!(policy.lease_holder_dead(&at(me.pid, "here"), &me));
        assert!(!policy.lease_holder_dead(&at(1, "here"), &me), "pid 1 runs");
        assert!(!policy.lease_holder_dead(&at(9, "elsewhere"), &me));
        assert!(policy.lease_holder_dead(&at(0, "here"), &me));
        assert!(policy.reply_owner_gone(&at(1, "elsewhere"), &me));
        assert!(!policy.reply_owner_gone(&at(1, "here"), &me));
    }

    #[test]
    fn expiry_only_never_declares_a_holder_dead() {
        let me = at(std::process::id(), "here");
        assert!(!ExpiryOnly.lease_holder_dead(&at(0, "here"), &me));
        assert!(ExpiryOnly.reply_owner_gone(&me.clone(), &me));
        assert!(!ExpiryOnly.reply_owner_gone(&at(0, "elsewhere"), &me));
    }
}
