//! The Arctic HTTP server: routes, job table, sampling state machine, error rules.
