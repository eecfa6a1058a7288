//! Model client tests against scripted HTTP servers on loopback.
