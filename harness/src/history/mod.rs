//! Beyond one run: the history of a scenario's runs, and where its metrics changed.
//!
//! `changepoint.rs`: PELT change points with a penalty set from the calibration's noise.

pub mod changepoint;
pub mod trend;
