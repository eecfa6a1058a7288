//! Isolation for the processes eve starts on an agent's behalf.
//!
//! `isolate` confines one command and all its descendants (user, mount, PID and network
//! namespaces, Landlock, seccomp, resource limits) using kernel primitives from the eve binary
//! itself, so nothing has to be installed. `egress` is the proxy that is a confined process's only
//! way to the network, enforcing the tool's network policy.

pub mod egress;
pub mod isolate;
